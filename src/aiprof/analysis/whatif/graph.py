"""The dependency graph of one trace: what had to finish before each piece of work could start.

Nodes (:class:`NodeKind`), on *resources* (a host thread, or one stream of one device):

- host threads are cut into contiguous nodes at every runtime call, DataLoader span and step boundary, so
  a thread is a chain with no holes: ``LAUNCH`` (a runtime/driver call that launched device work),
  ``RUNTIME`` (other runtime calls), ``SYNC_CALL`` + ``WAIT`` (a blocking call: its own host cost, then a
  zero-length node that waits for the device work it blocked on), ``DATA_LOADING`` (inside
  ``enumerate(DataLoader)#...__next__``), ``HOST`` (CPU ops, Python functions), ``UNTRACED`` (time on the
  thread that no op, Python function or call covers, annotations aside: unprofiled Python), ``OUTSIDE`` (before the thread's first event and after its last);
- device activities, one node each, per stream: ``KERNEL``, ``COMM`` (collective kernels), ``MEMCPY``,
  ``MEMSET``.

Edges (:class:`EdgeKind`): ``ORDER`` (the previous node on the same thread or stream, from its end),
``LAUNCH`` (the launching call's *start* → the activity, by correlation / flows), ``SYNC`` (the device
activity a blocking call waited for → its ``WAIT`` node, from the activity's end), ``THREAD`` (hand-offs between host threads, below).

Threads other than the steps' own (the autograd engine's, a pin-memory thread) work in *bursts* (their
events, gaps under ``BURST_GAP_NS`` merged). A burst is woken by the steps' thread: the idle time before it
is an ``IDLE`` node (zero length) that waits for the steps' thread to reach the burst's start. When the
steps' thread does nothing of its own during a burst (``loss.backward()`` waiting for the engine), those
segments are ``JOIN`` nodes (zero length) that wait for the burst's end.

A node starts at the latest of its predecessors' reference times plus the edge's weight and lasts its
duration. The weights are calibrated on the observed times (:func:`calibrate`): every edge gets its
physical floor (0 for order and sync edges, the typical launch latency for a launch edge), capped so no
predecessor is later than the node's observed start, and the edge that binds gets the rest: the observed
delay the graph cannot explain (``slack``) rides on that edge, so the identity replay is exact and an
edit only moves what it changes. All of it is NumPy over columns; no networkx.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from aiprof import arrays
from aiprof.analysis import intervals as iv
from aiprof.analysis.comm import is_comm_kernel
from aiprof.analysis.steps import WHOLE_TRACE, StepWindow, step_rows, step_windows
from aiprof.analysis.timeline import _DATALOADER, SYNC_CALL
from aiprof.trace import links, suspect
from aiprof.trace.model import GPU_WORK_KINDS, I8, I64, Bool, Kind, Trace

HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME, Kind.DRIVER, Kind.OTHER)
SYNC_TOLERANCE_NS = 10_000  # a blocking call may return this long before the clock says its work ended
DEFAULT_LAUNCH_FLOOR_NS = 5_000  # launch latency when no kernel in the trace shows it
BURST_GAP_NS = 50_000
# An "async" copy call that lasts this long blocked (a device-to-pageable-host copy waits for the queue).
BLOCKING_COPY_MIN_NS = 50_000
_ASYNC_COPY = r"^(cuda|hip)MemcpyAsync$|^cuMemcpy.*Async"  # a pause this long on a helper thread ends a burst of its work


class NodeKind(enum.IntEnum):
    OUTSIDE = 0
    UNTRACED = 1
    HOST = 2
    DATA_LOADING = 3
    LAUNCH = 4
    RUNTIME = 5
    SYNC_CALL = 6
    WAIT = 7
    KERNEL = 8
    COMM = 9
    MEMCPY = 10
    MEMSET = 11
    IDLE = 12
    JOIN = 13
    ARRIVE = 14  # a rank reaching a collective (multi-rank graphs: aiprof.analysis.whatif.ranks)


DEVICE_NODE_KINDS = (NodeKind.KERNEL, NodeKind.COMM, NodeKind.MEMCPY, NodeKind.MEMSET)


class EdgeKind(enum.IntEnum):
    ORDER = 0
    LAUNCH = 1
    SYNC = 2
    COLLECTIVE = 3
    THREAD = 4


@dataclass(frozen=True)
class Resource:
    """A host thread (``device == -1``: pid, tid) or a device stream (device, stream)."""

    device: int
    pid: int
    tid: int

    @property
    def label(self) -> str:
        return f"thread {self.pid}/{self.tid}" if self.device < 0 else f"device {self.device} stream {self.tid}"


@dataclass
class Graph:
    """Nodes and edges as columns. Edges are sorted by destination (``edge_ptr`` indexes them, CSR)."""

    kind: I8  # NodeKind
    resource: I64  # index into ``resources``
    start: I64  # observed start, ns
    dur: I64  # replay duration, ns (a WAIT node lasts 0: its wait is the slack of its edges)
    row: I64  # the trace row behind the node (-1 for host gaps)
    edge_src: I64
    edge_dst: I64
    edge_kind: I8  # EdgeKind
    edge_from_start: Bool  # the edge leaves from its source's start (launch) rather than its end
    edge_weight: I64  # calibrated (see module doc)
    edge_floor: I64  # the physical floor before calibration
    edge_ptr: I64  # edges of node n: edge_ptr[n] .. edge_ptr[n + 1]
    order: I64  # a topological order of the nodes
    resources: list[Resource]
    windows: list[StepWindow]
    window_start_node: I64  # per window: the node on the step's thread that starts at its host start
    window_end_node: I64  # ... and at its host end
    window_of_device_node: I64  # per node: the window whose host span launched it (device nodes), else -1
    launch_floor_ns: int = DEFAULT_LAUNCH_FLOOR_NS
    notes: list[str] = field(default_factory=list)
    baseline_ns: I64 | None = None  # the identity replay's step durations, once computed
    in_steps: Bool | None = None  # per node: starts inside a step's host span (a multi-rank graph sets it)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @property
    def end(self) -> I64:
        end: I64 = self.start + self.dur
        return end

    @property
    def edge_count(self) -> int:
        return int(self.edge_src.shape[0])

    def nodes_of(self, *kinds: NodeKind) -> I64:
        found: I64 = np.flatnonzero(np.isin(self.kind, [int(k) for k in kinds]))
        return found


# ---------------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------------
@dataclass
class _Host:
    """Host rows of the graph and what each is."""

    rows: I64
    thread: I64  # resource index per row
    is_launch: Bool
    is_runtime: Bool
    is_loader: Bool
    blocking: I64  # rows of the outermost blocking calls that waited for device work
    target: I64  # per blocking call: the device row it waited for
    base: I64  # per blocking call: its own host cost (ns)


def build_graph(trace: Trace, windows: list[StepWindow] | None = None) -> Graph:
    """The calibrated dependency graph of ``trace`` (see module doc). Cached on the trace."""
    key = "whatif.graph"
    cached = trace.cache.get(key)
    if cached is not None and windows is None:
        return cached  # type: ignore[no-any-return]
    graph = _build(trace, step_windows(trace) if windows is None else windows)
    if windows is None:
        trace.cache[key] = graph
    return graph


def _build(trace: Trace, windows: list[StepWindow]) -> Graph:
    c = trace.columns
    bad = suspect.mask(trace)
    device_rows = np.flatnonzero(trace.kind_mask(*GPU_WORK_KINDS) & ~bad & (c.device >= 0))
    host_all = np.flatnonzero(trace.kind_mask(*HOST_KINDS) & ~bad)
    threads, thread_of = _threads(c.pid[host_all], c.tid[host_all])
    extent = _extent(c.ts, c.dur, np.concatenate((host_all, device_rows)))
    launch = links.launcher(trace)
    host = _classify_host(trace, host_all, thread_of, launch, device_rows)
    main = _window_thread(trace, host, windows, threads)
    points = _window_points(windows, main)
    h = _host_nodes(trace, host, len(threads), extent, main, points)
    d, streams = _device_nodes(trace, device_rows, len(threads))
    resources = [Resource(-1, int(p), int(t)) for p, t in threads] + streams
    n_host = h["start"].size
    kind = np.concatenate((h["kind"], d["kind"])).astype(np.int8)
    resource = np.concatenate((h["resource"], d["resource"]))
    start = np.concatenate((h["start"], d["start"]))
    dur = np.concatenate((h["dur"], d["dur"]))
    row = np.concatenate((h["row"], d["row"]))
    edges = _edges(trace, h, d, n_host, host, launch, start, resource)
    graph = _assemble(kind, resource, start, dur, row, edges, resources, windows)
    graph.window_start_node, graph.window_end_node = _point_nodes(h, main, windows, points)
    graph.window_of_device_node = _device_windows(trace, d, n_host, len(kind), launch, windows)
    calibrate(graph)
    return graph


def _threads(pid: I64, tid: I64) -> tuple[list[tuple[int, int]], I64]:
    key = (pid.astype(np.int64) << 32) ^ (tid.astype(np.int64) & 0xFFFFFFFF)
    _, first, inverse = arrays.unique_inverse(key)
    threads = [(int(pid[i]), int(tid[i])) for i in first.tolist()]
    return threads, inverse


def _extent(ts: I64, dur: I64, rows: I64) -> tuple[int, int]:
    if rows.size == 0:
        return 0, 0
    return int(ts[rows].min()), int((ts[rows] + dur[rows]).max())


def _classify_host(trace: Trace, rows: I64, thread_of: I64, launch: I64, device_rows: I64) -> _Host:
    c = trace.columns
    launched = np.zeros(len(c), dtype=bool)
    launched[launch[device_rows][launch[device_rows] >= 0]] = True
    kinds = c.kind[rows]
    is_runtime = (kinds == int(Kind.RUNTIME)) | (kinds == int(Kind.DRIVER))
    is_loader = np.zeros(rows.size, dtype=bool)
    ann = np.flatnonzero(kinds == int(Kind.USER_ANNOTATION))
    is_loader[ann] = trace.name_matches(rows[ann], _DATALOADER.pattern)
    host = _Host(rows, thread_of, launched[rows], is_runtime, is_loader,
                 np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    _blocking_calls(trace, host, device_rows, launch)
    return host


def _blocking_calls(trace: Trace, host: _Host, device_rows: I64, launch: I64) -> None:
    """The outermost blocking calls, each with the device activity it waited for: the one that ended
    last, no later than the call's return (plus a clock tolerance), launched before the call returned,
    and still running after the call's own cost (else nothing was waited for)."""
    c = trace.columns
    pos = np.flatnonzero(host.is_runtime)
    rows = host.rows[pos]
    slow_copy = trace.name_matches(rows, _ASYNC_COPY) & (c.dur[rows] >= BLOCKING_COPY_MIN_NS)
    pos = pos[trace.name_matches(rows, SYNC_CALL.pattern) | slow_copy]
    if pos.size == 0 or device_rows.size == 0:
        return
    pos = _outermost(pos, host.thread[pos], c.ts[host.rows[pos]], (c.ts + c.dur)[host.rows[pos]])
    calls = host.rows[pos]
    s, e = c.ts[calls], c.ts[calls] + c.dur[calls]
    launch_costs = c.dur[host.rows[host.is_launch]]
    base = np.minimum(c.dur[calls], int(arrays.median(launch_costs)) if launch_costs.size else 0)
    dev_end = c.ts[device_rows] + c.dur[device_rows]
    by_end = np.argsort(dev_end, kind="stable")
    idx = np.searchsorted(dev_end[by_end], e + SYNC_TOLERANCE_NS, side="right") - 1
    ok = idx >= 0
    target = np.where(ok, device_rows[by_end[np.maximum(idx, 0)]], -1)
    t_end = c.ts[np.maximum(target, 0)] + c.dur[np.maximum(target, 0)]
    t_launch = launch[np.maximum(target, 0)]
    launched_before = (t_launch < 0) | (c.ts[np.maximum(t_launch, 0)] < e)
    ok &= launched_before & (t_end > s + base)
    host.blocking, host.target, host.base = calls[ok], target[ok], base[ok].astype(np.int64)


