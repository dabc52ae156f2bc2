"""The ranks of a distributed run in one dependency graph: each rank's graph, and its collectives joined across
ranks, so that a collective ends when its last rank arrives and a fix on one rank moves every rank's step.

Each rank's graph is built alone (:func:`~aiprof.analysis.whatif.graph.build_graph`), then the graphs are put
side by side (node and resource numbers offset, each rank's nodes contiguous). The spans that carry each
collective (:func:`~aiprof.analysis.arrival.transport_table`: communication kernels, or on a CPU run gloo's
``gloo:all_reduce`` spans on its worker threads) are matched across ranks as the arrival analysis matches
them: by (step number, process group, collective, ordinal within the step), never by wall time. A matched
span ``X`` of rank ``r`` is split in two:

- an ``ARRIVE`` node (zero length, appended after every rank's nodes) at the span's observed start: where the
  rank reached the collective. It takes over the span's incoming edges (the stream's order and the launch, or
  the helper thread's wake-up);
- ``X`` itself, now only the transfer: from the last rank's arrival ``L`` (the largest observed start of the
  instance, clipped to the span) to the span's observed end. Its predecessors are its own ``ARRIVE`` (an
  ``ORDER`` edge) and the other ranks' ``ARRIVE`` nodes (``COLLECTIVE`` edges); its outgoing edges stay.

The joined graph is calibrated again as one (docs/whatif.md 'The graph'), so its identity replay gives every
rank its observed steps. An edit that makes the last rank arrive earlier starts the transfer earlier on every
rank; the ranks that waited finish their step earlier by as much.

A run's step is the slowest rank's: per step index, the largest of the ranks' step durations
(:func:`predict_run`; ranks with fewer steps are cut to the shortest). Clocks are taken as the traces give
them (one host, or synchronised hosts); a skew between hosts is frozen into the calibrated collective edges.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from aiprof.analysis.arrival import ArrivalTable
from aiprof.analysis.steps import StepWindow
from aiprof.analysis.whatif.edits import Edit, Prediction, ScaleNodes, Scenario, _in_steps
from aiprof.analysis.whatif.graph import (
    DEVICE_NODE_KINDS, SYNC_TOLERANCE_NS, EdgeKind, Graph, NodeKind, Resource, _kahn, calibrate,
)
from aiprof.analysis.whatif.replay import Replay, StepTimes, replay, step_times
from aiprof.trace.model import I64, Bool, Trace

STRAGGLER_NOISE_NS = 20_000  # an arrival this little after the others' is noise (arrival.NOISE_FLOOR_NS)


@dataclass
class Collective:
    """One matched collective instance: per rank (index into ``RunGraph.ranks``) its transfer node, its
    arrival node, its observed arrival, and the start of the rank's work towards it (the end of the rank's
    previous instance in the step, else the step's host start)."""

    key: tuple[int, str, str, int]  # (step number, group, collective, ordinal)
    ranks: I64
    transfer: I64
    arrive: I64
    arrive_ns: I64
    since_ns: I64


@dataclass
class RunGraph:
    """Every rank's graph in one (module doc). ``views[i]`` is the joined graph seen with rank ``i``'s step
    windows (what :func:`~aiprof.analysis.whatif.replay.step_times` needs)."""

    graph: Graph
    ranks: list[int]  # the run's rank numbers, in graph order
    rank_of: I64  # per node: the index of its rank
    offsets: list[int]  # per rank: its first node (its own nodes are contiguous; ARRIVE nodes come after all)
    views: list[Graph]
    collectives: list[Collective]
    rank_graphs: list[Graph]  # each rank's own graph (node numbers from 0: offsets[i] in the joined graph)
    baseline_ns: I64 | None = None

    def mask(self, rank_index: int) -> Bool:
        found: Bool = self.rank_of == rank_index
        return found


def build_run_graph(traces: list[Trace], windows: list[list[StepWindow]], ranks: list[int]) -> RunGraph:
    """The joined graph of ``traces`` (one per rank, rank numbers ``ranks``; ``windows`` their steps)."""
    from aiprof.analysis.arrival import transport_table
    from aiprof.analysis.whatif.graph import build_graph

    graphs = [build_graph(t, w) for t, w in zip(traces, windows)]
    tables = [transport_table(t, w) for t, w in zip(traces, windows)]
    return join_graphs(graphs, [_transport_nodes(g, t, rows) for g, t, (_, rows) in zip(graphs, traces, tables)],
                       [table for table, _ in tables], ranks)


