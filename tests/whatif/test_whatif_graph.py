"""The dependency graph and its replay on a tiny hand-built trace with a known answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import aiprof
from aiprof.analysis.whatif.graph import EdgeKind, Graph, NodeKind, build_graph
from aiprof.analysis.whatif.replay import critical_path, replay, step_times
from aiprof.trace.model import Trace
from kineto_builder import TraceBuilder


def sync_trace(tmp_path: Path, call: str = "cudaDeviceSynchronize") -> Trace:
    """One step (0-100 µs): k1 (20-40) launched at 11, a cudaDeviceSynchronize (or ``call``) 32-45 that
    waits for it, then k2 (60-70) launched at 50."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    op = b.cpu_op("aten::add", ts=10, dur=20)
    b.launch(op, kernel="k1", kernel_ts=20, kernel_dur=20, ts=11, dur=2)
    b.runtime(call, 32, 13)
    op2 = b.cpu_op("aten::mul", ts=48, dur=10)
    b.launch(op2, kernel="k2", kernel_ts=60, kernel_dur=10, ts=50, dur=2)
    loaded = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(loaded, Trace)
    return loaded


def _node(graph: Graph, kind: NodeKind, nth: int = 0) -> int:
    return int(graph.nodes_of(kind)[nth])


def test_graph_has_launch_sync_and_order_edges(tmp_path: Path) -> None:
    graph = build_graph(sync_trace(tmp_path))
    kinds = graph.edge_kind
    assert (kinds == EdgeKind.LAUNCH).sum() == 2 and (kinds == EdgeKind.SYNC).sum() == 1
    wait = _node(graph, NodeKind.WAIT)
    k1 = _node(graph, NodeKind.KERNEL, 0)
    sync_edges = np.flatnonzero(kinds == EdgeKind.SYNC)
    assert graph.edge_src[sync_edges[0]] == k1 and graph.edge_dst[sync_edges[0]] == wait
    assert graph.start[wait] == 45_000  # the wait node sits where the call returned
    assert graph.dur[_node(graph, NodeKind.SYNC_CALL)] <= 2_000  # the call's own cost: a launch's
    # The host thread is one chain of contiguous nodes.
    host = np.flatnonzero(graph.resource == graph.resource[wait])
    assert (graph.start[host][1:] >= graph.end[host][:-1]).all()


def test_identity_replay_is_exact(tmp_path: Path) -> None:
    graph = build_graph(sync_trace(tmp_path))
    result = replay(graph)
    assert (result.start == graph.start).all() and (result.end == graph.end).all()
    assert step_times(graph, result).duration_ns.tolist() == [100_000]


def test_a_longer_kernel_delays_the_host_behind_the_sync(tmp_path: Path) -> None:
    graph = build_graph(sync_trace(tmp_path))
    dur = graph.dur.copy()
    dur[_node(graph, NodeKind.KERNEL, 0)] += 20_000
    result = replay(graph, dur=dur)
    # The sync returns 20 µs later; everything after it on the host, and k2, move by 20 µs.
    assert result.start[_node(graph, NodeKind.WAIT)] == 65_000
    assert result.start[_node(graph, NodeKind.KERNEL, 1)] == 80_000
    assert step_times(graph, result).duration_ns.tolist() == [120_000]


def test_a_longer_kernel_without_a_sync_moves_nothing_on_the_host(tmp_path: Path) -> None:
    graph = build_graph(sync_trace(tmp_path))
    dur = graph.dur.copy()
    dur[_node(graph, NodeKind.KERNEL, 1)] += 20_000  # k2 now ends at 90, still inside the host span
    result = replay(graph, dur=dur)
    assert step_times(graph, result).duration_ns.tolist() == [100_000]
    dur[_node(graph, NodeKind.KERNEL, 1)] += 20_000  # ends at 110: the step stretches to it
    assert step_times(graph, replay(graph, dur=dur)).duration_ns.tolist() == [110_000]


def test_critical_path_runs_through_the_sync(tmp_path: Path) -> None:
    graph = build_graph(sync_trace(tmp_path))
    dur = graph.dur.copy()
    dur[_node(graph, NodeKind.KERNEL, 1)] += 40_000
    result = replay(graph, dur=dur)
    times = step_times(graph, result)
    path = critical_path(graph, result, int(times.end_node[0]), int(times.start_ns[0]))
    kinds = [NodeKind(int(k)) for k in graph.kind[path]]
    assert kinds[-1] == NodeKind.KERNEL and kinds.count(NodeKind.KERNEL) == 2  # k2, and k1 via the wait
    assert NodeKind.WAIT in kinds and NodeKind.LAUNCH in kinds


def handoff_trace(tmp_path: Path, main_busy: bool = False) -> Trace:
    """Step 0-100 µs on the main thread: aten::mm 0-10, then (like loss.backward()) the autograd thread
    works 20-60 while the main thread waits, then aten::add 60-90. With ``main_busy`` the main thread runs
    its own aten::mul 30-40 meanwhile (so it was not waiting)."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mm", ts=0, dur=10)
    b.cpu_op("autograd::engine::evaluate_function: MmBackward0", ts=20, dur=40, tid=77)
    if main_busy:
        b.cpu_op("aten::mul", ts=30, dur=10)
    b.cpu_op("aten::add", ts=60, dur=30)
    return _load_trace(b, tmp_path)


def _load_trace(b: TraceBuilder, tmp_path: Path) -> Trace:
    loaded = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(loaded, Trace)
    return loaded


def _backward_node(graph: Graph) -> int:
    helper = graph.resource != graph.resource[graph.window_start_node[0]]
    return int(np.flatnonzero((graph.kind == NodeKind.HOST) & (graph.start == 20_000) & helper)[0])


def test_a_helper_thread_is_woken_and_joined(tmp_path: Path) -> None:
    """The backward burst waits for the main thread to reach 20 µs; the main thread waits for its end. A
    backward twice as fast (20 µs) ends at 40, and the main thread's remaining 40 µs end the step at 80."""
    graph = build_graph(handoff_trace(tmp_path))
    assert (graph.edge_kind == EdgeKind.THREAD).sum() >= 2
    assert (graph.kind == NodeKind.IDLE).sum() == 1 and (graph.kind == NodeKind.JOIN).sum() >= 1
    assert step_times(graph, replay(graph)).duration_ns.tolist() == [100_000]
    backward = _backward_node(graph)
    dur = graph.dur.copy()
    dur[backward] = 20_000
    assert step_times(graph, replay(graph, dur=dur)).duration_ns.tolist() == [80_000]
    dur = graph.dur.copy()
    dur[np.isin(graph.kind, [NodeKind.HOST, NodeKind.UNTRACED])] //= 2  # all twice as fast: the step halves
    assert step_times(graph, replay(graph, dur=dur)).duration_ns.tolist() == [50_000]


def test_a_busy_main_thread_does_not_wait_for_the_helper(tmp_path: Path) -> None:
    graph = build_graph(handoff_trace(tmp_path, main_busy=True))
    assert (graph.kind == NodeKind.JOIN).sum() == 0
    backward = _backward_node(graph)
    dur = graph.dur.copy()
    dur[backward] = 20_000
    assert step_times(graph, replay(graph, dur=dur)).duration_ns.tolist() == [100_000]
