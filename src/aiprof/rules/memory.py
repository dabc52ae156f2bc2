"""Rules on copies and memory: ``pageable_memcpy``, ``memcpy_exposed``, ``allocator_churn``,
``memory_pressure``."""

from __future__ import annotations


import numpy as np

from aiprof.arrays import unique
from aiprof.rules.context import RankContext
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.evidence import OpRow, ms_text, top_ops
from aiprof.rules.framework import fix_text
from aiprof.trace.model import I64, Kind

_PAGEABLE = r"(?i)pageable"
_PINNED = r"(?i)pinned"
_ALLOC_CALL = r"^(cudaMalloc|cudaFree|cuMemAlloc|cuMemFree|hipMalloc|hipFree|cudaMallocHost|cudaFreeHost|hipHostMalloc)"
_DEFAULT_PINNED_SPEEDUP = 2.0  # pinned H2D/D2H typically runs ~2x a pageable copy (staging buffer removed)


def _copies(ctx: RankContext) -> I64:
    c = ctx.trace.columns
    rows = ctx.trace.rows_of(Kind.MEMCPY)
    return ctx.in_window(rows[c.device[rows] == ctx.device.device_index])


def _direction(name: str) -> str:
    for tag in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP"):
        if tag in name:
            return tag
    return "other"


# ---------------------------------------------------------------------------------------------------
# pageable_memcpy
# ---------------------------------------------------------------------------------------------------
class PageableEvidence(Evidence, kw_only=True):
    """``pageable_memcpy``'s evidence: the pageable copies per step (count, bytes, time, rate), what pinned
    copies would reach (measured in the trace, or assumed), their directions and the ops that issued them."""

    pageable_copies_per_step: float
    pageable_bytes_per_step: int
    pageable_copy_ns_per_step: int
    pageable_gb_per_s: float | None
    pinned_basis: str
    directions: list[str]
    issuing_ops: list[OpRow]


@rank_rule(saving=Saving.TIME, options=("pageable_min_bytes", "min_share"), needs=("steps", "trace"))
def pageable_memcpy(ctx: RankContext) -> list[Finding]:
    """Host↔device copies from pageable memory: slower, and they block the host while staged."""
    if not ctx.is_gpu:
        return []
    c = ctx.trace.columns
    rows = _copies(ctx)
    pageable = rows[ctx.trace.name_matches(rows, _PAGEABLE) & (c.nbytes[rows] >= ctx.options.pageable_min_bytes)]
    if pageable.size == 0:
        return []
    pinned = rows[ctx.trace.name_matches(rows, _PINNED)]
    dur, nbytes = c.dur[pageable].astype(np.float64), c.nbytes[pageable].astype(np.float64)
    pinned_bw = _bandwidth(ctx, pinned)
    if pinned_bw is not None:
        ideal = nbytes / pinned_bw
        basis = f"pinned copies in this trace ran at {pinned_bw:.1f} GB/s"
    else:
        ideal = dur / _DEFAULT_PINNED_SPEEDUP
        basis = f"no pinned copy in the trace: assumed pinned copies run {_DEFAULT_PINNED_SPEEDUP:g}x faster"
    saving = float(np.maximum(dur - ideal, 0).sum()) / ctx.step_count
    if ctx.share(saving) < ctx.options.min_share:
        return []
    evidence = PageableEvidence(
        pageable_copies_per_step=round(pageable.size / ctx.step_count, 1),
        pageable_bytes_per_step=int(nbytes.sum() / ctx.step_count),
        pageable_copy_ns_per_step=int(dur.sum() / ctx.step_count),
        pageable_gb_per_s=round(float(nbytes.sum() / dur.sum()), 2) if dur.sum() > 0 else None,
        pinned_basis=basis,
        directions=sorted({_direction(n) for n in ctx.names(pageable)}),
        issuing_ops=top_ops(ctx, _issuers(ctx, pageable), 3),
    )
    return [
        ctx.finding(
            "pageable_memcpy",
            f"{evidence.pageable_copies_per_step} pageable copies per step ({ms_text(saving)} to gain from pinning)",
            saving,
            evidence=evidence,
            fix=fix_text(ctx.trace, "pageable_memcpy", (
                "Copy from pinned memory: DataLoader(..., pin_memory=True), or tensor.pin_memory() once for "
                "buffers you reuse, then .to(device, non_blocking=True)."
            )),
            formula="Σ per steady step of max(copy time − bytes / pinned bandwidth, 0); pinned bandwidth from "
            "the trace's pinned copies, else half the pageable copy time",
            kind="estimate",
            confidence="medium" if pinned_bw is not None else "low",
        )
    ]


def _bandwidth(ctx: RankContext, rows: I64) -> float | None:
    """Bytes per ns (= GB/s) of the larger copies among ``rows`` (small ones measure latency only)."""
    c = ctx.trace.columns
    big = rows[c.nbytes[rows] >= ctx.options.pageable_min_bytes]
    total = float(c.dur[big].sum())
    return float(c.nbytes[big].sum()) / total if big.size and total > 0 else None


def _issuers(ctx: RankContext, rows: I64) -> I64:
    ops = ctx.issuing_op[rows]
    found: I64 = unique(ops[ops >= 0])
    return found