def _transport_nodes(graph: Graph, trace: Trace, rows: I64) -> I64:
    """The node of each transport row (-1: none): a device activity's own node, or the host node of the row's
    thread that starts where the span does."""
    out = np.full(rows.size, -1, dtype=np.int64)
    if not rows.size:
        return out
    c = trace.columns
    device = np.isin(graph.kind, [int(k) for k in DEVICE_NODE_KINDS])
    dev_nodes = np.flatnonzero(device)
    node_of_row = np.full(len(trace.columns), -1, dtype=np.int64)
    node_of_row[graph.row[dev_nodes]] = dev_nodes
    out[:] = node_of_row[rows]
    res_of = {(r.pid, r.tid): i for i, r in enumerate(graph.resources) if r.device < 0}
    for k in np.flatnonzero(out < 0).tolist():
        row = int(rows[k])
        res = res_of.get((int(c.pid[row]), int(c.tid[row])))
        if res is None:
            continue
        nodes = np.flatnonzero(graph.resource == res)  # contiguous, in time order
        at = int(np.searchsorted(graph.start[nodes], int(c.ts[row]), side="right")) - 1
        if at >= 0 and graph.start[nodes[at]] == c.ts[row] and graph.dur[nodes[at]] > 0:
            out[k] = nodes[at]
    return out


def join_graphs(graphs: list[Graph], transport: list[I64], tables: list[ArrivalTable], ranks: list[int]) -> RunGraph:
    """Put ``graphs`` side by side and join their matched collectives (module doc); ``transport[i]`` is the node
    of each row of ``tables[i]`` in ``graphs[i]`` (-1: not found, the instance is left unjoined)."""
    sizes = [len(g) for g in graphs]
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64).tolist()
    res_offsets = np.concatenate(([0], np.cumsum([len(g.resources) for g in graphs])[:-1])).astype(np.int64).tolist()
    cat = {name: np.concatenate([getattr(g, name) for g in graphs]) for name in ("kind", "start", "dur", "row")}
    resource = np.concatenate([g.resource + o for g, o in zip(graphs, res_offsets)])
    src = np.concatenate([g.edge_src + o for g, o in zip(graphs, offsets)])
    dst = np.concatenate([g.edge_dst + o for g, o in zip(graphs, offsets)])
    ekind = np.concatenate([g.edge_kind for g in graphs]).astype(np.int8)
    from_start = np.concatenate([g.edge_from_start for g in graphs])
    rank_of = np.repeat(np.arange(len(graphs), dtype=np.int64), sizes)
    in_steps = np.concatenate([_in_steps(g) for g in graphs])
    collectives = _match([t + o if t.size else t for t, o in zip(transport, offsets)], tables,
                         [g.windows for g in graphs])
    n = int(sum(sizes))
    start, dur = cat["start"].astype(np.int64), cat["dur"].astype(np.int64)
    end = start + dur
    mains = [_main_nodes(g, o, resource) for g, o in zip(graphs, offsets)]
    redirect = np.arange(n, dtype=np.int64)
    new_src: list[I64] = []
    new_dst: list[I64] = []
    new_kind: list[I64] = []
    arrive_rows: list[int] = []
    arrive_start: list[int] = []
    arrive_of: list[int] = []
    for coll in collectives:
        first = n + len(arrive_of)
        coll.arrive = np.arange(first, first + coll.transfer.size, dtype=np.int64)
        coll.arrive_ns = start[coll.transfer].copy()
        arrive_of.extend(coll.transfer.tolist())
        arrive_start.extend(coll.arrive_ns.tolist())
        last = int(coll.arrive_ns.max())
        new_start = np.clip(last, coll.arrive_ns, end[coll.transfer])
        dur[coll.transfer] = end[coll.transfer] - new_start
        start[coll.transfer] = new_start
        redirect[coll.transfer] = coll.arrive
        k = coll.transfer.size
        pairs_src = np.repeat(coll.arrive, k)
        pairs_dst = np.tile(coll.transfer, k)
        new_src.append(pairs_src)
        new_dst.append(pairs_dst)
        own = np.repeat(np.arange(k), k) == np.tile(np.arange(k), k)
        new_kind.append(np.where(own, int(EdgeKind.ORDER), int(EdgeKind.COLLECTIVE)).astype(np.int64))
        arrive_rows.extend(cat["row"][coll.transfer].tolist())
        waits = _host_waits(coll, last, mains, cat["kind"], start, end)
        if waits.size:
            new_src.append(coll.transfer[waits >= 0])
            new_dst.append(waits[waits >= 0])
            new_kind.append(np.full(int((waits >= 0).sum()), int(EdgeKind.COLLECTIVE), np.int64))
            joined = waits[waits >= 0]
            cat["kind"][joined] = int(NodeKind.JOIN)
            start[joined], dur[joined] = end[joined], 0  # a wait sits where it ended
    m = len(arrive_of)
    of = np.array(arrive_of, dtype=np.int64)
    dst = redirect[dst]  # the transfers' incoming edges now lead to their arrival
    if m:
        src = np.concatenate([src, *new_src])
        dst = np.concatenate([dst, *new_dst])
        ekind = np.concatenate([ekind, *[x.astype(np.int8) for x in new_kind]])
        from_start = np.concatenate([from_start, np.zeros(int(sum(x.size for x in new_src)), bool)])
    kind = np.concatenate([cat["kind"], np.full(m, int(NodeKind.ARRIVE), dtype=cat["kind"].dtype)])
    graph = _assemble(kind, np.concatenate([resource, resource[of]]), np.concatenate([start, arrive_start]),
                      np.concatenate([dur, np.zeros(m, np.int64)]), np.concatenate([cat["row"], arrive_rows]),
                      src, dst, ekind, from_start, [r for g in graphs for r in g.resources],
                      np.concatenate([in_steps, in_steps[of]]), of)
    calibrate(graph)
    rank_of = np.concatenate([rank_of, rank_of[of]])
    views = [_view(graph, g, o, redirect) for g, o in zip(graphs, offsets)]
    return RunGraph(graph, list(ranks), rank_of, offsets, views, collectives, graphs)


