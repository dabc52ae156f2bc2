"""The events of one rank laid out for the HTML report's interactive timeline (``docs/reports.md``).

:func:`rank_timeline` picks from a loaded :class:`~aiprof.trace.model.Trace` what a person explores:

- a **steps** track: the step windows of the analysis (``ProfilerStep#N`` stretched to their device work);
- one track per **CPU thread**: CPU ops, ``record_function`` annotations and runtime calls (launches,
  syncs), each at its nesting depth (``row``); Python-function spans are left out;
- one track per **device stream**: kernels (collectives as communication), copies and sets.

Events are columns (numpy arrays, one entry per event, sorted by track, row, start); names are indices
into a string table of the names used. Times are absolute: ``base_time_ns + ts`` (the unix clock when the
trace has ``baseTimeNanoseconds``), so ranks line up on one clock. ``flow_src``/``flow_dst`` pair each
launch with the device activity it started (the trace's correlation / ac2g link).

A rank of very many events is capped (:func:`cap`): each track keeps its longest events (a fair share of
the budget per track, the steps track whole) and the events left out become per-row coverage bins (busy
ns per bin), so the page still shows where they were. Computed only when an HTML report is written: it
runs in the analysis worker (the diagnosis hook) while the trace is in memory.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

import numpy as np

from aiprof.analysis.comm import is_comm_kernel
from aiprof.analysis.steps import StepWindow
from aiprof.trace import links
from aiprof.trace.model import I64, Kind, Trace

__all__ = ["Category", "RankTimeline", "RowCoverage", "cap", "rank_budget", "rank_timeline", "MAX_EVENTS_PER_RANK",
           "MAX_DEPTH", "MAX_RANKS", "RUN_EVENTS"]

MAX_EVENTS_PER_RANK = 250_000  # what one rank may embed (docs/reports.md: page-size budget)
RUN_EVENTS = 400_000  # what a run may embed, shared by its ranks
MIN_EVENTS_PER_RANK = 2_000
MAX_RANKS = 64  # runs of more ranks get no interactive timeline (the static strips stay)
MAX_DEPTH = 24  # CPU nesting levels shown; deeper spans are counted as left out
COVERAGE_BINS = 1024  # bins over the rank's span for the events a cap leaves out

_CPU_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.DRIVER)
_DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


class Category(enum.IntEnum):
    """How the viewer colours an event (the numbers are the page's ``cat`` array)."""

    OP = 0
    ANNOTATION = 1
    RUNTIME = 2
    COMPUTE = 3
    COMMUNICATION = 4
    MEMCPY = 5
    MEMSET = 6
    STEP = 7
    CPU_COMMUNICATION = 8  # a host-side collective (gloo / c10d / nccl: ops): communication on a CPU run


@dataclass(frozen=True)
class RowCoverage:
    """Busy ns per bin of the events a cap left out of one row of one track (bins of ``bin_ns`` from
    ``start_ns``)."""

    track: int
    row: int
    start_ns: int
    bin_ns: int
    busy_ns: np.ndarray  # float32, one value per bin
    events: int  # how many events it stands for


@dataclass
class RankTimeline:
    """One rank's timeline events (see the module doc). ``total_events`` is what the rank had before the
    cap; ``left_out`` says what is not embedded and why (one line each)."""

    rank: int
    strings: list[str]
    track_kind: list[str]  # "steps", "cpu" or "stream"
    track_label: list[str]
    track: np.ndarray  # int32 per event
    row: np.ndarray  # int16 per event: nesting depth (CPU), lane (streams), 0 (steps)
    start_ns: I64  # absolute ns (base_time_ns + ts)
    dur_ns: I64
    name: np.ndarray  # int32 index into ``strings``
    cat: np.ndarray  # int8 Category
    flow_src: I64  # event index of a launch
    flow_dst: I64  # event index of the activity it started
    coverage: list[RowCoverage] = field(default_factory=list)
    total_events: int = 0
    left_out: list[str] = field(default_factory=list)
    clock: str = "trace"  # "unix" when the times read as unix ns (ranks line up), else the trace's own clock
    base_time_ns: int = 0  # the trace's baseTimeNanoseconds: start_ns - base_time_ns is the trace's own ts

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    @property
    def span_ns(self) -> tuple[int, int]:
        """First start and last end (0, 0 when empty)."""
        if not len(self):
            return (0, 0)
        return int(self.start_ns.min()), int((self.start_ns + self.dur_ns).max())


def rank_budget(ranks: int) -> int:
    """Events each rank's timeline may keep when the run has ``ranks`` trace files: the run's budget shared
    evenly (at least 2,000, at most 250,000 each); 0 (none gathered) past :data:`MAX_RANKS` ranks, where
    the workers would otherwise send thousands of timelines back to be thrown away."""
    if ranks > MAX_RANKS or ranks < 1:
        return 0
    return max(min(RUN_EVENTS // ranks, MAX_EVENTS_PER_RANK), MIN_EVENTS_PER_RANK)


def rank_timeline(
    trace: Trace, windows: list[StepWindow] | None = None, max_events: int = MAX_EVENTS_PER_RANK
) -> RankTimeline:
    """The timeline events of one rank: steps, CPU threads, device streams, launch flows (capped)."""
    origin = int(trace.base_time_ns)
    step_rows = trace.steps().rows
    cpu = trace.rows_of(*_CPU_KINDS)
    if step_rows.size:
        cpu = cpu[~np.isin(cpu, step_rows)]  # the steps have their own band
    depth = _depth(trace, cpu, step_rows)
    too_deep = depth > MAX_DEPTH
    left_out = [f"{int(too_deep.sum()):,} CPU spans nested deeper than {MAX_DEPTH} levels"] if too_deep.any() else []
    parts = _Parts(trace, origin)
    if windows:
        parts.add_steps(windows)
    parts.add_threads(cpu[~too_deep], depth[~too_deep])
    parts.add_streams(trace.rows_of(*_DEVICE_KINDS))
    timeline = parts.build(left_out, _clock(trace))
    timeline.total_events += int(too_deep.sum())
    return cap(timeline, max_events)


class _Parts:
    """The columns of a rank's timeline, gathered track by track (then sorted by track, row, start)."""

    def __init__(self, trace: Trace, origin: int) -> None:
        self.trace, self.origin = trace, origin
        self.kinds: list[str] = []
        self.labels: list[str] = []
        self.columns: list[tuple[np.ndarray, ...]] = []  # (track, row, start, dur, category, source row)
        self.step_names: list[str] = []

    def _add(self, kind: str, label: str, rows: np.ndarray, start: I64, dur: I64, cats: np.ndarray,
             source: I64) -> None:
        track = np.full(start.size, len(self.kinds), dtype=np.int32)
        self.columns.append((track, rows.astype(np.int16), start, dur, cats.astype(np.int8), source))
        self.kinds.append(kind)
        self.labels.append(label)

    def add_steps(self, windows: list[StepWindow]) -> None:
        """The steps band: the analysis' step windows (source row -1: named from ``step_names``)."""
        windows = sorted(windows, key=lambda w: w.start_ns)
        n = len(windows)
        start = np.array([w.start_ns for w in windows], dtype=np.int64) + self.origin
        dur = np.array([max(w.end_ns - w.start_ns, 0) for w in windows], dtype=np.int64)
        self.step_names = [w.name for w in windows]
        self._add("steps", "steps", np.zeros(n), start, dur, np.full(n, int(Category.STEP)), np.full(n, -1))

    def _rows(self, rows: I64) -> tuple[I64, I64]:
        c = self.trace.columns
        return c.ts[rows] + self.origin, np.maximum(c.dur[rows], 0)

    def add_threads(self, cpu: I64, depth: np.ndarray) -> None:
        """One track per CPU thread (pid, tid), busiest first; rows are nesting depths."""
        if not cpu.size:
            return
        c = self.trace.columns
        cats = _cpu_categories(self.trace, cpu)
        multi_pid = len(np.unique(c.pid[cpu])) > 1
        for (pid, tid), sel in _groups(c.pid[cpu], c.tid[cpu], busiest_first=True):
            name = self.trace.thread_names.get((pid, tid), "")
            label = (name or f"thread {tid}") + (f" · pid {pid}" if multi_pid else "")
            self._add("cpu", label, depth[sel], *self._rows(cpu[sel]), cats[sel], cpu[sel])

    def add_streams(self, dev: I64) -> None:
        """One track per device stream (device, stream); rows are lanes (:func:`_lanes`)."""
        if not dev.size:
            return
        c = self.trace.columns
        kind = c.kind[dev]
        cats = np.where(is_comm_kernel(self.trace)[dev], int(Category.COMMUNICATION), int(Category.COMPUTE))
        cats = np.where(kind == int(Kind.MEMCPY), int(Category.MEMCPY), cats)
        cats = np.where(kind == int(Kind.MEMSET), int(Category.MEMSET), cats)
        for (device, stream), sel in _groups(c.device[dev].astype(np.int64), c.tid[dev]):
            rows = dev[sel]
            lanes = _lanes(c.ts[rows], c.dur[rows])
            self._add("stream", f"gpu {device} · stream {stream}", lanes, *self._rows(rows), cats[sel], rows)

    def build(self, left_out: list[str], clock: str) -> RankTimeline:
        """The columns sorted by (track, row, start), names interned, flows found."""
        trace = self.trace
        if not self.columns:
            none = np.zeros(0, dtype=np.int64)
            return RankTimeline(trace.rank, [], [], [], none.astype(np.int32), none.astype(np.int16), none, none,
                                none.astype(np.int32), none.astype(np.int8), none, none, left_out=left_out,
                                clock=clock, base_time_ns=self.origin)
        track, row, start, dur, cat, source = (np.concatenate(col) for col in zip(*self.columns))
        order = np.lexsort((start, row, track))
        source = source[order]
        strings, names = _intern(trace, source, self.step_names)
        flow_src, flow_dst = _flows(trace, source)
        return RankTimeline(
            rank=trace.rank, strings=strings, track_kind=self.kinds, track_label=self.labels,
            track=track[order], row=row[order], start_ns=start[order], dur_ns=dur[order], name=names,
            cat=cat[order], flow_src=flow_src, flow_dst=flow_dst, total_events=int(order.size), left_out=left_out,
            clock=clock, base_time_ns=self.origin,
        )


def _groups(a: I64, b: I64, busiest_first: bool = False) -> list[tuple[tuple[int, int], I64]]:
    """The positions of each distinct (a, b) pair, by pair (or by count, largest first)."""
    ua, ia = np.unique(a, return_inverse=True)  # 1-D uniques: np.unique(axis=0) is ~10x slower
    ub, ib = np.unique(b, return_inverse=True)
    keys, inverse, counts = np.unique(ia.reshape(-1) * len(ub) + ib.reshape(-1), return_inverse=True,
                                      return_counts=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    which = np.argsort(-counts, kind="stable") if busiest_first else np.arange(len(keys))
    return [((int(ua[keys[g] // len(ub)]), int(ub[keys[g] % len(ub)])), order[bounds[g] : bounds[g + 1]])
            for g in which.tolist()]


def _intern(trace: Trace, source: I64, step_names: list[str]) -> tuple[list[str], np.ndarray]:
    """The string table of the names the events use (trace rows' names, then the step names) and each
    event's index into it (rows with source -1 are the steps, in order)."""
    traced = source >= 0
    used, local = np.unique(trace.columns.name[source[traced]], return_inverse=True)
    table = {trace.strings[i]: k for k, i in enumerate(used.tolist())}
    names = np.zeros(source.size, dtype=np.int32)
    names[traced] = local.reshape(-1)
    if step_names:
        names[~traced] = [table.setdefault(s, len(table)) for s in step_names]
    return list(table), names


def cap(timeline: RankTimeline, max_events: int) -> RankTimeline:
    """At most ``max_events`` events (the steps track always whole): every other track keeps its longest
    events, up to a common per-track quota chosen so that the total fits; what is left out becomes
    coverage bins per row and a line in ``left_out``. Flows lose the pairs whose ends are left out."""
    n = len(timeline)
    if n <= max_events:
        return timeline
    steps = np.array([k == "steps" for k in timeline.track_kind], dtype=bool)
    is_step = steps[timeline.track] if len(steps) else np.zeros(n, dtype=bool)
    budget = max(max_events - int(is_step.sum()), 0)
    others = np.flatnonzero(~is_step)
    counts = np.bincount(timeline.track[others], minlength=len(timeline.track_kind))
    quota = _quota(counts[counts > 0], budget)
    # Within each track, longest first (ties: earliest first); keep the first `quota` of each.
    by_len = others[np.lexsort((timeline.start_ns[others], -timeline.dur_ns[others], timeline.track[others]))]
    tracks = timeline.track[by_len]
    first = np.searchsorted(tracks, tracks, side="left")
    keep = np.zeros(n, dtype=bool)
    keep[is_step] = True
    keep[by_len[(np.arange(by_len.size) - first) < quota]] = True
    dropped = np.flatnonzero(~keep)
    coverage = list(timeline.coverage) + _coverage(timeline, dropped)
    new_index = np.cumsum(keep) - 1
    fkeep = keep[timeline.flow_src] & keep[timeline.flow_dst] if timeline.flow_src.size else np.zeros(0, dtype=bool)
    return replace(
        timeline,
        track=timeline.track[keep],
        row=timeline.row[keep],
        start_ns=timeline.start_ns[keep],
        dur_ns=timeline.dur_ns[keep],
        name=timeline.name[keep],
        cat=timeline.cat[keep],
        flow_src=new_index[timeline.flow_src[fkeep]].astype(np.int64),
        flow_dst=new_index[timeline.flow_dst[fkeep]].astype(np.int64),
        coverage=coverage,
        left_out=[*timeline.left_out, f"{dropped.size:,} of the shortest events (at most {quota:,} per track kept, "
                  "the longest; the others drawn as coverage)"],
    )


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------
UNIX_2000_NS = 946_684_800 * 10**9


def _clock(trace: Trace) -> str:
    """"unix" when ``base_time_ns + ts`` reads as unix ns (a ``baseTimeNanoseconds``, or Kineto timestamps
    that are unix µs already: after 2000-01-01), else "trace" (a clock of the trace's own)."""
    if trace.base_time_ns > 0:
        return "unix"
    first = trace.time_range_ns[0]
    return "unix" if first >= UNIX_2000_NS else "trace"


def _depth(trace: Trace, rows: I64, excluded: I64) -> np.ndarray:
    """Nesting depth of each CPU row among the shown rows (ancestors in ``excluded``, the step
    annotations, do not count), from the trace's parent links."""
    parent = links.parent(trace)
    shown = np.zeros(len(trace.columns), dtype=bool)
    shown[rows] = True
    shown[excluded] = False
    depth = np.zeros(rows.size, dtype=np.int64)
    p = parent[rows]
    for _ in range(4096):  # bounded: a parent chain cannot be longer than the rows
        live = p >= 0
        if not live.any():
            break
        depth += live & shown[np.maximum(p, 0)]
        p = np.where(live, parent[np.maximum(p, 0)], -1)
    return depth


def _cpu_categories(trace: Trace, rows: I64) -> np.ndarray:
    c = trace.columns
    comm_names = np.fromiter((_host_comm(s) for s in trace.strings),
                             dtype=bool, count=len(trace.strings))
    kind = c.kind[rows]
    cats = np.where(kind == int(Kind.USER_ANNOTATION), int(Category.ANNOTATION),
                    np.where(np.isin(kind, [int(Kind.RUNTIME), int(Kind.DRIVER)]), int(Category.RUNTIME),
                             int(Category.OP)))
    if comm_names.size:
        cats = np.where((kind != int(Kind.RUNTIME)) & (kind != int(Kind.DRIVER)) & comm_names[c.name[rows]],
                        int(Category.CPU_COMMUNICATION), cats)
    return cats.astype(np.int8)


# Host-side collectives and their waits (as analysis.timeline counts them): communication, not compute.
_HOST_COMM_PREFIXES = ("c10d::", "c10d_functional::", "_c10d_functional::", "gloo:", "nccl:", "rccl:", "hccl:",
                       "mpi:", "ucc:", "symm_mem::", "record_param_comms", "torch.distributed", "ProcessGroup")


def _host_comm(name: str) -> bool:
    return name.startswith(_HOST_COMM_PREFIXES)


def _lanes(ts: I64, dur: I64) -> np.ndarray:
    """Lane per event of one stream (time order): 0, or 1 for an event that overlaps the one before it
    (streams run one activity at a time; clock glitches can overlap two)."""
    if ts.size < 2:
        return np.zeros(ts.size, dtype=np.int16)
    order = np.argsort(ts, kind="stable")
    ends = np.maximum.accumulate((ts + dur)[order])
    overlap = np.zeros(ts.size, dtype=bool)
    overlap[order[1:]] = ts[order[1:]] < ends[:-1]
    return overlap.astype(np.int16)


def _flows(trace: Trace, source: I64) -> tuple[I64, I64]:
    """Launch → activity pairs among the events (event indices), from the trace's launch links."""
    launcher = links.launcher(trace)
    position = np.full(len(trace.columns), -1, dtype=np.int64)
    traced = np.flatnonzero(source >= 0)
    position[source[traced]] = traced
    dst = traced[launcher[source[traced]] >= 0]
    src = position[launcher[source[dst]]]
    ok = src >= 0
    return src[ok].astype(np.int64), dst[ok].astype(np.int64)


def _quota(counts: np.ndarray, budget: int) -> int:
    """The largest q with sum(min(counts, q)) <= budget (water filling)."""
    if counts.size == 0 or int(counts.sum()) <= budget:
        return int(counts.max()) if counts.size else 0
    lo, hi = 0, int(counts.max())
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(np.minimum(counts, mid).sum()) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _coverage(timeline: RankTimeline, dropped: I64) -> list[RowCoverage]:
    """Busy ns per bin, per (track, row), of the dropped events (each event's time spread over the bins
    it covers)."""
    if dropped.size == 0:
        return []
    lo, hi = timeline.span_ns
    bin_ns = max((hi - lo + COVERAGE_BINS - 1) // COVERAGE_BINS, 1)
    out: list[RowCoverage] = []
    keys = timeline.track[dropped].astype(np.int64) * 65536 + timeline.row[dropped].astype(np.int64)
    for key in np.unique(keys).tolist():
        sel = dropped[keys == key]
        start = timeline.start_ns[sel] - lo
        end = start + timeline.dur_ns[sel]
        # Exact spreading: cumulative coverage at the bin edges, differenced.
        edges = np.arange(COVERAGE_BINS + 1, dtype=np.int64) * bin_ns
        cum = _covered_before(edges, np.sort(start), np.sort(end))
        busy = np.diff(cum).astype(np.float32)
        out.append(RowCoverage(int(key // 65536), int(key % 65536), lo, int(bin_ns), busy, int(sel.size)))
    return out


def _covered_before(edges: I64, starts: I64, ends: I64) -> np.ndarray:
    """For each edge e: the summed length of [start, end) ∩ [-inf, e) over the events (sorted inputs)."""
    cs = np.concatenate([[0], np.cumsum(starts)])
    ce = np.concatenate([[0], np.cumsum(ends)])
    ns = np.searchsorted(starts, edges, side="left")  # events started before e
    ne = np.searchsorted(ends, edges, side="right")  # events ended at or before e
    # sum over started events of (min(end, e) - start) = sum_{ended}(end) + (ns - ne)*e - sum_{started}(start)
    out: I64 = ce[ne] + (ns - ne) * edges - cs[ns]
    return out
