"""Rules on communication: ``exposed_communication``, ``comm_bandwidth`` (per rank) and ``straggler``
(across ranks)."""

from __future__ import annotations

import statistics
from typing import Any

from aiprof.analysis.run import RunAnalysis
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.evidence import ms_text
from aiprof.rules.options import RuleOptions

# Achievable NCCL bus bandwidth inside one node (GB/s), from NCCL-tests' published all_reduce results on
# these systems (DGX-1 V100 NVLink, DGX A100 NVLink3/NVSwitch, DGX H100 NVLink4, MI300X Infinity Fabric).
# Matched as substrings of the device name. Unknown devices get no bandwidth finding.
LINK_BUSBW_GB_PER_S: tuple[tuple[str, float], ...] = (
    ("V100", 130.0),
    ("A100", 230.0),
    ("H100", 360.0),
    ("H200", 360.0),
    ("H800", 180.0),
    ("B200", 700.0),
    ("MI300X", 300.0),
    ("MI250", 150.0),
)
_MIN_MESSAGE_BYTES = 8 << 20  # smaller collectives are latency-bound: their bandwidth says little


def _comm(ctx: RankContext) -> Any:
    stats = ctx.extras.get("_comm")
    if stats is None:
        from aiprof.analysis.comm import comm_stats

        stats = comm_stats(ctx.trace)
        ctx.extras["_comm"] = stats
    return stats


def _top_collectives(ctx: RankContext, limit: int = 3) -> list[dict[str, Any]]:
    out = []
    for s in sorted(_comm(ctx).summary, key=lambda s: -s.total_ns)[:limit]:
        out.append({
            "collective": s.collective,
            "group_size": s.group_size,
            "message_bytes": s.message_bytes,
            "count": s.count,
            "total_ns": s.total_ns,
            "busbw_gb_per_s": None if s.busbw_gb_per_s is None else round(s.busbw_gb_per_s, 1),
        })
    return out