def _outermost(pos: I64, thread: I64, s: I64, e: I64) -> I64:
    """Positions whose span does not lie inside an earlier one on the same thread."""
    order = np.lexsort((s, thread))
    pos, thread, s, e = pos[order], thread[order], s[order], e[order]
    keep = np.ones(pos.size, dtype=bool)
    for i in range(1, pos.size):  # few blocking calls per trace
        j = i - 1
        while j >= 0 and not keep[j]:
            j -= 1
        keep[i] = not (j >= 0 and thread[j] == thread[i] and s[i] < e[j])
    kept: I64 = pos[keep]
    return kept


def _window_thread(trace: Trace, host: _Host, windows: list[StepWindow], threads: list[tuple[int, int]]) -> int:
    """The resource (host thread) whose timeline holds the steps' host boundaries."""
    if not threads:
        return -1
    c = trace.columns
    steps = step_rows(trace)
    if windows and windows[0].source == "ProfilerStep" and steps.size:
        found = np.flatnonzero((c.pid[host.rows] == c.pid[steps[0]]) & (c.tid[host.rows] == c.tid[steps[0]]))
        if found.size:
            return int(host.thread[found[0]])
    if windows and windows[0].source != WHOLE_TRACE:
        at = np.flatnonzero((c.ts[host.rows] == windows[0].cpu_start_ns)
                            | (c.ts[host.rows] + c.dur[host.rows] == windows[0].cpu_start_ns))
        if at.size:
            return int(host.thread[at[0]])
    weights = host.is_launch.astype(np.int64) if host.is_launch.any() else c.dur[host.rows]
    return int(np.argmax(np.bincount(host.thread, weights=weights, minlength=len(threads))))


