"""CUDA/HIP graph capture in a trace: where the capture ranges are, and whether the trace *is* a capture.

A serving engine (vLLM, SGLang) or ``torch.cuda.graph`` records a graph by running the model under stream
capture: between ``cudaStreamBeginCapture`` and ``cudaStreamEndCapture`` (``hip…`` on ROCm) every launch
call is recorded into the graph, not executed, so the host is busy and the device runs nothing; then
``cudaGraphInstantiate`` builds the executable graph. A trace of that phase (vLLM writes one per rank:
``graph_capture_rank_0…``) has thousands of launch calls and almost no device activity. It is a *kind* of
trace, not a damaged one:

* its launch calls inside capture ranges are not expected to have device activity, so the coverage check
  (:mod:`aiprof.analysis.coverage`) never reads them as work whose device side was lost;
* a trace that is mostly capture (:attr:`GraphCaptureInfo.is_capture_trace`) is described, not judged:
  nothing is clipped or left out, and the rules give no steady-state finding on it.

The numbers (``graph_capture`` section of each rank): ``captures`` (begin/end pairs; an unmatched begin
or end counts as one, cut by the trace), ``instantiations``, ``captured_ns`` (the union of the ranges),
``captured_launches`` (launch calls inside their thread's ranges), ``executed_launches`` (the other launch
calls), ``gpu_busy_ns`` (union of device activity) over ``span_ns`` (first to last event of the trace).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType
import numpy as np

from aiprof.analysis import intervals as iv
from aiprof.trace.cycles import Identity, identity, merge_cycle_sets_at
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

# Stream capture (torch.cuda.graph, vLLM / SGLang capture phase) and graph instantiation. Not
# cudaStreamGetCaptureInfo / cudaStreamIsCapturing: every caching-allocator call asks those.
BEGIN_CAPTURE = r"^(cuda|hip|cu)StreamBeginCapture"
END_CAPTURE = r"^(cuda|hip|cu)StreamEndCapture"
INSTANTIATE = r"^(cuda|hip|cu)GraphInstantiate"
# Runtime / driver calls that put work on the device (cudaLaunchKernel, hipModuleLaunchKernel, cudaGraphLaunch,
# cudaMemcpyAsync, cudaMemsetAsync, …). cudaLaunchHostFunc runs a host callback: no device activity expected.
LAUNCH_PATTERN = r"Launch|Memcpy|Memset"
NO_DEVICE_WORK = r"HostFunc"

# A trace is a capture when its device was busy under this share of its span and at least as many launch
# calls were captured as executed (a steady run that re-captures once, or a capture followed by busy
# replays, is not: its replays keep the device busy, its executed launches outnumber the captured).
CAPTURE_TRACE_MAX_BUSY = 0.10

_CACHE_KEY = "analysis.graphs.capture"


@dataclass(frozen=True)
class CaptureRanges:
    """The capture ranges of a trace: merged over threads, and per host thread (pid, tid)."""

    merged: iv.IntervalSet
    per_thread: dict[tuple[int, int], iv.IntervalSet]
    captures: int
    instantiations: int
    runtime: str = ""  # whose capture calls they are: "CUDA", "HIP", "CUDA and HIP" ("" without any)


def launch_rows(trace: Trace) -> I64:
    """Runtime/driver calls that put work on a device, in time order."""
    rows = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    keep = trace.name_matches(rows, LAUNCH_PATTERN) & ~trace.name_matches(rows, NO_DEVICE_WORK)
    kept: I64 = rows[keep]
    return kept


def capture_ranges(trace: Trace) -> CaptureRanges:
    """Per host thread, each ``*StreamBeginCapture`` to the next ``*StreamEndCapture`` (a begin without end
    runs to the thread's last call, an end without begin from its first: the trace cut the capture), plus
    every ``*GraphInstantiate`` call (in the merged ranges). Cached on the trace."""
    cached: CaptureRanges | None = trace.cache.get(_CACHE_KEY)
    if cached is not None:
        return cached
    c = trace.columns
    calls = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    begin = calls[trace.name_matches(calls, BEGIN_CAPTURE)]
    end = calls[trace.name_matches(calls, END_CAPTURE)]
    inst = calls[trace.name_matches(calls, INSTANTIATE)]
    per_thread: dict[tuple[int, int], iv.IntervalSet] = {}
    captures = 0
    marks = np.concatenate((begin, end))
    for pid, tid in sorted(set(zip(c.pid[marks].tolist(), c.tid[marks].tolist()))):
        starts, ends = _thread_ranges(trace, calls, begin, end, int(pid), int(tid))
        captures += len(starts)
        per_thread[(int(pid), int(tid))] = iv.merge(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
    merged = iv.union(*per_thread.values(), iv.merge(c.ts[inst], c.ts[inst] + c.dur[inst]))
    found = CaptureRanges(merged, per_thread, captures, int(inst.size), _runtime(trace, np.concatenate((marks, inst))))
    trace.cache[_CACHE_KEY] = found
    return found


def _runtime(trace: Trace, rows: I64) -> str:
    """The runtime of these capture calls, from their names: ``hip…`` HIP, ``cuda…`` / ``cu…`` (driver) CUDA."""
    prefixes = {"HIP" if trace.strings[int(n)].startswith("hip") else "CUDA" for n in np.unique(trace.columns.name[rows])}
    return " and ".join(sorted(prefixes))


def _thread_ranges(trace: Trace, calls: I64, begin: I64, end: I64, pid: int, tid: int) -> tuple[list[int], list[int]]:
    """One thread's capture ranges (begin → end; nested begins on other streams make one range)."""
    c = trace.columns
    mine = calls[(c.pid[calls] == pid) & (c.tid[calls] == tid)]
    first, last = int(c.ts[mine].min()), int((c.ts[mine] + c.dur[mine]).max())
    b = begin[(c.pid[begin] == pid) & (c.tid[begin] == tid)]
    e = end[(c.pid[end] == pid) & (c.tid[end] == tid)]
    events = sorted([(int(t), 0) for t in c.ts[b].tolist()] + [(int(t), 1) for t in (c.ts[e] + c.dur[e]).tolist()])
    starts: list[int] = []
    ends: list[int] = []
    open_at: int | None = None
    for ts, is_end in events:
        if not is_end:
            open_at = ts if open_at is None else open_at
            continue
        starts.append(first if open_at is None else open_at)
        ends.append(ts)
        open_at = None
    if open_at is not None:
        starts.append(open_at)
        ends.append(last)
    return starts, ends


def captured_mask(trace: Trace, rows: I64) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per row of ``rows`` (host calls): whether it ran inside a capture range of its own thread, i.e. was
    recorded into a graph rather than executed."""
    out = np.zeros(rows.size, dtype=bool)
    ranges = capture_ranges(trace)
    if not ranges.per_thread or not rows.size:
        return out
    c = trace.columns
    pid, tid, ts = c.pid[rows], c.tid[rows], c.ts[rows]
    for (p, t), (starts, ends) in ranges.per_thread.items():
        sel = np.flatnonzero((pid == p) & (tid == t))
        if not sel.size or not starts.size:
            continue
        k = np.searchsorted(starts, ts[sel], side="right") - 1
        inside = (k >= 0) & (ts[sel] < ends[np.maximum(k, 0)])
        out[sel[inside]] = True
    return out


@dataclass(frozen=True)
class GraphCaptureInfo:
    """What a trace holds of graph capture (module doc for each number)."""

    captures: int
    instantiations: int
    captured_ns: int
    captured_launches: int
    executed_launches: int
    gpu_busy_ns: int
    span_ns: int
    runtime: str = ""  # CaptureRanges.runtime

    @property
    def has_capture(self) -> bool:
        return self.captures + self.instantiations > 0

    @property
    def busy_share(self) -> float:
        """Device busy (union of device activity) over the trace's span."""
        return self.gpu_busy_ns / self.span_ns if self.span_ns else 0.0

    @property
    def is_capture_trace(self) -> bool:
        """The trace records a capture phase: the device ran almost nothing while launches were captured."""
        return (self.has_capture and self.busy_share < CAPTURE_TRACE_MAX_BUSY
                and self.captured_launches >= self.executed_launches)

    def note(self) -> str | None:
        """One sentence for the report's top (None unless the trace is a capture)."""
        if not self.is_capture_trace:
            return None
        what = f"{self.captures} {self.runtime or 'CUDA/HIP'} graph capture{'s' if self.captures != 1 else ''}"
        return (
            f"Graph capture trace: {what} ({self.instantiations} instantiation"
            f"{'s' if self.instantiations != 1 else ''}, {self.captured_launches:,} launch calls recorded into "
            f"graphs, {self.captured_ns / 1e6:.1f} ms); the device was busy {100 * self.busy_share:.1f}% of the "
            "trace, as in any capture. A kind of trace, not a truncated one: nothing is left out and no "
            "steady-state finding is given. To judge execution, profile the replay; analyse it with this capture "
            "to attribute the replayed kernels to ops."
        )


def graph_capture_info(trace: Trace) -> GraphCaptureInfo:
    """The trace's graph capture summary (zeros when it has none)."""
    ranges = capture_ranges(trace)
    c = trace.columns
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    busy = iv.total(iv.merge(c.ts[gpu], c.ts[gpu] + c.dur[gpu])) if gpu.size else 0
    span = int((c.ts + c.dur).max() - c.ts.min()) if len(c) else 0
    launches = launch_rows(trace)
    captured = int(captured_mask(trace, launches).sum())
    return GraphCaptureInfo(ranges.captures, ranges.instantiations, iv.total(ranges.merged), captured,
                            int(launches.size) - captured, busy, span, ranges.runtime)


class GraphCaptureSection(msgspec.Struct, kw_only=True):
    """The report section (``ranks[].graph_capture``): :class:`GraphCaptureInfo`'s counts, whether the trace is
    a capture, its note (None unless it is), and ``replay_attribution`` (:class:`ReplayAttributionSection`)
    when the trace is a replay analysed with its capture (:func:`attach_capture`)."""

    captures: int
    instantiations: int
    captured_ns: int
    captured_launches: int
    executed_launches: int
    gpu_busy_ns: int
    span_ns: int
    capture_trace: bool
    note: str | None
    replay_attribution: ReplayAttributionSection | UnsetType = UNSET


class ReplayAttributionSection(msgspec.Struct, kw_only=True):
    """A replay analysed with its capture (:class:`ReplayAttribution`): the capture file's name, the replayed
    GPU time and how much of it went to the captured ops (shares rounded to 4 digits), ``by_op`` the largest
    ops (op name → ns; ``op_count`` counts all)."""

    capture: str
    graph_launches: int
    matched_launches: int
    replayed_kernels: int
    replayed_ns: int
    attributed_ns: int
    attributed_share: float
    unattributed_ns: int
    unattributed_share: float
    op_count: int
    by_op: dict[str, int]


def graph_capture_section(trace: Trace) -> GraphCaptureSection:
    """The report section of the trace's graph capture (zeros when it has none)."""
    info = graph_capture_info(trace)
    paired = paired_capture(trace)
    return GraphCaptureSection(
        captures=info.captures, instantiations=info.instantiations, captured_ns=info.captured_ns,
        captured_launches=info.captured_launches, executed_launches=info.executed_launches,
        gpu_busy_ns=info.gpu_busy_ns, span_ns=info.span_ns, capture_trace=info.is_capture_trace, note=info.note(),
        replay_attribution=paired[1].section(paired[0], TOP_OPS) if paired is not None else UNSET,
    )


# ---------------------------------------------------------------------------------------------------
# Replayed kernels attributed to the ops that were captured (a replay trace analysed with its capture)
# ---------------------------------------------------------------------------------------------------
GRAPH_LAUNCH = r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)"


