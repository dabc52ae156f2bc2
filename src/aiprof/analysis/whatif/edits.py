"""Edits: a fix, written as a change to the graph's durations, edge weights or edges, then replayed.

Each edit is a small frozen dataclass with ``apply(graph, scenario)``; a :class:`Scenario` holds the edited
copies (durations, edge weights, edge sources), so edits compose and the graph itself never changes.
:func:`predict` replays a list of edits and compares every step with the identity replay.

What each edit means (``name`` is how the CLI spells it):

- ``data_loading`` (:class:`RemoveDataLoading`): the host no longer waits for batches (a DataLoader with
  workers and prefetch): every ``DATA_LOADING`` node lasts 0.
- ``host_gaps`` (:class:`RemoveHostGaps`): the untraced Python inside the steps, in gaps of 1 ms or more,
  goes (a sleep, logging, bookkeeping moved off the step); :func:`host_gap_spans`, the finding's fix: the
  gaps the rule counted (traced Python frames included).
- ``syncs`` (:class:`RemoveSyncs`): the blocking calls go (``.item()``, ``cudaDeviceSynchronize`` in the
  loop): their own cost is 0 and their wait no longer depends on the device.
- ``allocator_calls`` (:func:`allocator_calls`: :class:`RemoveNodes` + :class:`RemoveSyncs`): the caching
  allocator keeps its blocks: its ``cudaMalloc`` / ``cudaFree`` calls inside the steps cost nothing and do
  not block (:func:`script_syncs`: the other blocking calls, the script's own).
- ``scalar_reads`` (:class:`RemoveNodes`, made by :func:`scalar_reads`): the ``.item()`` ops that blocked go
  whole (with :class:`RemoveSyncs`, ``sync``'s fix: the values read in one batch after the loop).
- ``host_overhead`` (:class:`RemoveHostOverhead`, made by :func:`host_overhead`): the per-op host
  overhead ``host_bound`` counts goes (vectorised code, ``torch.compile``): with a device, the short host
  segments' time during which the device idled; CPU only, the tiny top-level ops and short untraced gaps.
- ``scale_host`` (:class:`ScaleHost`): host overhead x ``factor`` (CPU ops, Python, runtime and launch
  calls, untraced host gaps; never data loading or waits).
- ``cuda_graphs`` (:class:`CudaGraphs`): the steps are replayed as captured graphs: the host work inside
  each step's span costs nothing but the replay, so the device runs its queue back to back.
- ``fuse`` (:class:`Fuse`): a chain of kernels becomes one: its bytes at a bandwidth (by default the
  chain's own time), one launch, no gaps inside.
- ``scale_kernels`` (:class:`ScaleKernels`): chosen kernels x ``factor`` (a better kernel, a lower
  precision); :class:`KernelsToRoof`: each to ``fraction`` of its roofline time where that is faster.
- ``overlap_comm`` (:class:`OverlapComm`): collectives move off the compute stream: a compute kernel no
  longer waits for a collective queued before it (it still waits for the compute before); collectives
  still wait for the gradients queued before them and still close the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from aiprof import arrays
from aiprof.analysis import intervals as iv
from aiprof.analysis.whatif.graph import DEVICE_NODE_KINDS, EdgeKind, Graph, NodeKind
from aiprof.analysis.whatif.replay import Replay, StepTimes, replay, step_times
from aiprof.trace.model import I64, Trace

DISABLED = -(1 << 62)  # an edge weight that never binds
HOST_OVERHEAD = (NodeKind.HOST, NodeKind.UNTRACED, NodeKind.RUNTIME, NodeKind.LAUNCH)


@dataclass
class Scenario:
    """Edited copies of a graph's durations, edge weights and edge sources."""

    dur: I64
    weight: I64
    src: I64

    @staticmethod
    def of(graph: Graph) -> Scenario:
        return Scenario(graph.dur.copy(), graph.edge_weight.copy(), graph.edge_src.copy())


class Edit(Protocol):
    @property
    def name(self) -> str: ...

    def apply(self, graph: Graph, scenario: Scenario) -> None: ...


def _kind_mask(graph: Graph, kinds: tuple[NodeKind, ...]) -> np.ndarray:
    return np.isin(graph.kind, [int(k) for k in kinds])