def _main_nodes(graph: Graph, offset: int, resource: I64) -> I64:
    """The nodes of a rank's steps' thread (in the joined numbering, in time order)."""
    if not graph.windows or graph.window_start_node.size == 0 or graph.window_start_node[0] < 0:
        return np.zeros(0, dtype=np.int64)
    found: I64 = np.flatnonzero(graph.resource == graph.resource[graph.window_start_node[0]]) + offset
    return found


def _host_waits(coll: Collective, last: int, mains: list[I64], kind: np.ndarray, start: I64, end: I64) -> I64:
    """Per member rank of a collective carried on host threads (gloo), the untraced node of its steps' thread
    that waited for it (-1: none): the one in which the last rank arrived, ending no later than the rank's
    transfer ended (:data:`~aiprof.analysis.whatif.graph.SYNC_TOLERANCE_NS`); it becomes a zero-length JOIN fed
    by the transfer (``work.wait()`` returns when the collective is done). A helper-thread burst already seen
    as joined (``JOIN``) needs none."""
    out = np.full(coll.transfer.size, -1, dtype=np.int64)
    if np.isin(kind[coll.transfer], [int(k) for k in DEVICE_NODE_KINDS]).any():
        return out
    for i, (r, x) in enumerate(zip(coll.ranks.tolist(), coll.transfer.tolist())):
        nodes = mains[r]
        at = int(np.searchsorted(start[nodes], last, side="right")) - 1
        if at < 0:
            continue
        u = int(nodes[at])
        if (kind[u] == int(NodeKind.UNTRACED) and start[u] <= last < end[u]
                and end[u] <= max(int(end[x]), last) + SYNC_TOLERANCE_NS):
            out[i] = u
    return out


def _match(transport: list[I64], tables: list[ArrivalTable], windows: list[list[StepWindow]]) -> list[Collective]:
    """The instances found on at least two ranks, each rank's transfer node once (module doc)."""
    found: dict[tuple[int, str, str, int], list[tuple[int, int, int]]] = {}
    for r, (nodes, table) in enumerate(zip(transport, tables)):
        groups = table.group_names()
        colls = [table.labels[i] for i in table.collective.tolist()]
        since = _since(table, windows[r])
        for i, node in enumerate(nodes.tolist()):
            if node >= 0:
                key = (int(table.step[i]), groups[i], colls[i], int(table.ordinal[i]))
                found.setdefault(key, []).append((r, node, int(since[i])))
    used: set[int] = set()
    out: list[Collective] = []
    for key, members in found.items():
        ranks = [m[0] for m in members]
        if len(set(ranks)) < 2 or len(set(ranks)) != len(ranks) or any(m[1] in used for m in members):
            continue
        used.update(m[1] for m in members)
        empty = np.zeros(0, np.int64)
        out.append(Collective(key, np.array(ranks, np.int64), np.array([m[1] for m in members], np.int64), empty,
                              empty, np.array([m[2] for m in members], np.int64)))
    return out