def _window_points(windows: list[StepWindow], main: int) -> I64:
    if main < 0 or not windows or windows[0].source == WHOLE_TRACE:
        return np.zeros(0, dtype=np.int64)
    return np.array([t for w in windows for t in (w.cpu_start_ns, w.cpu_end_ns)], dtype=np.int64)


def _host_nodes(trace: Trace, host: _Host, n_threads: int, extent: tuple[int, int], main: int,
                points: I64) -> dict[str, I64]:
    """Every host thread cut into contiguous nodes over [trace start, trace end], plus a zero-length
    sentinel node at the end, so every instant of a thread is the start of some node."""
    out: dict[str, list[I64]] = {k: [] for k in ("kind", "resource", "start", "dur", "row")}
    c = trace.columns
    bursts = _bursts(trace, host, n_threads, main)
    handoff_points = np.concatenate([np.zeros(0, np.int64)] + [np.concatenate((b[1], b[2])) for b in bursts])
    for t in range(n_threads):
        sel = np.flatnonzero(host.thread == t)
        rows = host.rows[sel]
        s, e = c.ts[rows], c.ts[rows] + c.dur[rows]
        mine = np.isin(host.blocking, rows)
        block_rows = host.blocking[mine]
        split = c.ts[block_rows] + host.base[mine]
        extra = np.concatenate((points, handoff_points)) if t == main else np.zeros(0, np.int64)
        cut = arrays.unique(np.concatenate(([extent[0], extent[1]], s, e, split, extra)))
        cut = cut[(cut >= extent[0]) & (cut <= extent[1])]
        kind, row = _segment_kinds(trace, host, sel, cut, block_rows, split)
        out["kind"].append(kind)
        out["resource"].append(np.full(cut.size, t, dtype=np.int64))
        out["start"].append(cut)
        out["dur"].append(np.append(np.diff(cut), 0))
        out["row"].append(row)
    merged = {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in out.items()}
    main_events = np.sort(c.ts[host.rows[host.thread == main]]) if main >= 0 else np.zeros(0, np.int64)
    merged["x_src"], merged["x_dst"] = _handoffs(merged, bursts, main, main_events, points)
    # Zero-length waiting nodes sit where the wait ended: a blocking call's return, a thread's wake-up.
    waits = np.isin(merged["kind"], [int(NodeKind.WAIT), int(NodeKind.IDLE), int(NodeKind.JOIN)])
    merged["start"][waits] += merged["dur"][waits]
    merged["dur"][waits] = 0
    return merged


