"""Typed reports built directly from the structs of ``aiprof.report.model`` (no trace, no analysis):
fast inputs for renderer tests of many ranks or hostile strings."""

from __future__ import annotations

from typing import Any

from aiprof.analysis.kernels import DeviceKernelStats, KernelNameStats, KernelStats
from aiprof.analysis.ops import OpGroupStats, OpStats
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.report.model import Device, RankReport, Report, Step, Summary, Totals
from aiprof.rules.finding import FindingRecord


def step(i: int, duration_ns: int, compute_share: float = 0.6) -> Step:
    compute = int(duration_ns * compute_share)
    breakdown = {b: 0 for b in BUCKETS} | {"compute": compute, "idle": duration_ns - compute}
    causes = {c: 0 for c in IDLE_CAUSES} | {"host": duration_ns - compute}
    return Step(name=f"ProfilerStep#{i}", number=i, start_ns=i * duration_ns, duration_ns=duration_ns,
                breakdown_ns=breakdown, idle_causes_ns=causes)


def totals(steps: list[Step]) -> Totals:
    duration = sum(s.duration_ns for s in steps)
    breakdown = {b: sum(s.breakdown_ns[b] for s in steps) for b in BUCKETS}
    causes = {c: sum(s.idle_causes_ns[c] for s in steps) for c in IDLE_CAUSES}
    durations = sorted(s.duration_ns for s in steps)
    return Totals(steps=len(steps), duration_ns=duration, mean_step_ns=duration // max(len(steps), 1),
                  median_step_ns=durations[len(durations) // 2], breakdown_ns=breakdown, idle_causes_ns=causes,
                  gpu_utilization=breakdown["compute"] / duration if duration else 0.0)


def rank(r: int, n_steps: int = 1, step_ns: int = 1_000_000, device: str = "gpu:0", name: str = "GPU",
         kernel: str = "gemm", op: str = "aten::mm", notes: tuple[str, ...] = ()) -> RankReport:
    steps = [step(i, step_ns + 1000 * (r % 7)) for i in range(n_steps)]
    t = totals(steps)
    kernels = kernel_section(kernel)
    ops = op_section(op)
    return RankReport(rank=r, rank_source="file name", path=f"/runs/rank{r}.json", event_count=10,
                      primary_device=device, devices=[Device(device=device, index=0, kind="gpu", name=name, steps=steps, totals=t)],
                      steps=steps, totals=t, notes=list(notes), kernels=kernels, ops=ops)


def kernel_section(name: str, count: int = 3, total_ns: int = 500_000) -> KernelStats:
    """A ``kernels`` section of one device with one kernel name."""
    row = KernelNameStats(name=name, count=count, total_ns=total_ns, mean_ns=total_ns / count, p50_ns=total_ns / count,
                          p95_ns=total_ns / count, min_ns=total_ns // count, max_ns=total_ns // count,
                          kernel_time_share_pct=100.0, tiny_count=0, tiny_total_ns=0, tiny_time_share_pct=0.0,
                          is_comm=False, sm_efficiency_pct=None, achieved_occupancy_pct=None)
    device = DeviceKernelStats(device=0, device_name="GPU", num_sms=None, num_sms_source="unknown", kernel_count=count,
                               kernel_total_ns=total_ns, kernel_busy_ns=total_ns, comm_kernel_total_ns=0,
                               tiny_threshold_ns=10_000, tiny_count=0, tiny_total_ns=0, tiny_count_pct=0.0,
                               tiny_time_share_pct=0.0, sm_efficiency_pct=None, achieved_occupancy_pct=None,
                               window_start_ns=0, window_end_ns=total_ns, window_source="device activity",
                               gpu_utilization_pct=100.0, est_sm_efficiency_pct=None, est_achieved_occupancy_pct=None,
                               sm_efficiency_note="unknown", kernels=(row,), kernel_names=1)
    return KernelStats(devices=(device,))


def op_section(name: str, count: int = 2, gpu_total_ns: int = 400_000, cpu_self_ns: int = 1000) -> OpStats:
    """An ``ops`` section with one op name."""
    group = OpGroupStats(name=name, input_shapes=None, count=count, cpu_total_ns=cpu_self_ns, cpu_self_ns=cpu_self_ns,
                         cpu_mean_ns=cpu_self_ns / count, gpu_self_ns=gpu_total_ns, gpu_total_ns=gpu_total_ns,
                         kernel_count_self=count, kernel_count_total=count)
    return OpStats(top_level_only=False, by_shapes=False, op_count=count, groups=(group,), group_count=1)


def report(ranks: list[RankReport], findings: list[FindingRecord] | None = None, sources: list[str] | None = None,
           warnings: list[str] | None = None) -> Report:
    slowest = max(ranks, key=lambda r: r.totals.median_step_ns)
    summary = Summary(rank_count=len(ranks), step_count=ranks[0].totals.steps, median_step_ns=slowest.totals.median_step_ns,
                      gpu_utilization=ranks[0].totals.gpu_utilization, slowest_rank=slowest.rank, device_kind="gpu")
    return Report(schema_version="1.0", generator="aiprof test", sources=sources or [r.path for r in ranks],
                  summary=summary, ranks=ranks, findings=findings or [], warnings=warnings or [])


def finding(title: str, fix: str = "do less", evidence: dict[str, Any] | None = None) -> FindingRecord:
    return FindingRecord(id="host_bound", title=title, severity="high", est_saving_ns_per_step=100_000,
                         share_of_step=0.1, saving_kind="estimate", confidence="medium",
                         evidence=evidence or {}, fix=fix)
