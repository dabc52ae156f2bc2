"""The ``host_split`` and ``long_calls`` views: the host's share of the steady steps split by the shape
of its gaps (short gaps and tiny ops; long gaps inside one call; long gaps outside any op), with the span
helpers the idle rules share (annotations, sync episodes on CPU traces, ops inside an interval set), and the
step with_stack did not lengthen (``uninflated_step``: the recording's own cost taken out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aiprof.analysis import intervals as iv
from aiprof.analysis.compile import compile_set
from aiprof.analysis.timeline import SYNC_CALL as _TIMELINE_SYNC
from aiprof.rules.evidence import Spread, long_gaps, spread
from aiprof.rules.views.idle import idle_sets
from aiprof.trace.model import I64, Kind

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext

DATALOADER = r"^enumerate\(DataLoader\)"
_SYNC_OP = r"^aten::(item|_local_scalar_dense|nonzero|tolist)$|^aten::(masked_select|unique|_unique2)$"
_SYNC_OP_CPU = r"^aten::(item|_local_scalar_dense)$"
_OPTIMIZER_SPANS = r"^Optimizer\.(step|zero_grad)#"
# The synchronising calls of the timeline's ``sync`` cause (blocking copies and frees too), plus driver copies.
SYNC_CALL = f"{_TIMELINE_SYNC.pattern}|^cuMemcpyDtoH"


def annotation_rows(ctx: RankContext, pattern: str) -> I64:
    rows = ctx.in_window(ctx.trace.rows_of(Kind.USER_ANNOTATION))
    selected: I64 = rows[ctx.trace.name_matches(rows, pattern)]
    return selected


@dataclass(frozen=True)
class HostSplit:
    """The host's share of the steady steps, by kind: overhead (short gaps / tiny ops), long gaps inside
    one host call (with that call's row), long gaps outside any op."""

    overhead_ns: float  # total over the steady steps
    overhead: Spread
    stalls: list[tuple[int, int, int]]  # (start, end, row of the innermost call covering it)
    gaps: list[tuple[int, int]]
    evidence: dict[str, Any]
    overhead_set: iv.IntervalSet | None = None  # the time overhead_ns counts (before any per-op netting)


def host_split(ctx: RankContext) -> HostSplit:
    """``ctx.views.host_split``; on a GPU whose host idle is under ``host_bound_share`` of the step, an empty
    split without computing it (no host finding can reach the threshold)."""
    if ctx.is_gpu and ctx.share(ctx.per_step("idle_causes_ns", "host")) < ctx.options.host_bound_share:
        return HostSplit(0.0, spread(np.zeros(0, dtype=np.int64)), [], [], {})
    return ctx.views.host_split


def find_host_split(ctx: RankContext) -> HostSplit:
    """The host's share of the steady steps (``ctx.views.host_split``): GPU from the ``host`` idle gaps, CPU
    from tiny ops and the gaps between ops."""
    return _gpu_host_split(ctx) if ctx.is_gpu else _cpu_host_split(ctx)


def _gpu_host_split(ctx: RankContext) -> HostSplit:
    """GPU: the ``host`` idle gaps, short (overhead) vs long inside one call (stall) vs long outside."""
    host = idle_sets(ctx)["host"]
    lengths = host[1] - host[0]
    long = long_gaps(lengths, ctx.options.stall_min_ns, ctx.options.stall_factor)
    short = lengths[~long]
    stalls: list[tuple[int, int, int]] = []
    gaps: list[tuple[int, int]] = []
    for a, b in zip(host[0][long].tolist(), host[1][long].tolist()):
        row = _covering_call(ctx, a, b)
        if row >= 0:
            stalls.append((a, b, row))
        else:
            gaps.append((a, b))
    evidence = {
        "host_idle_ns_per_step": int(lengths.sum() / ctx.step_count),
        "long_gap_ns_per_step": int(lengths[long].sum() / ctx.step_count),
    }
    return HostSplit(float(short.sum()), spread(short), stalls, gaps, evidence,
                     (host[0][~long], host[1][~long]))


def _covering_call(ctx: RankContext, start: int, end: int) -> int:
    """The innermost CPU op or runtime call that covers at least half of [start, end), else -1."""
    c = ctx.trace.columns
    rows = ctx.views.long_calls
    overlap = np.minimum(c.ts[rows] + c.dur[rows], end) - np.maximum(c.ts[rows], start)
    ok = rows[overlap * 2 >= end - start]
    return int(ok[np.argmin(c.dur[ok])]) if ok.size else -1


def find_long_calls(ctx: RankContext) -> I64:
    """CPU ops and runtime calls long enough to cover a stall (``ctx.views.long_calls``), by start time."""
    c = ctx.trace.columns
    # only calls long enough to cover a stall (filtered before the time sort, which keeps their order)
    rows = np.flatnonzero(ctx.trace.kind_mask(Kind.CPU_OP, Kind.RUNTIME, Kind.DRIVER) & (c.dur * 2 >= ctx.options.stall_min_ns))
    found: I64 = rows[np.argsort(c.ts[rows], kind="stable")]
    return found


def _cpu_host_split(ctx: RankContext) -> HostSplit:
    """CPU-only traces: tiny top-level ops and short gaps outside any op (overhead) vs long gaps outside
    any op (host_gaps), net of data loading, collectives and sync round trips (their own rules)."""
    from aiprof.analysis.timeline import COLLECTIVE_OP

    c = ctx.trace.columns
    ops = _top_level(ctx)
    if ops.size == 0:
        return HostSplit(0.0, spread(np.zeros(0, dtype=np.int64)), [], [], {})
    tiny = ops[c.dur[ops] < ctx.options.tiny_cpu_op_ns]
    windows = steady_set(ctx)
    outside = iv.subtract(windows, _span_set(ctx, ops))
    outside = iv.subtract(outside, _span_set(ctx, annotation_rows(ctx, COLLECTIVE_OP.pattern)))
    outside = iv.subtract(outside, _span_set(ctx, annotation_rows(ctx, DATALOADER)))
    outside = iv.subtract(outside, sync_episodes(ctx)[0])
    outside = iv.subtract(outside, compile_set(ctx.trace))  # compiling is the compile bucket's, not a gap
    lengths = outside[1] - outside[0]
    long = long_gaps(lengths, ctx.options.stall_min_ns, ctx.options.stall_factor)
    short_set = (outside[0][~long], outside[1][~long])
    overhead = iv.union(_span_set(ctx, tiny), short_set)
    overhead = iv.subtract(overhead, _span_set(ctx, annotation_rows(ctx, DATALOADER)))
    overhead = iv.subtract(overhead, sync_episodes(ctx)[0])
    overhead = iv.intersect(overhead, windows)
    net = iv.total(overhead) - ops_in(ctx, overhead, every=True) * ctx.options.profiler_ns_per_op
    events = np.concatenate((c.dur[tiny], lengths[~long]))
    evidence = {
        "tiny_ops_per_step": round(tiny.size / ctx.step_count, 1),
        "tiny_op_ns_per_step": int(c.dur[tiny].sum() / ctx.step_count),
        "short_gap_ns_per_step": int(lengths[~long].sum() / ctx.step_count),
        "long_gap_ns_per_step": int(lengths[long].sum() / ctx.step_count),
        "tiny_op_threshold_ns": ctx.options.tiny_cpu_op_ns,
    }
    gaps = list(zip(outside[0][long].tolist(), outside[1][long].tolist()))
    return HostSplit(float(max(net, 0)), spread(events), [], gaps, evidence, overhead)


def _top_level(ctx: RankContext) -> I64:
    """CPU ops with no CPU op above them (annotations such as ProfilerStep do not count)."""
    from aiprof.analysis.ops import top_level_ops

    mask = top_level_ops(ctx.trace)
    rows: I64 = ctx.cpu_ops[mask[ctx.cpu_ops]]
    return rows


def steady_set(ctx: RankContext) -> iv.IntervalSet:
    return ctx.steady_set  # the steady steps less any one-time costs cut out of them


def _span_set(ctx: RankContext, rows: I64) -> iv.IntervalSet:
    c = ctx.trace.columns
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def sync_episodes(ctx: RankContext) -> tuple[iv.IntervalSet, I64]:
    """CPU traces: runs of ``.item()``-like ops (top-level) as an interval set, and their rows. Two
    consecutive round trips belong to one episode (the Python loop around them) when no substantial op
    (≥ tiny_cpu_op_ns) runs between them and they are closer than ``sync_cluster_gap_ns`` — or closer than
    10 ms with only tiny ops between (a loop the scheduler paused). Calls inside ``Optimizer.step`` /
    ``zero_grad`` are the optimizer's own (AdamW reads its per-parameter step counters with ``.item()``), not
    the script's: left out."""
    c = ctx.trace.columns
    ops = _top_level(ctx)
    rows = ops[ctx.trace.name_matches(ops, _SYNC_OP_CPU)]
    optimizer = annotation_rows(ctx, _OPTIMIZER_SPANS)
    if rows.size and optimizer.size:
        inside = iv.merge(c.ts[optimizer], c.ts[optimizer] + c.dur[optimizer])
        k = np.searchsorted(inside[0], c.ts[rows], side="right") - 1
        rows = rows[~((k >= 0) & (c.ts[rows] < inside[1][np.maximum(k, 0)]))]
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


def ops_in(ctx: RankContext, cover: iv.IntervalSet, every: bool = False) -> int:
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


__all__ = ["DATALOADER", "SYNC_CALL", "HostSplit", "annotation_rows", "find_host_split", "find_long_calls", "host_split",
           "ops_in", "steady_set", "sync_episodes"]


def stack_cost_ns(ctx: RankContext, starts: I64, ends: I64) -> I64:
    """Per interval [start, end): the time with_stack's own recording took inside it, the ``python_function``
    events that start in it × :data:`~aiprof.analysis.stacks.WITH_STACK_NS_PER_CALL`, at most its length (zeros
    for a trace without Python stacks). Host savings subtract it: the fix removes the user's time, not the
    profiler's."""
    from aiprof.analysis.stacks import WITH_STACK_NS_PER_CALL

    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    py = ctx.trace.rows_of(Kind.PYTHON)
    if py.size == 0 or starts.size == 0:
        return np.zeros(starts.size, dtype=np.int64)
    ts = np.sort(ctx.trace.columns.ts[py])
    count = np.searchsorted(ts, ends, side="left") - np.searchsorted(ts, starts, side="left")
    cost: I64 = np.minimum(count * WITH_STACK_NS_PER_CALL, np.maximum(ends - starts, 0)).astype(np.int64)
    return cost


def find_uninflated_step(ctx: RankContext) -> float:
    """The mean steady step less what with_stack's own recording added to it: its cost (:func:`stack_cost_ns`)
    inside the steady steps on a CPU-only trace, inside the device's host-caused idle on a GPU one (while the
    device ran, the host's recording was hidden behind it). The measured mean without Python stacks. Host
    findings take their share of this step: recording the stacks lengthened the step as much as their gaps."""
    found = ctx.mean_step_ns
    if ctx.trace.rows_of(Kind.PYTHON).size and ctx.step_count:
        starts, ends = idle_sets(ctx)["host"] if ctx.is_gpu else steady_set(ctx)
        cost = float(stack_cost_ns(ctx, starts, ends).sum()) / ctx.step_count
        found = max(ctx.mean_step_ns - cost, 0.0)
    return found