def _in_steps(graph: Graph) -> np.ndarray:
    """Nodes that start inside some step's host span (on any thread; of their own rank in a multi-rank graph)."""
    if graph.in_steps is not None:
        return graph.in_steps
    if not graph.windows:
        return np.zeros(len(graph), dtype=bool)
    starts = np.array([w.cpu_start_ns for w in graph.windows], dtype=np.int64)
    ends = np.array([w.cpu_end_ns for w in graph.windows], dtype=np.int64)
    idx = np.searchsorted(starts, graph.start, side="right") - 1
    inside: np.ndarray = (idx >= 0) & (graph.start < ends[np.maximum(idx, 0)])
    return inside


@dataclass(frozen=True)
class RemoveDataLoading:
    name: str = "data_loading"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        scenario.dur[graph.kind == int(NodeKind.DATA_LOADING)] = 0


@dataclass(frozen=True)
class RemoveHostGaps:
    """The script's own untraced Python inside the steps, in gaps of at least ``min_ns``, removed."""

    min_ns: int = 1_000_000
    name: str = "host_gaps"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        gaps = (graph.kind == int(NodeKind.UNTRACED)) & (graph.dur >= self.min_ns) & _in_steps(graph)
        scenario.dur[gaps] = 0


HOST_GAP_SPANS = "host_gaps.gaps"  # the trace cache key under which the host_gaps rule leaves the gaps it counted


def host_gap_spans(graph: Graph, trace: Trace) -> list[Edit]:
    """``host_gaps``' fix: the gaps the rule counted (:data:`HOST_GAP_SPANS`: stretches of Python or untraced
    time outside any op, traced Python frames included) go from the steps' thread: each CPU-op, Python or
    untraced segment there loses its overlap with them. Without the rule's gaps (``aiprof whatif``), the
    untraced gaps of 1 ms or more (:class:`RemoveHostGaps`)."""
    gaps: tuple[tuple[int, int], ...] | None = trace.cache.get(HOST_GAP_SPANS)
    if gaps is None:
        return [RemoveHostGaps()]
    if not gaps or graph.window_start_node.size == 0 or graph.window_start_node[0] < 0:
        return []
    main = graph.resource[graph.window_start_node[0]]
    nodes = np.flatnonzero((graph.resource == main) & np.isin(graph.kind, [int(NodeKind.HOST), int(NodeKind.UNTRACED)])
                           & (graph.dur > 0))
    ordered = sorted(gaps)
    spans = iv.merge(np.array([a for a, _ in ordered], dtype=np.int64), np.array([b for _, b in ordered], dtype=np.int64))
    inside = iv.overlap_per_window(spans, graph.start[nodes], graph.end[nodes])
    changed = inside > 0
    kept = graph.dur[nodes[changed]] - inside[changed]
    return [RemoveHostOverhead(tuple(nodes[changed].tolist()), tuple(kept.tolist()), name="host_gaps")] if changed.any() else []


@dataclass(frozen=True)
class RemoveSyncs:
    """Remove every blocking call, or only those whose trace rows are given."""

    rows: tuple[int, ...] = ()
    name: str = "syncs"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        calls = _kind_mask(graph, (NodeKind.SYNC_CALL,))
        waits = graph.kind == int(NodeKind.WAIT)
        if self.rows:
            chosen = arrays.isin(graph.row, np.array(self.rows, dtype=np.int64))
            calls &= chosen  # a call node's row is the call; so is its wait node's
            waits &= chosen
        scenario.dur[calls] = 0
        sync = (graph.edge_kind == int(EdgeKind.SYNC)) & waits[graph.edge_dst]
        scenario.weight[sync] = DISABLED


@dataclass(frozen=True)
class RemoveHostOverhead:
    """The host nodes ``nodes`` last ``dur_ns`` (:func:`host_overhead` chooses both from the trace)."""

    nodes: tuple[int, ...]
    dur_ns: tuple[int, ...]
    name: str = "host_overhead"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        scenario.dur[np.array(self.nodes, dtype=np.int64)] = np.array(self.dur_ns, dtype=np.int64)