# ---------------------------------------------------------------------------------------------------
# memcpy_exposed
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.TIME, options=("memcpy_exposed_share",), needs=("steps", "trace"))
def memcpy_exposed(ctx: RankContext) -> list[Finding]:
    """Copies that no kernel hides: the device does nothing else while they run."""
    exposed = ctx.per_step("breakdown_ns", "memcpy") + ctx.per_step("breakdown_ns", "memset")
    if not ctx.is_gpu or ctx.share(exposed) < ctx.options.memcpy_exposed_share:
        return []
    c = ctx.trace.columns
    rows = _copies(ctx)
    by_dir: dict[str, dict[str, int]] = {}
    for name, d, b in zip(ctx.names(rows), c.dur[rows].tolist(), c.nbytes[rows].tolist()):
        entry = by_dir.setdefault(_direction(name), {"count": 0, "ns": 0, "bytes": 0})
        entry["count"] += 1
        entry["ns"] += int(d)
        entry["bytes"] += max(int(b), 0)
    evidence = {
        "exposed_copy_ns_per_step": int(exposed),
        "by_direction_per_step": {
            k: {key: round(v / ctx.step_count) for key, v in e.items()} for k, e in sorted(by_dir.items())
        },
        "issuing_ops": top_ops(ctx, _issuers(ctx, rows), 3),
    }
    return [
        ctx.finding(
            "memcpy_exposed",
            f"Copies not overlapped with compute: {ms_text(exposed)} per step",
            exposed,
            evidence=evidence,
            fix=fix_text(ctx.trace, "memcpy_exposed", (
                "Overlap copies with compute: pin host memory, use .to(device, non_blocking=True), prefetch "
                "the next batch on a side stream (torch.cuda.Stream + wait_stream), and keep D2H copies "
                "(.cpu(), .item()) out of the step."
            )),
            formula="mean over steady steps of memcpy + memset time during which no kernel ran",
            confidence="medium",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# allocator_churn
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.TIME, options=("allocator_calls_per_step", "min_share"), needs=("all_steps", "trace"))
def allocator_churn(ctx: RankContext) -> list[Finding]:
    """cudaMalloc / cudaFree in steady state: the caching allocator is being bypassed or emptied."""
    steps = ctx.device.steps[1:]  # the first step fills the caching allocator: never steady state
    if not steps:
        return []
    c = ctx.trace.columns
    rows = ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    rows = rows[(c.ts[rows] >= steps[0].start_ns) & (c.ts[rows] < steps[-1].start_ns + steps[-1].duration_ns)]
    calls = rows[ctx.trace.name_matches(rows, _ALLOC_CALL)]
    per_step = calls.size / len(steps)
    if calls.size == 0 or per_step < ctx.options.allocator_calls_per_step:
        return []
    saving = float(c.dur[calls].sum()) / len(steps)
    if ctx.share(saving) < ctx.options.min_share:
        return []
    evidence = {
        "calls_per_step": round(per_step, 1),
        "api_ns_per_step": int(saving),
        "calls": top_ops(ctx, calls, 4),
        "issuing_ops": top_ops(ctx, _host_callers(ctx, calls), 3),
    }
    return [
        ctx.finding(
            "allocator_churn",
            f"{per_step:.1f} cudaMalloc/cudaFree calls per step in steady state ({ms_text(saving)})",
            saving,
            evidence=evidence,
            fix=(
                "Let the caching allocator reuse memory: remove torch.cuda.empty_cache() from the loop, keep "
                "shapes static (pad / bucket variable lengths), and set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to stop fragmentation-driven frees."
            ),
            formula="Σ per steady step of the cudaMalloc/cudaFree API time (they also synchronise the device: "
            "the bubble after them is in the sync finding)",
            confidence="medium",
        )
    ]


def _host_callers(ctx: RankContext, calls: I64) -> I64:
    from aiprof.trace import links

    ops = links.issuing_op(ctx.trace)[calls]
    found: I64 = unique(ops[ops >= 0])
    return found


# ---------------------------------------------------------------------------------------------------
# memory_pressure
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.NONE, options=("memory_pressure_fraction",), needs=("trace",))
def memory_pressure(ctx: RankContext) -> list[Finding]:
    """Peak reserved device memory near the device's capacity (from ``[memory]`` events)."""
    if not ctx.is_gpu:
        return []
    c = ctx.trace.columns
    dev = ctx.device.device_index
    rows = np.flatnonzero((c.kind == int(Kind.MEMORY)) & (c.mem_device == dev))
    capacity = ctx.trace.device_info(dev).total_memory_bytes
    if rows.size == 0 or capacity <= 0:
        return []
    peak_reserved = int(c.total_reserved[rows].max())
    peak_allocated = int(c.total_allocated[rows].max())
    fraction = max(peak_reserved, peak_allocated) / capacity
    if fraction < ctx.options.memory_pressure_fraction:
        return []
    evidence = {
        "peak_reserved_bytes": peak_reserved,
        "peak_allocated_bytes": peak_allocated,
        "device_memory_bytes": capacity,
        "peak_fraction": round(fraction, 4),
        "fragmentation_bytes": max(peak_reserved - peak_allocated, 0),
    }
    return [
        ctx.finding(
            "memory_pressure",
            f"Peak memory {fraction:.0%} of the device's {capacity / 2**30:.0f} GiB",
            0,
            evidence=evidence,
            fix=(
                "Make room before you hit OOM or allocator thrashing: activation checkpointing "
                "(torch.utils.checkpoint), AMP / bf16 activations, a smaller micro-batch with gradient "
                "accumulation, and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation."
            ),
            formula="no time saving: peak(total reserved, total allocated) / device memory ≥ "
            "memory_pressure_fraction is a risk (OOM, cudaMalloc retries), and room a larger batch could use",
            confidence="high",
            severity="medium" if fraction < 0.97 else "high",
        )
    ]