@dataclass(frozen=True)
class ReplayAttribution:
    """Replayed GPU time (kernels launched by a graph launch) and how much of it was attributed to the op
    that launched the same node during the capture (``by_op``: op name → ns, largest first)."""

    graph_launches: int
    matched_launches: int
    replayed_kernels: int
    replayed_ns: int
    attributed_ns: int
    by_op: dict[str, int]

    @property
    def attributed_share(self) -> float:
        return self.attributed_ns / self.replayed_ns if self.replayed_ns else 0.0

    @property
    def unattributed_share(self) -> float:
        """Replayed GPU time no captured op was found for, over all replayed GPU time (0 when none replayed)."""
        return 1.0 - self.attributed_share if self.replayed_ns else 0.0

    def section(self, capture: str, top: int | None = None) -> ReplayAttributionSection:
        """The report's numbers for the capture file ``capture``; ``by_op`` keeps the ``top`` largest ops (all
        with None)."""
        by_op = dict(list(self.by_op.items())[:top]) if top is not None else self.by_op
        return ReplayAttributionSection(
            capture=capture, graph_launches=self.graph_launches, matched_launches=self.matched_launches,
            replayed_kernels=self.replayed_kernels, replayed_ns=self.replayed_ns, attributed_ns=self.attributed_ns,
            attributed_share=round(self.attributed_share, 4), unattributed_ns=self.replayed_ns - self.attributed_ns,
            unattributed_share=round(self.unattributed_share, 4), op_count=len(self.by_op), by_op=by_op)

    def note(self, replay: str, capture: str) -> str:
        """One sentence for the rank's notes: which files were paired and how much was attributed."""
        return (
            f"{replay} analysed with its graph capture {capture} (one rank: the capture is no rank of its own, it "
            f"only names the ops): {100 * self.attributed_share:.1f}% of the replayed GPU time "
            f"({self.replayed_ns / 1e6:.1f} ms, {self.replayed_kernels:,} kernels of {self.graph_launches} graph "
            f"launches) attributed to the captured ops, {100 * self.unattributed_share:.1f}% unattributed"
            + ("" if self.matched_launches == self.graph_launches else
               f" ({_count(self.graph_launches - self.matched_launches, 'launch', 'launches')} match"
               f"{'es' if self.graph_launches - self.matched_launches == 1 else ''} no captured graph)")
        )


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _captured_graphs(capture: Trace) -> list[tuple[list[str], list[tuple[int, int]]]]:
    """Per capture range, in time order: the captured launches' issuing op names and (grid, block)."""
    from aiprof.trace import links

    c = capture.columns
    launches = launch_rows(capture)
    launches = launches[captured_mask(capture, launches)]
    ops = links.issuing_op(capture)
    spans = sorted((int(s), int(e)) for st, en in capture_ranges(capture).per_thread.values()
                   for s, e in zip(st.tolist(), en.tolist()))
    out = []
    for s, e in spans:
        rows = launches[(c.ts[launches] >= s) & (c.ts[launches] < e)]
        names = [capture.strings[c.name[ops[r]]] if ops[r] >= 0 else "(no op)" for r in rows.tolist()]
        out.append((names, [(int(c.grid[r]), int(c.block[r])) for r in rows.tolist()]))
    return out