def host_overhead(graph: Graph, trace: Trace, *, tiny_op_ns: int = 20_000,
                  long_gap_ns: int = 1_000_000) -> RemoveHostOverhead:
    """``host_bound``'s fix: the host time its formula counts goes (``tiny_op_ns``: the rule's
    ``tiny_cpu_op_ns``; ``long_gap_ns``: its ``stall_min_ns``; longer gaps are ``host_gaps``, longer calls
    ``host_stall``), inside the steps. With a device: the part of each CPU-op, Python or untraced segment
    shorter than ``long_gap_ns`` during which no device activity ran (the device idled for the host; the
    host time the device hid stays, as do runtime and launch calls). CPU only: the segments inside
    top-level ops shorter than ``tiny_op_ns`` (the longer ops do the work) and untraced gaps shorter than
    ``long_gap_ns``."""
    short = (graph.dur < long_gap_ns) & _in_steps(graph)
    gaps = (graph.kind == int(NodeKind.UNTRACED)) & short
    host = graph.kind == int(NodeKind.HOST)
    device = graph.nodes_of(*DEVICE_NODE_KINDS)
    if device.size:
        chosen = np.flatnonzero(gaps | (host & short))
        busy = iv.merge(graph.start[device], graph.end[device])
        kept = iv.overlap_per_window(busy, graph.start[chosen], graph.end[chosen])
        changed = kept < graph.dur[chosen]
        return RemoveHostOverhead(tuple(chosen[changed].tolist()), tuple(kept[changed].tolist()))
    from aiprof.analysis.ops import top_level_ops

    c = trace.columns
    tiny = np.flatnonzero(top_level_ops(trace))
    tiny = tiny[c.dur[tiny] < tiny_op_ns]
    inside = np.zeros(len(graph), dtype=bool)
    for r, res in enumerate(graph.resources):
        mine = tiny[(c.pid[tiny] == res.pid) & (c.tid[tiny] == res.tid)] if res.device < 0 else tiny[:0]
        if not mine.size:
            continue
        starts, ends = iv.merge(c.ts[mine], c.ts[mine] + c.dur[mine])
        nodes = np.flatnonzero(host & (graph.resource == r))
        at = np.searchsorted(starts, graph.start[nodes], side="right") - 1
        inside[nodes[(at >= 0) & (graph.start[nodes] < ends[np.maximum(at, 0)])]] = True
    chosen = np.flatnonzero((gaps | (inside & _in_steps(graph))) & (graph.dur > 0))
    return RemoveHostOverhead(tuple(chosen.tolist()), (0,) * int(chosen.size))


@dataclass(frozen=True)
class RemoveNodes:
    """The nodes ``nodes`` last 0 (:func:`scalar_reads` chooses them): work that the fix takes away whole."""

    nodes: tuple[int, ...]
    name: str = "remove_nodes"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        scenario.dur[np.array(self.nodes, dtype=np.int64)] = 0


# The caching allocator's own calls (rules/memory.py's allocator_churn counts the same names): a cudaFree
# synchronises the device, but it is the allocator's, not a sync the script wrote.
ALLOCATOR_CALLS = r"^(cudaMalloc|cudaFree|cuMemAlloc|cuMemFree|hipMalloc|hipFree|cudaMallocHost|cudaFreeHost|hipHostMalloc)"


def script_syncs(graph: Graph, trace: Trace) -> tuple[int, ...]:
    """The trace rows of the blocking calls that are not the allocator's (``sync``'s to remove)."""
    rows = graph.row[graph.nodes_of(NodeKind.SYNC_CALL)]
    return tuple(rows[~trace.name_matches(rows, ALLOCATOR_CALLS)].tolist())


def allocator_calls(graph: Graph, trace: Trace) -> list[Edit]:
    """``allocator_churn``'s fix (the caching allocator keeps its blocks): the allocator's calls inside the
    steps cost nothing, and those that blocked wait for nothing."""
    calls = graph.nodes_of(NodeKind.RUNTIME, NodeKind.SYNC_CALL)
    calls = calls[trace.name_matches(graph.row[calls], ALLOCATOR_CALLS) & _in_steps(graph)[calls] & (graph.dur[calls] > 0)]
    if not calls.size:
        return []
    blocking = calls[graph.kind[calls] == int(NodeKind.SYNC_CALL)]
    out: list[Edit] = [RemoveNodes(tuple(calls.tolist()), name="allocator_calls")]
    if blocking.size:
        out.append(RemoveSyncs(tuple(graph.row[blocking].tolist())))
    return out


SCALAR_READS = r"^aten::(item|_local_scalar_dense|is_nonzero)$"  # one value read back: .item(), bool(t)


