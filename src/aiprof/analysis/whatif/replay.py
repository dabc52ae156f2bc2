"""Discrete-event replay of a dependency graph, the steps it gives, and their critical paths.

List scheduling as in Daydream and Lumos: in topological order, each node starts at the latest of its
predecessors' reference times plus the edge weights (a node with no predecessor starts where it was
observed) and ends its duration later. One pass, O(nodes + edges); the loop runs over Python lists,
which is several times faster than indexing NumPy arrays one element at a time.

A step's replayed window follows :mod:`aiprof.analysis.steps`: it starts where its host span starts on the
step's thread (no earlier than the previous step's end) and ends at the later of its host span's end and
the end of the device work launched inside that span.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiprof.analysis.steps import WHOLE_TRACE
from aiprof.analysis.whatif.graph import Graph, NodeKind
from aiprof.trace.model import I64


@dataclass
class Replay:
    """Replayed start and end per node, the edge that set each node's start (-1: none), and the edge
    sources the replay used (an edit may re-point edges)."""

    start: I64
    end: I64
    binding: I64
    src: I64


@dataclass(frozen=True)
class StepTimes:
    """Replayed windows, one per step window of the graph."""

    start_ns: I64
    end_ns: I64
    end_node: I64  # the node whose end closed the window

    @property
    def duration_ns(self) -> I64:
        d: I64 = self.end_ns - self.start_ns
        return d


def replay(graph: Graph, dur: I64 | None = None, weight: I64 | None = None, src: I64 | None = None) -> Replay:
    """Replay ``graph`` with its durations, edge weights and edge sources, or the edited ones given. An
    edited source must come earlier in the graph's topological order than the edge's destination."""
    durs = (graph.dur if dur is None else dur).tolist()
    weights = (graph.edge_weight if weight is None else weight).tolist()
    sources = (graph.edge_src if src is None else src).tolist()
    from_start = graph.edge_from_start.tolist()
    ptr = graph.edge_ptr.tolist()
    anchor = graph.start.tolist()
    n = len(graph)
    start = [0] * n
    end = [0] * n
    binding = [-1] * n
    for node in graph.order.tolist():
        lo, hi = ptr[node], ptr[node + 1]
        if lo == hi:
            s = anchor[node]
        else:
            k = lo
            p = sources[k]
            s = (start[p] if from_start[k] else end[p]) + weights[k]
            b = k
            for k in range(lo + 1, hi):
                p = sources[k]
                t = (start[p] if from_start[k] else end[p]) + weights[k]
                if t > s:
                    s, b = t, k
            binding[node] = b
        start[node] = s
        end[node] = s + durs[node]
    return Replay(np.array(start, dtype=np.int64), np.array(end, dtype=np.int64),
                  np.array(binding, dtype=np.int64), graph.edge_src if src is None else src)


def step_times(graph: Graph, result: Replay) -> StepTimes:
    """The replayed step windows (see module doc)."""
    n = len(graph.windows)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return StepTimes(empty, empty, empty)
    if graph.windows[0].source == WHOLE_TRACE or (graph.window_start_node < 0).any():
        return _whole_trace(graph, result)
    cpu_start = result.start[graph.window_start_node]
    cpu_end = result.start[graph.window_end_node]
    dev = np.flatnonzero(graph.window_of_device_node >= 0)
    gpu_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(gpu_end, graph.window_of_device_node[dev], result.end[dev])
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    end_node = np.empty(n, dtype=np.int64)
    prev_end = np.iinfo(np.int64).min
    last_gpu = _last_device_node(graph, result, dev, n)
    for i in range(n):
        starts[i] = max(int(cpu_start[i]), prev_end)
        if gpu_end[i] > cpu_end[i]:
            ends[i], end_node[i] = max(int(gpu_end[i]), int(starts[i])), last_gpu[i]
        else:
            ends[i], end_node[i] = max(int(cpu_end[i]), int(starts[i])), graph.window_end_node[i]
        prev_end = int(ends[i])
    return StepTimes(starts, ends, end_node)


def _last_device_node(graph: Graph, result: Replay, dev: I64, n: int) -> I64:
    out = np.full(n, -1, dtype=np.int64)
    if dev.size == 0:
        return out
    order = np.lexsort((result.end[dev], graph.window_of_device_node[dev]))
    nodes = dev[order]
    win = graph.window_of_device_node[nodes]
    last = np.r_[win[1:] != win[:-1], True]
    out[win[last]] = nodes[last]
    return out


def _whole_trace(graph: Graph, result: Replay) -> StepTimes:
    """One window over the trace: its observed length, moved by how much the replay moved the extent of
    the modelled work."""
    inside = np.flatnonzero(graph.kind != int(NodeKind.OUTSIDE))
    w = graph.windows[0]
    if inside.size == 0:
        return StepTimes(np.array([w.start_ns]), np.array([w.end_ns]), np.array([-1]))
    obs_lo, obs_hi = int(graph.start[inside].min()), int(graph.end[inside].max())
    lo, hi = int(result.start[inside].min()), int(result.end[inside].max())
    last = int(inside[np.argmax(result.end[inside])])
    start = w.start_ns + (lo - obs_lo)
    return StepTimes(np.array([start]), np.array([start + w.duration_ns + (hi - lo) - (obs_hi - obs_lo)]),
                     np.array([last]))


def critical_path(graph: Graph, result: Replay, end_node: int, start_ns: int) -> I64:
    """The nodes whose chain of binding edges set ``end_node``'s end, back to the step's start: the
    critical path, in time order."""
    path: list[int] = []
    node = end_node
    src = result.src
    while node >= 0:
        path.append(node)
        if result.start[node] <= start_ns:
            break
        edge = int(result.binding[node])
        node = int(src[edge]) if edge >= 0 else -1
    return np.array(path[::-1], dtype=np.int64)


def step_critical_paths(graph: Graph, result: Replay, times: StepTimes) -> list[I64]:
    """The critical path of every replayed step (of the whole trace when the trace has no steps)."""
    return [critical_path(graph, result, int(node), int(start)) if node >= 0 else np.zeros(0, dtype=np.int64)
            for node, start in zip(times.end_node.tolist(), times.start_ns.tolist())]


def trace_critical_path(graph: Graph, result: Replay) -> I64:
    """The critical path of the whole replayed trace: back from the node that ends last (HTA's view of a
    trace with no annotation chosen)."""
    inside = np.flatnonzero(graph.kind != int(NodeKind.OUTSIDE))
    if inside.size == 0:
        return np.zeros(0, dtype=np.int64)
    last = int(inside[np.argmax(result.end[inside])])
    return critical_path(graph, result, last, int(result.start[inside].min()))
