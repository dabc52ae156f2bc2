"""Rules on why the device waits: ``data_loading``, ``host_bound``, ``launch_bound``, ``sync``.

They read the idle causes of the timeline accounting (every idle ns of a step has exactly one cause, so
these savings never overlap), and on CPU-only traces the equivalent host-side patterns (tiny ops and
Python between them; per-element ``.item()`` round trips).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.analysis import intervals as iv
from aiprof.rules.context import RankContext
from aiprof.rules.evidence import ms_text, top_ops
from aiprof.rules.finding import Finding
from aiprof.rules.machine import MachineFacts, loader_workers_reason, loader_workers_text, machine_facts
from aiprof.trace import links
from aiprof.trace.model import I64, Kind

_DATALOADER = r"^enumerate\(DataLoader\)"
_MULTI_WORKER = "MultiProcessing"
_SYNC_OP = r"^aten::(item|_local_scalar_dense|nonzero|tolist)$|^aten::(masked_select|unique|_unique2)$"
_SYNC_OP_CPU = r"^aten::(item|_local_scalar_dense)$"
_SYNC_CALL = (
    r"(Synchronize|^cudaMemcpy$|^cudaMemcpy2D$|^hipMemcpy$|^cuMemcpyDtoH|^cudaMemcpyFromSymbol$)"
)


# ---------------------------------------------------------------------------------------------------
# data_loading
# ---------------------------------------------------------------------------------------------------
def data_loading(ctx: RankContext) -> list[Finding]:
    """The device idles while the host waits in ``DataLoader.__next__``."""
    exposed = ctx.per_step("idle_causes_ns", "data_loading")
    if ctx.share(exposed) < ctx.options.data_loading_share:
        return []
    rows = _annotations(ctx, _DATALOADER)
    names = Counter(ctx.names(rows))
    multi = any(_MULTI_WORKER in n for n in names)
    total = int(ctx.trace.columns.dur[rows].sum()) / ctx.step_count
    evidence: dict[str, Any] = {
        "exposed_data_loading_ns_per_step": int(exposed),
        "data_loader_ns_per_step": int(total),
        "next_calls_per_step": round(rows.size / ctx.step_count, 2),
        "data_loader": names.most_common(1)[0][0] if names else None,
        "workers": "multi-process" if multi else "single-process (num_workers=0)",
    }
    facts = machine_facts(ctx)
    evidence["cores"] = facts.cores
    evidence["recommended_num_workers"] = facts.loader_workers
    fix = _data_loading_fix(facts, multi)
    return [
        ctx.finding(
            "data_loading",
            f"Device idle {ms_text(exposed)} per step waiting for the next batch"
            if facts.is_gpu
            else f"Training loop waits {ms_text(exposed)} per step for the next batch",
            exposed,
            evidence=evidence,
            fix=fix,
            formula="mean over steady steps of the idle time whose host thread was inside DataLoader.__next__",
            confidence="high",
        )
    ]


def _data_loading_fix(facts: MachineFacts, multi: bool) -> str:
    """The loader fix sized to the machine (:mod:`aiprof.rules.machine`): ``num_workers`` from the host's
    cores (no number when the trace does not say them), and pinned memory, non-blocking copies and GPU
    decoding only when the profiled device is a GPU."""
    gpu = facts.is_gpu
    cores = facts.cores
    cheaper = (
        "make __getitem__ cheaper (decode/augment on the GPU, cache decoded samples)"
        if gpu
        else "make __getitem__ cheaper (cache decoded samples, preprocess offline, lighter transforms)"
    )
    share = (
        "" if gpu else " On a CPU-only run the workers share the cores with the model's compute threads: keep "
        "compute threads + workers ≤ cores (torch.set_num_threads)."
    )
    if facts.loader_workers == 0:
        return (
            f"Only {cores} core: background workers cannot load while the step computes, so {cheaper}, or run "
            "on a host with more cores."
        )
    if multi:
        if cores is None:
            more = "raise num_workers (up to the free cores; the trace does not say how many the host has)"
        elif cores - 1 <= 1:
            more = f"more workers will not fit on {cores} cores"
        else:
            more = f"raise num_workers (at most {cores - 1} on this {cores}-core host: one core stays with the training process)"
        keep = "persistent_workers=True, prefetch_factor=4" + (", pin_memory=True" if gpu else "")
        return f"The workers cannot keep up: {more}, {cheaper}, and keep {keep}.{share}"
    args, why = loader_workers_text(facts), loader_workers_reason(facts)
    if gpu:
        return (
            f"Load batches in background workers: DataLoader(dataset, batch_size=..., {args}, "
            "pin_memory=True, persistent_workers=True, prefetch_factor=2) and move batches with "
            f".to(device, non_blocking=True) ({why})."
        )
    return (
        f"Load batches in background workers: DataLoader(dataset, batch_size=..., {args}, "
        f"persistent_workers=True, prefetch_factor=2) ({why}).{share}"
    )


def _annotations(ctx: RankContext, pattern: str) -> I64:
    rows = ctx.in_window(ctx.trace.rows_of(Kind.USER_ANNOTATION))
    selected: I64 = rows[ctx.trace.name_matches(rows, pattern)]
    return selected


# ---------------------------------------------------------------------------------------------------
# host_bound
# ---------------------------------------------------------------------------------------------------
def host_bound(ctx: RankContext) -> list[Finding]:
    """The device is starved by Python / framework overhead on the host."""
    if ctx.is_gpu:
        saving = ctx.per_step("idle_causes_ns", "host")
        formula = "mean over steady steps of the idle time while the host ran ops/Python with no launch pending"
        evidence: dict[str, Any] = {"host_idle_ns_per_step": int(saving)}
        if ctx.share(saving) < ctx.options.host_bound_share:
            return []
    else:
        saving, evidence = _cpu_overhead(ctx)
        formula = (
            "mean over steady steps of |tiny top-level ops (< tiny_cpu_op_ns) ∪ time outside any op| minus "
            "data loading and sync round trips, each op's time net of the profiler's own per-op cost"
        )
        if ctx.share(saving) < ctx.options.tiny_op_share:
            return []
    evidence["top_ops"] = top_ops(ctx, ctx.cpu_ops)
    line = _hot_line(ctx)
    if line:
        evidence["source_line"] = line
    fix = (
        "Cut per-step host work: batch many small ops into few large ones (vectorise Python loops over "
        "tensors), torch.compile(model) to fuse them, CUDA graphs (torch.compile(mode='reduce-overhead')) "
        "on GPU, a larger batch, and move logging / Python bookkeeping out of the step (gc.freeze() after "
        "setup if GC pauses show)."
    )
    return [
        ctx.finding(
            "host_bound",
            f"Host overhead: {ms_text(saving)} per step spent in Python / tiny framework ops",
            saving,
            evidence=evidence,
            fix=fix,
            formula=formula,
            confidence="medium",
        )
    ]


def _cpu_overhead(ctx: RankContext) -> tuple[float, dict[str, Any]]:
    """CPU-only traces: time in tiny top-level ops plus time in no op at all, net of data loading and
    sync round trips (reported by their own rules)."""
    from aiprof.analysis.timeline import _COLLECTIVE_OP

    c = ctx.trace.columns
    ops = _top_level(ctx)
    if ops.size == 0:
        return 0.0, {}
    tiny = ops[c.dur[ops] < ctx.options.tiny_cpu_op_ns]
    windows = _steady_set(ctx)
    outside = iv.subtract(windows, _span_set(ctx, ops))
    outside = iv.subtract(outside, _span_set(ctx, _annotations(ctx, _COLLECTIVE_OP.pattern)))
    overhead = iv.union(_span_set(ctx, tiny), outside)
    overhead = iv.subtract(overhead, _span_set(ctx, _annotations(ctx, _DATALOADER)))
    overhead = iv.subtract(overhead, _sync_episodes(ctx)[0])
    overhead = iv.intersect(overhead, windows)
    net = iv.total(overhead) - _ops_in(ctx, overhead, every=True) * ctx.options.profiler_ns_per_op
    evidence = {
        "tiny_ops_per_step": round(tiny.size / ctx.step_count, 1),
        "tiny_op_ns_per_step": int(c.dur[tiny].sum() / ctx.step_count),
        "outside_ops_ns_per_step": int(iv.total(iv.intersect(outside, windows)) / ctx.step_count),
        "tiny_op_threshold_ns": ctx.options.tiny_cpu_op_ns,
    }
    return max(net, 0) / ctx.step_count, evidence


def _top_level(ctx: RankContext) -> I64:
    """CPU ops with no CPU op above them (annotations such as ProfilerStep do not count)."""
    from aiprof.analysis.ops import top_level_ops

    mask = top_level_ops(ctx.trace)
    rows: I64 = ctx.cpu_ops[mask[ctx.cpu_ops]]
    return rows


def _steady_set(ctx: RankContext) -> iv.IntervalSet:
    starts = np.array([s.start_ns for s in ctx.steps], dtype=np.int64)
    return iv.merge(starts, starts + np.array([s.duration_ns for s in ctx.steps], dtype=np.int64))


def _span_set(ctx: RankContext, rows: I64) -> iv.IntervalSet:
    c = ctx.trace.columns
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def _hot_line(ctx: RankContext) -> str | None:
    """The user source line seen most often above the steady-state ops (when stacks were recorded)."""
    lines = Counter(
        line for r in ctx.cpu_ops[:: max(ctx.cpu_ops.size // 200, 1)].tolist() if (line := ctx.source_line(r))
    )
    return lines.most_common(1)[0][0] if lines else None


# ---------------------------------------------------------------------------------------------------
# launch_bound
# ---------------------------------------------------------------------------------------------------
def launch_bound(ctx: RankContext) -> list[Finding]:
    """Many tiny kernels: the GPU waits for launches that were issued but had not started."""
    if not ctx.is_gpu:
        return []
    wait = ctx.per_step("idle_causes_ns", "launch")
    if ctx.share(wait) < ctx.options.launch_bound_share:
        return []
    c = ctx.trace.columns
    k = ctx.kernels
    if k.size / ctx.step_count < ctx.options.launch_bound_min_kernels:
        return []
    tiny = k[c.dur[k] < ctx.options.tiny_kernel_ns]
    launches = ctx.in_window(ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER))
    launches = launches[ctx.trace.name_matches(launches, "Launch")]
    evidence = {
        "launch_wait_ns_per_step": int(wait),
        "kernels_per_step": round(k.size / ctx.step_count, 1),
        "tiny_kernels_per_step": round(tiny.size / ctx.step_count, 1),
        "tiny_kernel_threshold_ns": ctx.options.tiny_kernel_ns,
        "median_kernel_ns": int(arrays.median(c.dur[k])) if k.size else 0,
        "median_launch_call_ns": int(arrays.median(c.dur[launches])) if launches.size else 0,
        "top_tiny_kernels": top_ops(ctx, tiny, 3),
    }
    return [
        ctx.finding(
            "launch_bound",
            f"Launch-bound: {evidence['kernels_per_step']} kernels per step, GPU waits {ms_text(wait)} on launches",
            wait,
            evidence=evidence,
            fix=(
                "Launch fewer, larger kernels: torch.compile(model, mode='reduce-overhead') (fusion + CUDA "
                "graphs), torch.cuda.graphs for static parts, fused/foreach optimizers (foreach=True or "
                "fused=True), and a larger batch per step."
            ),
            formula="mean over steady steps of idle time between a kernel's launch call and its start",
            confidence="medium",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# sync
# ---------------------------------------------------------------------------------------------------
def sync(ctx: RankContext) -> list[Finding]:
    """Host-device round trips inside the step (``.item()``, ``.cpu()``, synchronize)."""
    if ctx.is_gpu:
        saving = ctx.per_step("idle_causes_ns", "sync")
        rows = _sync_calls(ctx)
        formula = "mean over steady steps of the idle time from a synchronising call to the next launch"
        evidence: dict[str, Any] = {"sync_idle_ns_per_step": int(saving)}
        evidence["sync_calls_per_step"] = round(rows.size / ctx.step_count, 1)
        evidence["top_calls"] = top_ops(ctx, rows, 3)
        callers = _callers(ctx, rows)
    else:
        cover, rows = _sync_episodes(ctx)
        spans = iv.total(iv.intersect(cover, _steady_set(ctx)))
        saving = max(spans - _ops_in(ctx, cover, every=True) * ctx.options.profiler_ns_per_op, 0) / ctx.step_count
        formula = (
            "mean over steady steps of the span of each cluster of .item()-like ops (ops closer than "
            "sync_cluster_gap_ns), net of the profiler's own per-op cost"
        )
        evidence = {
            "round_trip_ns_per_step": int(saving),
            "item_calls_per_step": round(rows.size / ctx.step_count, 1),
            "episodes_per_step": round(int(cover[0].size) / ctx.step_count, 1),
        }
        callers = rows
    if ctx.share(saving) < ctx.options.sync_share or saving <= 0:
        return []
    evidence["top_ops"] = top_ops(ctx, callers, 3)
    lines = Counter(line for r in callers[:200].tolist() if (line := ctx.source_line(r)))
    if lines:
        evidence["source_lines"] = [line for line, _ in lines.most_common(3)]
    return [
        ctx.finding(
            "sync",
            f"Host round trips (.item()/.cpu()/synchronize) cost {ms_text(saving)} per step",
            saving,
            evidence=evidence,
            fix=(
                "Keep values on the device inside the step: accumulate metrics as tensors "
                "(total += loss.detach()) and call .item() / .cpu() once every N steps or after the loop; "
                "convert whole tensors at once (t.tolist()) instead of element by element; use "
                ".to(device, non_blocking=True) and avoid torch.cuda.synchronize() in the loop."
            ),
            formula=formula,
            confidence="medium",
        )
    ]


def _sync_calls(ctx: RankContext) -> I64:
    rows = ctx.in_window(ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER))
    selected: I64 = rows[ctx.trace.name_matches(rows, _SYNC_CALL)]
    return selected


def _callers(ctx: RankContext, calls: I64) -> I64:
    """The CPU ops that issued runtime calls (aten::item → cudaMemcpyAsync + cudaStreamSynchronize)."""
    ops = links.issuing_op(ctx.trace)[calls]
    found: I64 = unique(ops[ops >= 0])
    return found


def _sync_episodes(ctx: RankContext) -> tuple[iv.IntervalSet, I64]:
    """CPU traces: runs of ``.item()``-like ops (top-level) as an interval set, and their rows. Two
    consecutive round trips belong to one episode (the Python loop around them) when no substantial op
    (≥ tiny_cpu_op_ns) runs between them and they are closer than ``sync_cluster_gap_ns`` — or closer than
    10 ms with only tiny ops between (a loop the scheduler paused)."""
    c = ctx.trace.columns
    ops = _top_level(ctx)
    rows = ops[ctx.trace.name_matches(ops, _SYNC_OP_CPU)]
    if rows.size == 0:
        return iv.EMPTY, rows
    starts, ends = c.ts[rows], c.ts[rows] + c.dur[rows]
    big = np.sort(c.ts[ops[(c.dur[ops] >= ctx.options.tiny_cpu_op_ns) & ~ctx.trace.name_matches(ops, _SYNC_OP_CPU)]])
    prev_end = np.concatenate((starts[:1], ends[:-1]))
    gap = starts - prev_end
    nothing_between = np.searchsorted(big, prev_end) == np.searchsorted(big, starts)
    close = (gap <= ctx.options.sync_cluster_gap_ns) | (nothing_between & (gap <= 10_000_000))
    close[0] = False
    stretched = np.where(close, prev_end, starts)
    return iv.merge(stretched, ends), rows


def _ops_in(ctx: RankContext, cover: iv.IntervalSet, every: bool = False) -> int:
    """Ops (top-level, or ``every`` recorded op and memory event) that start inside the interval set: what
    the profiler's own per-event cost applies to."""
    c = ctx.trace.columns
    # Every event the profiler recorded on the host costs it time: ops and [memory] instants alike.
    ops = np.sort(np.concatenate((ctx.cpu_ops, ctx.in_window(ctx.trace.rows_of(Kind.MEMORY))))) if every else _top_level(ctx)
    ops = ops[np.argsort(c.ts[ops], kind="stable")]
    if ops.size == 0 or cover[0].size == 0:
        return 0
    ts = c.ts[ops]
    idx = np.searchsorted(cover[0], ts, side="right") - 1
    ok = idx >= 0
    return int((ts[ok] < cover[1][idx[ok]]).sum())




__all__ = ["data_loading", "host_bound", "launch_bound", "sync"]
