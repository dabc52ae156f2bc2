"""Typed reports built directly from the structs of ``aiprof.report.model`` (no trace, no analysis):
fast inputs for renderer tests of many ranks or hostile strings."""

from __future__ import annotations

from typing import Any

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
    kernels: dict[str, Any] = {"devices": [{"device": 0, "kernels": [{"name": kernel, "count": 3, "total_ns": 500_000, "mean_ns": 1000}]}]}
    ops: dict[str, Any] = {"groups": [{"name": op, "count": 2, "gpu_total_ns": 400_000, "cpu_self_ns": 1000}]}
    return RankReport(rank=r, rank_source="file name", path=f"/runs/rank{r}.json", event_count=10,
                      primary_device=device, devices=[Device(device=device, index=0, kind="gpu", name=name, steps=steps, totals=t)],
                      steps=steps, totals=t, notes=list(notes), kernels=kernels, ops=ops)


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