def scalar_reads(graph: Graph, trace: Trace) -> RemoveNodes:
    """The part of ``sync``'s fix that :class:`RemoveSyncs` leaves: the top-level ops that read one scalar
    back (``.item()``, ``bool(tensor)``: :data:`SCALAR_READS`) inside the steps, when they hold a blocking call,
    go whole (their host time, their runtime calls and the copies they launched): reading the values in one
    batch after the loop (``.tolist()``) replaces them. Ops that move whole tensors (``.cpu()``, ``.to()``)
    stay: their copy is the work."""
    from aiprof.analysis.ops import top_level_ops

    c = trace.columns
    blocking = np.array(script_syncs(graph, trace), dtype=np.int64)
    top = np.flatnonzero(top_level_ops(trace))
    top = top[trace.name_matches(top, SCALAR_READS)]
    if not blocking.size or not top.size:
        return RemoveNodes(())
    host = ~_kind_mask(graph, DEVICE_NODE_KINDS + (NodeKind.OUTSIDE,)) & _in_steps(graph)
    inside = np.zeros(len(graph), dtype=bool)
    for r, res in enumerate(graph.resources):
        if res.device >= 0:
            continue
        mine = top[(c.pid[top] == res.pid) & (c.tid[top] == res.tid)]
        calls = blocking[(c.pid[blocking] == res.pid) & (c.tid[blocking] == res.tid)]
        if not mine.size or not calls.size:
            continue
        order = np.argsort(c.ts[mine], kind="stable")
        mine = mine[order]
        at = np.searchsorted(c.ts[mine], c.ts[calls], side="right") - 1
        held = np.unique(at[(at >= 0) & (c.ts[calls] < (c.ts + c.dur)[mine[np.maximum(at, 0)]])])
        if not held.size:
            continue
        starts, ends = c.ts[mine[held]], (c.ts + c.dur)[mine[held]]
        nodes = np.flatnonzero(host & (graph.resource == r))
        k = np.searchsorted(starts, graph.start[nodes], side="right") - 1
        inside[nodes[(k >= 0) & (graph.start[nodes] < ends[np.maximum(k, 0)])]] = True
    launched = (graph.edge_kind == int(EdgeKind.LAUNCH)) & inside[graph.edge_src]
    inside[graph.edge_dst[launched]] = True
    chosen = np.flatnonzero(inside & (graph.dur > 0))
    return RemoveNodes(tuple(chosen.tolist()), name="scalar_reads")


def touched(graph: Graph, edits: list[Edit]) -> np.ndarray:
    """Mask of the nodes ``edits`` change: a duration, or an edge into the node (weight or source). Two fixes
    that touch a common node remove the same time (docs/whatif.md, 'Claims')."""
    scenario = Scenario.of(graph)
    for edit in edits:
        edit.apply(graph, scenario)
    mask: np.ndarray = scenario.dur != graph.dur
    edges = (scenario.weight != graph.edge_weight) | (scenario.src != graph.edge_src)
    mask[graph.edge_dst[edges]] = True
    return mask


@dataclass(frozen=True)
class ScaleHost:
    factor: float
    kinds: tuple[NodeKind, ...] = HOST_OVERHEAD
    name: str = "scale_host"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        chosen = _kind_mask(graph, self.kinds)
        scenario.dur[chosen] = np.rint(scenario.dur[chosen] * self.factor).astype(np.int64)


@dataclass(frozen=True)
class CudaGraphs:
    """Host overhead inside the steps x ``factor`` (0: a graph replay's launch cost is negligible)."""

    factor: float = 0.0
    name: str = "cuda_graphs"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        chosen = _kind_mask(graph, HOST_OVERHEAD) & _in_steps(graph)
        scenario.dur[chosen] = np.rint(scenario.dur[chosen] * self.factor).astype(np.int64)