def _bursts(trace: Trace, host: _Host, n_threads: int, main: int) -> list[tuple[int, I64, I64]]:
    """Per helper thread (not ``main``), its bursts of work: (thread, starts, ends)."""
    if main < 0:
        return []
    c = trace.columns
    out: list[tuple[int, I64, I64]] = []
    for t in range(n_threads):
        if t == main:
            continue
        rows = host.rows[host.thread == t]
        starts, ends = iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows] + BURST_GAP_NS)
        out.append((t, starts, ends - BURST_GAP_NS))
    return out


def _handoffs(h: dict[str, I64], bursts: list[tuple[int, I64, I64]], main: int, main_events: I64,
              points: I64) -> tuple[I64, I64]:
    """Mark IDLE and JOIN nodes (module doc) and return the THREAD edges (sources, destinations)."""
    src: list[I64] = []
    dst: list[I64] = []
    if not bursts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    main_nodes = np.flatnonzero(h["resource"] == main)
    main_start = h["start"][main_nodes]
    for t, starts, ends in bursts:
        nodes = np.flatnonzero(h["resource"] == t)
        at = np.searchsorted(h["start"][nodes], starts)  # the burst's first node
        wake = np.searchsorted(main_start, starts)  # the main node that starts at the burst's start
        ok = (at > 0) & (wake > 0) & (wake < main_nodes.size)
        ok[ok] &= main_start[wake[ok]] == starts[ok]
        idle = nodes[at[ok] - 1]
        h["kind"][idle] = int(NodeKind.IDLE)
        src.append(main_nodes[wake[ok] - 1])
        dst.append(idle)
        s, e = _blocked(starts[ok], ends[ok], main_events, points)
        _joins(h, nodes, main_nodes, main_start, s, e, src, dst)
    return np.concatenate(src), np.concatenate(dst)