def _fits(shape: list[tuple[int, int]], kernels: list[tuple[int, int]]) -> bool:
    """Same number of nodes, and grid / block equal wherever both traces recorded them."""
    return len(shape) == len(kernels) and all(
        a == b or -1 in (a[0], b[0]) for a, b in zip(shape, kernels))


def attribute_replays(replay: Trace, capture: Trace) -> ReplayAttribution:
    """Attribute each graph launch's replayed kernels to the captured ops, node by node: the graph is the
    capture range in the same position that fits (as many launches, same grid/block where recorded), else
    the first unused one that fits, else one already matched (a graph is replayed many times). Kernels of a launch no capture fits stay unattributed."""
    from aiprof.trace import links

    c = replay.columns
    kernels = replay.rows_of(Kind.KERNEL)
    launcher = links.launcher(replay)[kernels]
    calls = replay.rows_of(Kind.RUNTIME, Kind.DRIVER)
    graph_launches = calls[replay.name_matches(calls, GRAPH_LAUNCH)]
    graphs = _captured_graphs(capture)
    used: set[int] = set()
    by_op: dict[str, int] = {}
    replayed = attributed = matched = count = 0
    for j, launch in enumerate(graph_launches.tolist()):
        rows = kernels[launcher == launch]
        rows = rows[np.argsort(c.ts[rows], kind="stable")]
        count += int(rows.size)
        durs = c.dur[rows].tolist()
        replayed += int(sum(durs))
        shape = [(int(c.grid[r]), int(c.block[r])) for r in rows.tolist()]
        others = [i for i in range(len(graphs)) if i != j]  # a graph replays many times: unused ones first
        order = [j] + [i for i in others if i not in used] + [i for i in others if i in used]
        pick = next((i for i in order if i < len(graphs) and _fits(graphs[i][1], shape)), None)
        if pick is None:
            continue
        used.add(pick)
        matched += 1
        for name, dur in zip(graphs[pick][0], durs):
            by_op[name] = by_op.get(name, 0) + int(dur)
            attributed += int(dur)
    ranked = dict(sorted(by_op.items(), key=lambda kv: -kv[1]))
    return ReplayAttribution(int(graph_launches.size), matched, count, replayed, attributed, ranked)