def _since(table: ArrivalTable, windows: list[StepWindow]) -> I64:
    """Per row: the end of the rank's previous collective in the same step, else the step's host start."""
    starts = {w.number: w.cpu_start_ns for w in windows}
    out = np.zeros(len(table), dtype=np.int64)
    prev: dict[int, int] = {}
    for i, (step, arrive, end) in enumerate(zip(table.step.tolist(), table.arrive_ns.tolist(), table.end_ns.tolist())):
        first = starts.get(step, arrive)
        out[i] = min(max(prev.get(step, first), first), arrive)
        prev[step] = max(end, arrive)
    return out


def _assemble(kind: np.ndarray, resource: I64, start: I64, dur: I64, row: I64, src: I64, dst: I64, ekind: np.ndarray,
              from_start: np.ndarray, resources: list[Resource], in_steps: Bool, split: I64) -> Graph:
    order = np.argsort(dst, kind="stable")
    dst = dst[order]
    ptr = np.searchsorted(dst, np.arange(kind.size + 1)).astype(np.int64)
    empty = np.zeros(0, np.int64)
    graph = Graph(kind=kind, resource=resource, start=start, dur=dur, row=row, edge_src=src[order], edge_dst=dst,
                  edge_kind=ekind[order], edge_from_start=from_start[order], edge_weight=np.zeros(dst.size, np.int64),
                  edge_floor=np.zeros(dst.size, np.int64), edge_ptr=ptr, order=empty, resources=resources,
                  windows=[], window_start_node=empty, window_end_node=empty, window_of_device_node=empty,
                  in_steps=in_steps)
    graph.order = _order(graph, split)
    return graph


def _order(graph: Graph, split: I64) -> I64:
    """By observed start, a transfer after the arrivals at its start (its own among them), device after host;
    Kahn's algorithm where a clock glitch breaks it (as :func:`~aiprof.analysis.whatif.graph.topological_order`)."""
    n = len(graph)
    is_device = np.isin(graph.kind, [int(k) for k in DEVICE_NODE_KINDS])
    late = np.zeros(n, dtype=bool)
    late[split] = True
    order = np.lexsort((np.arange(n), is_device, late, graph.start))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    if graph.edge_count == 0 or bool((pos[graph.edge_src] < pos[graph.edge_dst]).all()):
        found: I64 = order.astype(np.int64)
        return found
    return _kahn(graph, pos)


def _view(graph: Graph, rank_graph: Graph, offset: int, redirect: I64) -> Graph:
    """The joined graph with one rank's step windows (a window boundary on a split transfer: its arrival)."""
    device = np.full(len(graph), -1, dtype=np.int64)
    device[offset:offset + len(rank_graph)] = rank_graph.window_of_device_node
    starts = np.where(rank_graph.window_start_node >= 0, redirect[np.maximum(rank_graph.window_start_node + offset, 0)], -1)
    ends = np.where(rank_graph.window_end_node >= 0, redirect[np.maximum(rank_graph.window_end_node + offset, 0)], -1)
    return dataclasses.replace(graph, windows=rank_graph.windows, window_start_node=starts.astype(np.int64),
                               window_end_node=ends.astype(np.int64), window_of_device_node=device, baseline_ns=None)


# ---------------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------------
def run_steps(run: RunGraph, result: Replay) -> tuple[I64, list[StepTimes]]:
    """Per step index, the slowest rank's replayed step (module doc), and every rank's step times."""
    times = [step_times(view, result) for view in run.views]
    count = min((t.duration_ns.size for t in times), default=0)
    if count == 0:
        return np.zeros(0, dtype=np.int64), times
    steps: I64 = np.max(np.stack([t.duration_ns[:count] for t in times]), axis=0)
    return steps, times


def run_baseline(run: RunGraph) -> I64:
    """The identity replay's run steps (equal to the observed slowest rank's; cached)."""
    if run.baseline_ns is None:
        run.baseline_ns = run_steps(run, replay(run.graph))[0]
    return run.baseline_ns