def _blocked(starts: I64, ends: I64, main_events: I64, points: I64) -> tuple[I64, I64]:
    """The bursts during which the steps' thread started no event of its own (the spans it sits in do not
    count) and held no step boundary."""
    busy = np.searchsorted(main_events, ends, side="left") - np.searchsorted(main_events, starts, side="right")
    sorted_points = np.sort(points)
    marks = np.searchsorted(sorted_points, ends, side="right") - np.searchsorted(sorted_points, starts, side="right")
    keep = (busy == 0) & (marks == 0) & (ends > starts)
    return starts[keep], ends[keep]


def _joins(h: dict[str, I64], nodes: I64, main_nodes: I64, main_start: I64, s: I64, e: I64,
           src: list[I64], dst: list[I64]) -> None:
    """Main-thread nodes inside each blocked burst [s, e) become JOIN nodes fed by the burst's last node."""
    first = np.searchsorted(main_start, s)
    last = np.searchsorted(main_start, e)  # main is cut at e: the node starting there follows the join
    end_node = nodes[np.searchsorted(h["start"][nodes], e) - 1]
    counts = last - first
    if counts.sum() == 0:
        return
    joined = main_nodes[np.repeat(first - np.cumsum(np.r_[0, counts[:-1]]), counts) + np.arange(counts.sum())]
    h["kind"][joined] = int(NodeKind.JOIN)
    src.append(np.repeat(end_node, counts))
    dst.append(joined)