# ---------------------------------------------------------------------------------------------------
# exposed_communication
# ---------------------------------------------------------------------------------------------------
def exposed_communication(ctx: RankContext) -> list[Finding]:
    """Collectives that no compute kernel hides: the step waits for the network."""
    exposed = ctx.per_step("breakdown_ns", "communication")
    if not ctx.is_gpu or ctx.share(exposed) < ctx.options.comm_exposed_share:
        return []
    overlap = [o for o in _comm(ctx).overlap if o.device == ctx.device.device_index]
    evidence: dict[str, Any] = {
        "exposed_comm_ns_per_step": int(exposed),
        "overlap_pct": round(overlap[0].overlap_pct, 1) if overlap else None,
        "top_collectives": _top_collectives(ctx),
    }
    return [
        ctx.finding(
            "exposed_communication",
            f"Communication not hidden by compute: {ms_text(exposed)} per step",
            exposed,
            evidence=evidence,
            fix=(
                "Overlap collectives with compute: DDP(model, bucket_cap_mb=25-100, gradient_as_bucket_view=True) "
                "so buckets all-reduce during backward; FSDP with forward/backward prefetch; gradient accumulation "
                "with no_sync() to communicate less often; for tensor parallelism, async TP / sequence parallelism."
            ),
            formula="mean over steady steps of collective-kernel time during which no compute kernel ran "
            "(upper bound: interference would slow overlapped compute by 20-35 %)",
            confidence="medium",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# comm_bandwidth
# ---------------------------------------------------------------------------------------------------
def link_busbw(device_name: str) -> float | None:
    for key, value in LINK_BUSBW_GB_PER_S:
        if key.lower() in device_name.lower():
            return value
    return None


def comm_bandwidth(ctx: RankContext) -> list[Finding]:
    """Large collectives whose bus bandwidth is far below what the node's links deliver."""
    if not ctx.is_gpu:
        return []
    peak = link_busbw(ctx.trace.device_info(ctx.device.device_index).name)
    lo, hi = ctx.window
    big = [c for c in _comm(ctx).collectives if c.busbw_gb_per_s is not None and c.message_bytes
           and c.message_bytes >= _MIN_MESSAGE_BYTES and lo <= c.start_ns < hi]
    if peak is None or not big:
        return []
    total_ns = sum(c.dur_ns for c in big)
    busbw = sum(c.busbw_gb_per_s * c.dur_ns for c in big) / total_ns
    if busbw >= ctx.options.comm_bandwidth_fraction * peak:
        return []
    comm_ns = ctx.per_step("breakdown_ns", "communication")  # only exposed time costs step time
    target = ctx.options.eta * peak
    saving = comm_ns * max(1.0 - busbw / target, 0.0) * min(total_ns / ctx.step_count / max(comm_ns, 1), 1.0)
    if ctx.share(saving) < ctx.options.min_share:
        return []
    evidence = {
        "busbw_gb_per_s": round(busbw, 1),
        "link_busbw_gb_per_s": peak,
        "large_collectives_per_step": round(len(big) / ctx.step_count, 1),
        "min_message_bytes": _MIN_MESSAGE_BYTES,
        "top_collectives": _top_collectives(ctx),
    }
    return [
        ctx.finding(
            "comm_bandwidth",
            f"Collectives reach {busbw:.0f} GB/s bus bandwidth, {busbw / peak:.0%} of the links' ~{peak:.0f} GB/s",
            saving,
            evidence=evidence,
            fix=(
                "Check the topology and NCCL setup: nvidia-smi topo -m, NCCL_DEBUG=INFO (transport: NVLink vs "
                "PCIe/socket), NCCL_P2P_DISABLE / NCCL_IB_* not forcing a slow path, all GPUs on the same "
                "NVSwitch; bucket gradients into larger messages (bucket_cap_mb) so collectives are not "
                "latency-bound."
            ),
            formula="exposed communication per step × (1 − busbw / (eta × link busbw)), busbw by NCCL-tests' "
            "convention over collectives ≥ 8 MiB, link busbw from a per-GPU table of NCCL-tests results",
            kind="estimate",
            confidence="low",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# straggler (run rule)
# ---------------------------------------------------------------------------------------------------
def straggler(run: RunAnalysis, findings: list[Finding], options: RuleOptions) -> list[Finding]:
    """A rank the others wait for: its own work (step time minus time waiting in collectives) is longer,
    so the others' collectives start late and they idle."""
    if len(run.ranks) < 2:
        return []
    rows = []
    for r in run.ranks:
        steps = r.primary.steps[1:] if len(r.primary.steps) >= 3 else r.primary.steps
        if not steps:
            return []
        n = len(steps)
        step = sum(s.duration_ns for s in steps) / n
        wait = sum(s.idle_causes_ns["collective_wait"] + s.breakdown_ns["communication"] for s in steps) / n
        rows.append((r.rank, step, wait, step - wait))
    work = [w for _, _, _, w in rows]
    median_work = statistics.median(work)
    rank, step, wait, own = max(rows, key=lambda x: x[3])
    saving = own - median_work
    mean_step = statistics.fmean(s for _, s, _, _ in rows)
    share = saving / mean_step if mean_step else 0.0
    if share < options.straggler_share:
        return []
    slow = sorted((x for x in rows if x[3] - median_work >= options.straggler_share * mean_step), key=lambda x: -x[3])
    evidence = {
        "straggler_rank": rank,
        "slow_ranks": [x[0] for x in slow],
        "straggler_work_ns": int(own),
        "median_work_ns": int(median_work),
        "per_rank": [{"rank": r, "step_ns": int(s), "wait_ns": int(w), "work_ns": int(o)} for r, s, w, o in rows],
    }
    return [
        Finding(
            id="straggler",
            title=(f"Rank {rank} is a straggler" if len(slow) == 1 else
                   f"Ranks {', '.join(str(x[0]) for x in slow[:4])}{' …' if len(slow) > 4 else ''} are stragglers")
            + f": up to {saving / 1e6:.1f} ms more work per step than the median rank",
            severity=options.severity(share),
            est_saving_ns_per_step=int(saving),
            share_of_step=min(share, 1.0),
            saving_kind="upper_bound",
            saving_formula="(step − collective wait − exposed communication) of the slowest rank minus the "
            "median over ranks: what every rank would save if the straggler worked like the median one",
            confidence="medium",
            evidence=evidence,
            fix=(
                f"Find why rank {rank} works longer: uneven data (sequence lengths per rank: bucket or pack "
                "them), a slower GPU or throttling (nvidia-smi -q -d PERFORMANCE), CPU affinity / NUMA "
                "(torchrun --local-ranks-filter, numactl), or extra work on that rank (logging, eval, checkpoint)."
            ),
            ranks=tuple(r for r, _, _, _ in rows),
            device="",
        )
    ]