# ---------------------------------------------------------------------------------------------------
# A replay paired with its capture: the files of one rank that the serving engines write side by side
# ---------------------------------------------------------------------------------------------------
TOP_OPS = 20  # ops kept in the report's ``replay_attribution.by_op``
_PAIRED_KEY = "analysis.graphs.paired_capture"

GraphRole = Literal["capture", "replay", ""]
"""What a trace is to pairing: a capture trace (:attr:`GraphCaptureInfo.is_capture_trace`), a replay (it has
graph launches and is no capture trace), or neither."""


def graph_role(trace: Trace) -> GraphRole:
    """The trace's :data:`GraphRole`."""
    if graph_capture_info(trace).is_capture_trace:
        return "capture"
    calls = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    return "replay" if bool(trace.name_matches(calls, GRAPH_LAUNCH).any()) else ""


def pair_replays(roles: Sequence[GraphRole], process: Sequence[Hashable]) -> dict[int, int]:
    """Replay index → capture index, for files loaded together: a capture pairs with the replay of the same
    ``process`` (host, pid, rank: what wrote them) when that process has one capture and one replay; then, if
    exactly one capture and one replay are left over, they pair too (two files given as one rank's).
    Captures that pair with nothing stay ranks of their own (a capture trace, described)."""
    by_process: dict[Hashable, tuple[list[int], list[int]]] = {}
    for i, (role, key) in enumerate(zip(roles, process)):
        if role:
            caps, reps = by_process.setdefault(key, ([], []))
            (caps if role == "capture" else reps).append(i)
    pairs: dict[int, int] = {}
    for caps, reps in by_process.values():
        if len(caps) == 1 and len(reps) == 1:
            pairs[reps[0]] = caps[0]
    left_caps = [i for i, r in enumerate(roles) if r == "capture" and i not in pairs.values()]
    left_reps = [i for i, r in enumerate(roles) if r == "replay" and i not in pairs]
    if len(left_caps) == 1 and len(left_reps) == 1:
        pairs[left_reps[0]] = left_caps[0]
    return pairs