@dataclass(frozen=True)
class Fuse:
    """Fuse the device nodes ``nodes`` (one stream, in order) into one kernel of ``nbytes`` at
    ``bandwidth_bytes_per_ns``; without them the fused kernel lasts the chain's own kernel time."""

    nodes: tuple[int, ...]
    nbytes: int = 0
    bandwidth_bytes_per_ns: float = 0.0
    name: str = "fuse"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        if len(self.nodes) < 2:
            return
        chain = np.array(self.nodes, dtype=np.int64)
        total = int(scenario.dur[chain].sum())
        if self.nbytes > 0 and self.bandwidth_bytes_per_ns > 0:
            total = int(np.ceil(self.nbytes / self.bandwidth_bytes_per_ns))
        scenario.dur[chain] = 0
        scenario.dur[chain[0]] = total
        rest = chain[1:]
        order = (graph.edge_kind == int(EdgeKind.ORDER)) & arrays.isin(graph.edge_dst, rest)
        scenario.weight[order] = 0  # no gap between the pieces of one kernel
        launch = (graph.edge_kind == int(EdgeKind.LAUNCH)) & arrays.isin(graph.edge_dst, rest)
        scenario.weight[launch] = DISABLED  # the pieces are not launched on their own ...
        launch_calls = graph.edge_src[launch]
        scenario.dur[launch_calls[graph.kind[launch_calls] == int(NodeKind.LAUNCH)]] = 0  # ... nor paid for


@dataclass(frozen=True)
class ScaleNodes:
    """Each node of ``nodes`` lasts ``factors`` of its time (rounded to the ns)."""

    nodes: tuple[int, ...]
    factors: tuple[float, ...]
    name: str = "scale_nodes"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        chosen = np.array(self.nodes, dtype=np.int64)
        scenario.dur[chosen] = np.rint(scenario.dur[chosen] * np.array(self.factors, dtype=np.float64)).astype(np.int64)


FUSED_CHAINS = "fusion_opportunity.chains"  # the trace cache key under which the fusion rule leaves its chains


@dataclass(frozen=True)
class FusedChain:
    """A chain of elementwise ops that ``fusion_opportunity`` found: the ops' trace rows (in order, one
    thread), the bytes one fused kernel moves (the chain's inputs and its final output) and the bytes the
    ops move one by one."""

    rows: tuple[int, ...]
    external_bytes: int
    total_bytes: int


def fused_chains(graph: Graph, trace: Trace) -> list[Edit]:
    """``fusion_opportunity``'s fix, per chain the rule found (:data:`FUSED_CHAINS`): with a device, the
    kernels the chain's ops launched (one stream) become one (:class:`Fuse`): the chain's external bytes at
    the bandwidth its kernels achieved (Σ bytes / Σ kernel time), one launch, no gaps. The ops' own host
    time stays: a compiled chain's wrapper costs about what the eager dispatch did (the H200
    ``planted-elementwise`` pair: 171 vs 170 µs profiled steps; docs/whatif.md 'Findings'). CPU only: the
    ops' host time x external / Σ bytes (the same bytes at the same bandwidth, in one loop)."""
    chains: tuple[FusedChain, ...] = trace.cache.get(FUSED_CHAINS) or ()
    c = trace.columns
    res_of = {(r.pid, r.tid): i for i, r in enumerate(graph.resources) if r.device < 0}
    launch = graph.edge_kind == int(EdgeKind.LAUNCH)
    out: list[Edit] = []
    for chain in chains:
        rows = np.array(chain.rows, dtype=np.int64)
        res = res_of.get((int(c.pid[rows[0]]), int(c.tid[rows[0]])))
        if res is None or chain.total_bytes <= 0 or rows.size < 2:
            continue
        nodes = np.flatnonzero(graph.resource == res)
        lo = np.searchsorted(graph.start[nodes], c.ts[rows], side="left")
        hi = np.searchsorted(graph.start[nodes], (c.ts + c.dur)[rows], side="left")
        per_op = [nodes[a:b] for a, b in zip(lo.tolist(), hi.tolist())]
        host = np.concatenate(per_op)
        host = host[graph.dur[host] > 0]
        if not host.size:
            continue
        calls = np.zeros(len(graph), dtype=bool)
        calls[host] = True
        kernels = np.unique(graph.edge_dst[launch & calls[graph.edge_src]])
        kernels = kernels[graph.kind[kernels] == int(NodeKind.KERNEL)]
        share = min(chain.external_bytes / chain.total_bytes, 1.0)
        if kernels.size >= 2 and np.unique(graph.resource[kernels]).size == 1:
            kernel_ns = int(graph.dur[kernels].sum())
            out.append(Fuse(tuple(kernels.tolist()), chain.external_bytes, chain.total_bytes / max(kernel_ns, 1)))
        elif not graph.nodes_of(*DEVICE_NODE_KINDS).size:
            out.append(ScaleNodes(tuple(host.tolist()), (share,) * int(host.size), name="fused_loop"))
    return out