def _segment_kinds(trace: Trace, host: _Host, sel: I64, cut: I64, block_rows: I64, split: I64) -> tuple[I64, I64]:
    """The kind of each segment [cut[i], cut[i+1]) and the row of the call that starts it (or -1)."""
    c = trace.columns
    rows = host.rows[sel]
    s, e = c.ts[rows], c.ts[rows] + c.dur[rows]
    kind = np.full(cut.size, int(NodeKind.UNTRACED), dtype=np.int64)
    row = np.full(cut.size, -1, dtype=np.int64)
    # Host work is what ops, Python and runtime calls cover; a gap inside an enclosing annotation (the step,
    # "## backward ##") is the script's own untraced Python.
    work = c.kind[rows] != int(Kind.USER_ANNOTATION)
    _paint(kind, cut, iv.merge(s[work], e[work]), NodeKind.HOST)
    rt = host.is_runtime[sel]
    _paint(kind, cut, iv.merge(s[rt], e[rt]), NodeKind.RUNTIME)
    loader = host.is_loader[sel]
    _paint(kind, cut, iv.merge(s[loader], e[loader]), NodeKind.DATA_LOADING)
    launches = host.is_launch[sel]
    _paint(kind, cut, iv.merge(s[launches], e[launches]), NodeKind.LAUNCH)
    bs = c.ts[block_rows]
    _paint(kind, cut, iv.merge(bs, split), NodeKind.SYNC_CALL)
    _paint(kind, cut, iv.merge(split, bs + c.dur[block_rows]), NodeKind.WAIT)
    if rows.size:
        kind[(cut < s.min()) | (cut >= e.max())] = int(NodeKind.OUTSIDE)
    else:
        kind[:] = int(NodeKind.OUTSIDE)
    kind[-1] = int(NodeKind.OUTSIDE)
    calls = np.flatnonzero(rt)
    at = np.searchsorted(cut, s[calls])
    ok = (at < cut.size) & (cut[np.minimum(at, cut.size - 1)] == s[calls])
    row[at[ok]] = rows[calls[ok]]
    wait_at = np.searchsorted(cut, split)
    row[wait_at[wait_at < cut.size]] = block_rows[wait_at < cut.size]
    return kind, row


def _paint(kind: I64, cut: I64, cover: iv.IntervalSet, value: NodeKind) -> None:
    """Set ``kind`` of every segment whose start lies inside ``cover``."""
    if cover[0].size == 0:
        return
    idx = np.searchsorted(cover[0], cut, side="right") - 1
    inside = (idx >= 0) & (cut < cover[1][np.maximum(idx, 0)])
    kind[inside] = int(value)


def _device_nodes(trace: Trace, rows: I64, offset: int) -> tuple[dict[str, I64], list[Resource]]:
    c = trace.columns
    order = np.lexsort((c.ts[rows], c.tid[rows], c.device[rows]))
    rows = rows[order]
    key = (c.device[rows].astype(np.int64) << 32) ^ (c.tid[rows].astype(np.int64) & 0xFFFFFFFF)
    _, first, inverse = arrays.unique_inverse(key)
    kind = np.full(rows.size, int(NodeKind.KERNEL), dtype=np.int64)
    kind[c.kind[rows] == int(Kind.MEMCPY)] = int(NodeKind.MEMCPY)
    kind[c.kind[rows] == int(Kind.MEMSET)] = int(NodeKind.MEMSET)
    kind[is_comm_kernel(trace)[rows]] = int(NodeKind.COMM)
    resources = [Resource(int(c.device[rows[i]]), int(c.device[rows[i]]), int(c.tid[rows[i]])) for i in first.tolist()]
    nodes = {"kind": kind, "resource": inverse + offset, "start": c.ts[rows].astype(np.int64),
             "dur": c.dur[rows].astype(np.int64), "row": rows.astype(np.int64)}
    return nodes, resources