def predict_run(run: RunGraph, edits: list[Edit]) -> Prediction:
    """Replay ``edits`` on the joined graph and compare the run's steps with the identity replay's."""
    result, _ = _replayed(run, edits)
    steps, times = run_steps(run, result)
    return Prediction([e.name for e in edits], run_baseline(run), steps, result, times[0])


def _replayed(run: RunGraph, edits: list[Edit]) -> tuple[Replay, Scenario]:
    scenario = Scenario.of(run.graph)
    for edit in edits:
        edit.apply(run.graph, scenario)
    return replay(run.graph, dur=scenario.dur, weight=scenario.weight, src=scenario.src), scenario


@dataclass(frozen=True, eq=False)
class OnRanks:
    """``edits`` applied to the nodes of ``mask`` only (a rank's fix in the joined graph): their changes to
    durations, and to the edges into those nodes, are kept; the rest is left as it was. A fix shortens work,
    so no node comes out longer than it was (an edit made on the rank's own graph may name a node the join
    turned into a wait: ``_host_waits``)."""

    edits: tuple[Edit, ...]
    mask: Bool
    name: str = "on_ranks"

    def apply(self, graph: Graph, scenario: Scenario) -> None:
        trial = Scenario(scenario.dur.copy(), scenario.weight.copy(), scenario.src.copy())
        for edit in self.edits:
            edit.apply(graph, trial)
        mine = self.mask
        scenario.dur[mine] = np.minimum(trial.dur[mine], scenario.dur[mine])
        edges = mine[graph.edge_dst]
        scenario.weight[edges] = trial.weight[edges]
        scenario.src[edges] = trial.src[edges]


def on_rank(run: RunGraph, rank_index: int, edits: list[Edit]) -> OnRanks:
    """Rank ``rank_index``'s edits, made on its own graph (node numbers from 0), in the joined graph: node
    numbers shifted to the rank's, applied to its nodes only."""
    return OnRanks(tuple(shift(e, run.offsets[rank_index]) for e in edits), run.mask(rank_index))


def shift(edit: Edit, offset: int) -> Edit:
    """``edit`` with the node numbers it holds moved by ``offset`` (edits that choose by kind hold none)."""
    nodes = getattr(edit, "nodes", None)
    if not offset or not isinstance(nodes, tuple) or not nodes:
        return edit
    return dataclasses.replace(edit, nodes=tuple(int(x) + offset for x in nodes))  # type: ignore[type-var]


STRAGGLER_WORK = (NodeKind.HOST, NodeKind.UNTRACED, NodeKind.RUNTIME, NodeKind.LAUNCH, NodeKind.KERNEL,
                  NodeKind.MEMCPY, NodeKind.MEMSET)


def straggler_work(run: RunGraph, rank_index: int) -> ScaleNodes:
    """``straggler``'s fix: the straggler's extra work goes. At every collective it reached last, more than
    :data:`STRAGGLER_NOISE_NS` after the latest of the others, its work towards it (host work and compute of
    its own, :data:`STRAGGLER_WORK`, that starts between the end of its previous collective in the step, or
    the step's start, and its arrival) is scaled by ``1 - lateness / that span``: it arrives as the latest of
    the others did, had its work been as long as theirs."""
    graph = run.graph
    mine = run.mask(rank_index) & np.isin(graph.kind, [int(k) for k in STRAGGLER_WORK]) & (graph.dur > 0)
    mine &= _in_steps(graph)
    factor = np.ones(len(graph), dtype=np.float64)
    for coll in run.collectives:
        at = np.flatnonzero(coll.ranks == rank_index)
        if not at.size or coll.ranks.size < 2:
            continue
        own = int(coll.arrive_ns[at[0]])
        others = int(np.delete(coll.arrive_ns, at[0]).max())
        late, span = own - others, own - int(coll.since_ns[at[0]])
        if late <= STRAGGLER_NOISE_NS or span <= 0:
            continue
        inside = mine & (graph.start >= coll.since_ns[at[0]]) & (graph.start < own)
        factor[inside] = np.minimum(factor[inside], max(0.0, 1.0 - late / span))
    chosen = np.flatnonzero(factor < 1.0)
    return ScaleNodes(tuple(chosen.tolist()), tuple(factor[chosen].tolist()), name="straggler_work")