@dataclass(frozen=True)
class ScaleKernels:
    """The device nodes ``nodes`` (every compute kernel when empty; see :func:`kernels_matching`) x
    ``factor``."""

    factor: float
    nodes: tuple[int, ...] = ()
    name: str = "scale_kernels"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        chosen = np.array(self.nodes, dtype=np.int64) if self.nodes else graph.nodes_of(NodeKind.KERNEL)
        scenario.dur[chosen] = np.rint(scenario.dur[chosen] * self.factor).astype(np.int64)


@dataclass(frozen=True)
class KernelsToRoof:
    """Each node with a known roofline time (``roof_ns[node] > 0``) runs at ``fraction`` of its roof:
    ``roof / fraction`` ns, where that is faster than observed."""

    roof_ns: tuple[int, ...]
    fraction: float = 0.8
    name: str = "to_roof"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        roof = np.array(self.roof_ns, dtype=np.float64)
        known = roof > 0
        target = np.ceil(roof / max(self.fraction, 1e-9)).astype(np.int64)
        scenario.dur[known] = np.minimum(scenario.dur[known], target[known])


@dataclass(frozen=True)
class OverlapComm:
    """Collectives off the compute stream (see module doc); their time x ``interference``."""

    interference: float = 1.0
    name: str = "overlap_comm"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        comm = graph.kind == int(NodeKind.COMM)
        scenario.dur[comm] = np.rint(scenario.dur[comm] * self.interference).astype(np.int64)
        order = np.flatnonzero(graph.edge_kind == int(EdgeKind.ORDER))
        src, dst = graph.edge_src[order], graph.edge_dst[order]
        moved = comm[src] & ~comm[dst] & np.isin(graph.kind[dst], [int(NodeKind.KERNEL), int(NodeKind.MEMCPY),
                                                                   int(NodeKind.MEMSET)])
        prev_of = np.full(len(graph), -1, dtype=np.int64)
        prev_of[dst] = src
        for k in order[moved].tolist():  # walk back over the collectives to the compute before them
            p = int(graph.edge_src[k])
            while p >= 0 and comm[p]:
                p = int(prev_of[p])
            if p >= 0:
                scenario.src[k] = p
                scenario.weight[k] = 0
            else:
                scenario.weight[k] = DISABLED


# ---------------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------------
@dataclass
class Prediction:
    """Per step: observed (identity replay) and predicted durations, ns."""

    edits: list[str]
    baseline_ns: I64
    predicted_ns: I64
    replay: Replay
    times: StepTimes
    notes: list[str] = field(default_factory=list)

    @property
    def baseline_median_ns(self) -> int:
        return int(np.median(self.baseline_ns)) if self.baseline_ns.size else 0

    @property
    def predicted_median_ns(self) -> int:
        return int(np.median(self.predicted_ns)) if self.predicted_ns.size else 0

    @property
    def saving_ns(self) -> int:
        """Median step saving (median of the per-step savings; positive = faster)."""
        if self.baseline_ns.size == 0:
            return 0
        return int(np.median(self.baseline_ns - self.predicted_ns))


def run_edits(graph: Graph, edits: list[Edit]) -> tuple[Replay, StepTimes]:
    scenario = Scenario.of(graph)
    for edit in edits:
        edit.apply(graph, scenario)
    result = replay(graph, dur=scenario.dur, weight=scenario.weight, src=scenario.src)
    return result, step_times(graph, result)


def baseline(graph: Graph) -> I64:
    """The identity replay's step durations (equal to the observed ones; cached on the graph)."""
    if graph.baseline_ns is None:
        graph.baseline_ns = step_times(graph, replay(graph)).duration_ns
    return graph.baseline_ns


def predict(graph: Graph, edits: list[Edit]) -> Prediction:
    """Replay ``edits`` and compare every step with the identity replay."""
    result, times = run_edits(graph, edits)
    return Prediction([e.name for e in edits], baseline(graph), times.duration_ns, result, times)


def kernels_matching(graph: Graph, trace: Trace, pattern: str) -> tuple[int, ...]:
    """The compute-kernel nodes whose name matches the regular expression ``pattern``."""
    nodes = graph.nodes_of(NodeKind.KERNEL)
    hit = trace.name_matches(graph.row[nodes], pattern)
    return tuple(nodes[hit].tolist())