def _edges(trace: Trace, h: dict[str, I64], d: dict[str, I64], n_host: int, host: _Host, launch: I64,
           start: I64, resource: I64) -> dict[str, np.ndarray]:
    """Order edges on every resource, launch edges, sync edges (unsorted)."""
    n = start.size
    same = np.zeros(n, dtype=bool)
    same[1:] = resource[1:] == resource[:-1]  # nodes of a resource are contiguous and in time order
    dst_o = np.flatnonzero(same)
    src, dst, kinds, from_start = [dst_o - 1], [dst_o], [np.full(dst_o.size, int(EdgeKind.ORDER))], [np.zeros(dst_o.size, bool)]
    node_of_row = np.full(len(trace.columns), -1, dtype=np.int64)
    host_rows = h["row"]
    is_wait = h["kind"] == int(NodeKind.WAIT)
    call_nodes = np.flatnonzero((host_rows >= 0) & ~is_wait)
    node_of_row[host_rows[call_nodes]] = call_nodes
    dev_rows = d["row"]
    dev_nodes = np.arange(n_host, n, dtype=np.int64)
    launcher_node = node_of_row[np.maximum(launch[dev_rows], 0)]
    has = (launch[dev_rows] >= 0) & (launcher_node >= 0)
    src.append(launcher_node[has]); dst.append(dev_nodes[has])
    kinds.append(np.full(int(has.sum()), int(EdgeKind.LAUNCH))); from_start.append(np.ones(int(has.sum()), bool))
    node_of_row[dev_rows] = dev_nodes
    waits = np.flatnonzero(is_wait)
    wait_rows = host_rows[waits]
    target_of = dict(zip(host.blocking.tolist(), host.target.tolist()))
    targets = np.array([target_of.get(r, -1) for r in wait_rows.tolist()], dtype=np.int64)
    ok = targets >= 0
    src.append(node_of_row[targets[ok]]); dst.append(waits[ok])
    kinds.append(np.full(int(ok.sum()), int(EdgeKind.SYNC))); from_start.append(np.zeros(int(ok.sum()), bool))
    src.append(h["x_src"]); dst.append(h["x_dst"])
    kinds.append(np.full(h["x_src"].size, int(EdgeKind.THREAD))); from_start.append(np.zeros(h["x_src"].size, bool))
    return {"src": np.concatenate(src), "dst": np.concatenate(dst), "kind": np.concatenate(kinds),
            "from_start": np.concatenate(from_start)}


def _assemble(kind: np.ndarray, resource: I64, start: I64, dur: I64, row: I64, edges: dict[str, np.ndarray],
              resources: list[Resource], windows: list[StepWindow]) -> Graph:
    order = np.argsort(edges["dst"], kind="stable")
    dst = edges["dst"][order]
    ptr = np.searchsorted(dst, np.arange(kind.size + 1)).astype(np.int64)
    empty = np.zeros(0, np.int64)
    graph = Graph(kind=kind, resource=resource, start=start, dur=dur, row=row, edge_src=edges["src"][order],
                  edge_dst=dst, edge_kind=edges["kind"][order].astype(np.int8),
                  edge_from_start=edges["from_start"][order], edge_weight=np.zeros(dst.size, np.int64),
                  edge_floor=np.zeros(dst.size, np.int64), edge_ptr=ptr, order=empty, resources=resources,
                  windows=windows, window_start_node=empty, window_end_node=empty,
                  window_of_device_node=empty)
    graph.order = topological_order(graph)
    return graph


def _point_nodes(h: dict[str, I64], main: int, windows: list[StepWindow], points: I64) -> tuple[I64, I64]:
    if points.size == 0:
        empty = np.full(len(windows), -1, dtype=np.int64)
        return empty, empty.copy()
    nodes = np.flatnonzero(h["resource"] == main)
    starts = h["start"][nodes]
    pos = np.searchsorted(starts, points)
    found = nodes[np.minimum(pos, nodes.size - 1)]
    return found[0::2].astype(np.int64), found[1::2].astype(np.int64)


def _device_windows(trace: Trace, d: dict[str, I64], n_host: int, n: int, launch: I64,
                    windows: list[StepWindow]) -> I64:
    """Per node, the window whose host span launched it (as :mod:`aiprof.analysis.steps` stretches)."""
    out = np.full(n, -1, dtype=np.int64)
    rows = d["row"]
    if not windows or windows[0].source == WHOLE_TRACE or rows.size == 0:
        return out
    c = trace.columns
    starts = np.array([w.cpu_start_ns for w in windows], dtype=np.int64)
    ends = np.array([w.cpu_end_ns for w in windows], dtype=np.int64)
    lrow = launch[rows]
    launch_ts = np.where(lrow >= 0, c.ts[np.maximum(lrow, 0)], np.iinfo(np.int64).min)
    step = np.searchsorted(starts, launch_ts, side="right") - 1
    inside = (lrow >= 0) & (step >= 0) & (launch_ts < ends[np.maximum(step, 0)])
    out[n_host:][inside] = step[inside]
    return out