def attach_capture(replay: Trace, capture: Trace) -> ReplayAttribution:
    """Attribute ``replay``'s graph-replayed kernels to ``capture``'s ops (:func:`attribute_replays`) and keep
    the result on the replay (its ``graph_capture`` section reports it, its notes say so)."""
    found = attribute_replays(replay, capture)
    replay.cache[_PAIRED_KEY] = (capture.path.name, found)
    replay.metadata["graph_capture_trace"] = str(capture.path)
    replay.warnings.append(found.note(replay.path.name, capture.path.name))
    return found


def paired_capture(trace: Trace) -> tuple[str, ReplayAttribution] | None:
    """The capture file's name and the attribution, when :func:`attach_capture` paired the trace."""
    found: tuple[str, ReplayAttribution] | None = trace.cache.get(_PAIRED_KEY)
    return found


def process_key(ident: Identity) -> Hashable:
    """What wrote a trace, for :func:`pair_replays`: host, main pid and ``distributedInfo`` rank."""
    return (ident.host, ident.pid, ident.rank)


def _pairs_of(traces: Sequence[Trace]) -> dict[int, int]:
    """:func:`pair_replays` of loaded traces (empty unless they hold a capture and a replay)."""
    if len(traces) < 2:  # one file: nothing to pair (and no capture detection to pay for)
        return {}
    roles = [graph_role(t) for t in traces]
    if "capture" not in roles or "replay" not in roles:
        return {}
    return pair_replays(roles, [process_key(identity(t)) for t in traces])


def pair_traces(traces: list[Trace]) -> list[Trace]:
    """``traces`` without the captures that pair with a replay (:func:`pair_replays`), each attached to its
    replay (:func:`attach_capture`). Profiler cycles are not merged (:func:`pair_and_merge` does both)."""
    pairs = _pairs_of(traces)
    for rep, cap in pairs.items():
        attach_capture(traces[rep], traces[cap])
    captures = set(pairs.values())
    return [t for i, t in enumerate(traces) if i not in captures]


def pair_and_merge(traces: list[Trace]) -> tuple[list[Trace], list[str]]:
    """Loaded traces as ranks, by the rule ``aiprof analyze`` applies (:mod:`aiprof.analysis.run`): each graph
    capture that pairs with a replay (:func:`pair_replays`) is no rank of its own; the other traces' profiler
    cycles of one process are merged into one rank (:func:`~aiprof.trace.cycles.merge_cycle_sets`); then each
    capture is attached to the rank holding its replay (:func:`attach_capture`). ``aiprof.load``'s ``merge``
    (:func:`aiprof.trace.load`); returns the ranks and one note per merged set of cycles."""
    pairs = _pairs_of(traces)
    captures = set(pairs.values())
    kept = [i for i in range(len(traces)) if i not in captures]
    out, notes, where = merge_cycle_sets_at([traces[i] for i in kept])
    position = {i: k for k, i in enumerate(kept)}
    for rep, cap in sorted(pairs.items()):
        attach_capture(out[where[position[rep]]], traces[cap])
    return out, notes