# ---------------------------------------------------------------------------------------------------
# Calibration and order
# ---------------------------------------------------------------------------------------------------
def calibrate(graph: Graph) -> None:
    """Set each edge's floor and weight so that the identity replay gives every node its observed start."""
    src, dst = graph.edge_src, graph.edge_dst
    ref = np.where(graph.edge_from_start, graph.start[src], graph.end[src])
    floor = np.zeros(src.size, dtype=np.int64)
    launch = graph.edge_kind == int(EdgeKind.LAUNCH)
    graph.launch_floor_ns = _launch_floor(graph, launch, ref)
    floor[launch] = graph.launch_floor_ns
    graph.edge_floor = floor
    weight = np.minimum(floor, graph.start[dst] - ref)
    ready = ref + weight
    best = np.full(len(graph), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(best, dst, ready)
    slack = graph.start[dst] - best[dst]
    # The first edge of each node that reaches the latest ready time carries the node's slack.
    binding = np.flatnonzero(ready == best[dst])
    first = binding[np.r_[True, dst[binding][1:] != dst[binding][:-1]]] if binding.size else binding
    weight[first] += slack[first]
    graph.edge_weight = weight


def _launch_floor(graph: Graph, launch: Bool, ref: I64) -> int:
    """The typical launch latency: the median launch → start delay of activities whose stream was idle
    when they were launched (a queued activity's delay is its queue's, not the launch's)."""
    dst = graph.edge_dst[launch]
    delay = graph.start[dst] - ref[launch]
    prev_end = np.full(dst.size, np.iinfo(np.int64).min, dtype=np.int64)
    has_prev = np.zeros(dst.size, dtype=bool)
    has_prev[dst > 0] = graph.resource[dst[dst > 0] - 1] == graph.resource[dst[dst > 0]]
    prev_end[has_prev] = graph.end[dst[has_prev] - 1]
    idle = (prev_end <= ref[launch]) & (delay >= 0)
    if not idle.any():
        return DEFAULT_LAUNCH_FLOOR_NS
    return int(arrays.median(delay[idle]))


def topological_order(graph: Graph) -> I64:
    """Nodes by observed start (zero-length waits by where they return, resources in their own order);
    an order that a clock glitch breaks is repaired by Kahn's algorithm."""
    n = len(graph)
    is_device = np.isin(graph.kind, [int(k) for k in DEVICE_NODE_KINDS])
    order = np.lexsort((np.arange(n), is_device, graph.start))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    if graph.edge_count == 0 or bool((pos[graph.edge_src] < pos[graph.edge_dst]).all()):
        found: I64 = order.astype(np.int64)
        return found
    return _kahn(graph, pos)


def _kahn(graph: Graph, priority: I64) -> I64:
    import heapq

    n = len(graph)
    indegree = np.bincount(graph.edge_dst, minlength=n).tolist()
    by_src = np.argsort(graph.edge_src, kind="stable")
    src_ptr = np.searchsorted(graph.edge_src[by_src], np.arange(n + 1)).tolist()
    succ = graph.edge_dst[by_src].tolist()
    prio = priority.tolist()
    heap = [(prio[i], i) for i in range(n) if indegree[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, node = heapq.heappop(heap)
        out.append(node)
        for k in range(src_ptr[node], src_ptr[node + 1]):
            m = succ[k]
            indegree[m] -= 1
            if indegree[m] == 0:
                heapq.heappush(heap, (prio[m], m))
    if len(out) < n:  # a cycle: cannot happen from observed times, but never loop forever
        missing = np.setdiff1d(np.arange(n), np.array(out, dtype=np.int64))
        out.extend(missing.tolist())
        graph.notes.append(f"{missing.size} nodes in dependency cycles were replayed in observed order")
    return np.array(out, dtype=np.int64)
