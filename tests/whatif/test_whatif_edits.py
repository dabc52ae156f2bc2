"""Every edit on a tiny hand-built trace whose answer is worked out by hand in each test's docstring."""

from __future__ import annotations

from pathlib import Path

import aiprof
from aiprof.analysis.whatif.edits import (
    CudaGraphs, Edit, Fuse, KernelsToRoof, OverlapComm, RemoveDataLoading, RemoveSyncs,
    ScaleHost, ScaleKernels, host_overhead, kernels_matching, predict, scalar_reads, script_syncs, touched,
    allocator_calls, FUSED_CHAINS, HOST_GAP_SPANS, FusedChain, fused_chains, host_gap_spans,
)
from aiprof.analysis.whatif.graph import Graph, NodeKind, build_graph
from aiprof.trace.model import Kind, Trace
from kineto_builder import TraceBuilder
from test_whatif_graph import sync_trace


def _load(b: TraceBuilder, tmp_path: Path) -> Trace:
    loaded = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(loaded, Trace)
    return loaded


def loader_trace(tmp_path: Path) -> Trace:
    return _load(loader_builder(), tmp_path)


def loader_builder() -> TraceBuilder:
    """Step 0-100 µs: a DataLoader wait 0-40; aten::mm 45-65 launches (46-48) a kernel at 55-85 (launch
    latency 9 µs on an idle stream); aten::add 70-95."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.dataloader(ts=0, dur=40)
    op = b.cpu_op("aten::mm", ts=45, dur=20)
    b.launch(op, kernel="k", kernel_ts=55, kernel_dur=30, ts=46, dur=2)
    b.cpu_op("aten::add", ts=70, dur=25)
    return b


def chain_trace(tmp_path: Path, kernel_dur: float = 10) -> Trace:
    """Step 0-20 µs; aten::add 0-10 launches (at 1, 3, 5; 2 µs each) three kernels on stream 7 at 20, 32,
    44 (2 µs gaps; the first launch's latency is 19 µs, the others are queued behind it)."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=20)
    op = b.cpu_op("aten::add", ts=0, dur=10)
    for i in range(3):
        b.launch(op, kernel=f"elementwise_{i}", kernel_ts=20 + i * (kernel_dur + 2), kernel_dur=kernel_dur,
                 ts=1 + 2 * i, dur=2)
    return _load(b, tmp_path)


def comm_trace(tmp_path: Path) -> Trace:
    """Step 0-5 µs; launches at 1, 2, 3 (1 µs) of compute 10-20, an all-reduce 20-50, compute 50-60."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=5)
    op = b.cpu_op("aten::mm", ts=0, dur=5)
    b.launch(op, kernel="sgemm_a", kernel_ts=10, kernel_dur=10, ts=1, dur=1)
    b.launch(op, kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL", kernel_ts=20, kernel_dur=30, ts=2, dur=1)
    b.launch(op, kernel="sgemm_b", kernel_ts=50, kernel_dur=10, ts=3, dur=1)
    return _load(b, tmp_path)


def _step_us(graph: Graph, edits: list[Edit]) -> float:
    prediction = predict(graph, edits)
    assert prediction.baseline_ns.tolist() == [w.duration_ns for w in graph.windows]
    return prediction.predicted_median_ns / 1000


def test_remove_data_loading(tmp_path: Path) -> None:
    """The host runs 40 µs earlier: its span ends at 60; the kernel, launched at 6, starts 9 µs later and
    ends at 45, inside the host span: 60 µs."""
    graph = build_graph(loader_trace(tmp_path))
    assert _step_us(graph, []) == 100
    assert _step_us(graph, [RemoveDataLoading()]) == 60


def test_scale_host_leaves_data_loading(tmp_path: Path) -> None:
    """The 60 µs of host work after the loader halve to 30 (span ends at 70); the launch moves from 46 to
    43, so the kernel runs 52-82: the step ends with it at 82 µs."""
    graph = build_graph(loader_trace(tmp_path))
    assert _step_us(graph, [ScaleHost(0.5)]) == 82
    assert _step_us(graph, [ScaleHost(0.5), RemoveDataLoading()]) == 42  # 0-30 host, kernel 12-42


def test_cuda_graphs_remove_host_overhead_inside_steps(tmp_path: Path) -> None:
    """Only the loader's 40 µs remain on the host; the kernel is launched at 40 and runs 49-79."""
    graph = build_graph(loader_trace(tmp_path))
    assert _step_us(graph, [CudaGraphs()]) == 79


def test_remove_host_overhead_with_a_device(tmp_path: Path) -> None:
    """The host time while the kernel (55-85) was not running goes: 40-46 and 48-55 of aten::mm, 85-95 of
    aten::add, the untraced 95-100; the launch call (2 µs) and the 30 µs the kernel hid stay. The launch runs
    at 40-42, the kernel 49-79 (9 µs launch latency), the host ends at 72: 79 µs. Without the loader too:
    the launch at 0-2, the kernel 9-39."""
    trace = loader_trace(tmp_path)
    graph = build_graph(trace)
    edit = host_overhead(graph, trace)
    assert _step_us(graph, [edit]) == 79
    assert _step_us(graph, [edit, RemoveDataLoading()]) == 39
    assert not (graph.kind[list(edit.nodes)] == NodeKind.LAUNCH).any()
    assert sum(graph.dur[list(edit.nodes)]) - sum(edit.dur_ns) == 28_000  # 5 + 1 + 7 + 10 + 5 µs


def cpu_overhead_trace(tmp_path: Path) -> Trace:
    """CPU only. Step 0-100 µs: ten 2 µs aten::add at 0, 3, ..., 27 (1 µs untraced gaps, then 29-30), one
    60 µs aten::mm at 30-90 (with a 5 µs aten::t inside it), 10 µs untraced to the step's end."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    for i in range(10):
        b.cpu_op("aten::add", ts=3 * i, dur=2)
    b.cpu_op("aten::mm", ts=30, dur=60)
    b.cpu_op("aten::t", ts=40, dur=5)  # nested by time
    return _load(b, tmp_path)


def test_remove_host_overhead_on_cpu(tmp_path: Path) -> None:
    """The tiny top-level ops (20 µs) and every short untraced gap (10 x 1 µs, then 10 µs) go; the 60 µs
    aten::mm does the work and stays, short child segments included: 60 µs. With a tiny-op threshold above
    60 µs the mm is overhead too: 0."""
    trace = cpu_overhead_trace(tmp_path)
    graph = build_graph(trace)
    assert _step_us(graph, []) == 100
    assert _step_us(graph, [host_overhead(graph, trace)]) == 60
    assert _step_us(graph, [host_overhead(graph, trace, tiny_op_ns=70_000)]) == 0
    assert _step_us(graph, [host_overhead(graph, trace, long_gap_ns=5_000)]) == 70


def test_remove_syncs(tmp_path: Path) -> None:
    """The 13 µs cudaDeviceSynchronize (32-45) goes: the host span ends at 87; k2, now launched at 37,
    starts 10 µs later (its observed launch latency) at 47, after k1 (ends 40), and ends at 57: 87 µs."""
    graph = build_graph(sync_trace(tmp_path))
    assert _step_us(graph, [RemoveSyncs()]) == 87
    wait_row = int(graph.row[graph.nodes_of(NodeKind.WAIT)[0]])
    assert _step_us(graph, [RemoveSyncs(rows=(wait_row,))]) == 87
    assert _step_us(graph, [RemoveSyncs(rows=(wait_row + 1_000,))]) == 100  # another call: nothing moves


def test_allocator_calls_are_not_the_scripts_syncs(tmp_path: Path) -> None:
    """The same trace with a blocking cudaFree: it is the allocator's (allocator_calls removes it: 87 µs, as
    above), not one of the script's syncs (script_syncs: none); the cudaDeviceSynchronize is the script's."""
    trace = sync_trace(tmp_path, "cudaFree")
    graph = build_graph(trace)
    assert script_syncs(graph, trace) == ()
    assert _step_us(graph, allocator_calls(graph, trace)) == 87
    plain = sync_trace(tmp_path)
    plain_graph = build_graph(plain)
    assert allocator_calls(plain_graph, plain) == [] and len(script_syncs(plain_graph, plain)) == 1


def test_fuse_a_chain(tmp_path: Path) -> None:
    """Three 10 µs kernels at 20, 32, 44 (ends 54) fused: one 30 µs kernel at 20, ends 50; with 1.5 MB at
    100 B/ns it lasts 15 µs and ends at 35."""
    trace = chain_trace(tmp_path)
    graph = build_graph(trace)
    chain = kernels_matching(graph, trace, "^elementwise_")
    assert len(chain) == 3 and _step_us(graph, []) == 54
    assert _step_us(graph, [Fuse(chain)]) == 50
    assert _step_us(graph, [Fuse(chain, nbytes=1_500_000, bandwidth_bytes_per_ns=100.0)]) == 35


def _op_rows(trace: Trace, names: tuple[str, ...]) -> tuple[int, ...]:
    rows = [int(r) for r in trace.rows_of(Kind.CPU_OP).tolist() if trace.name_of(int(r)) in names]
    return tuple(sorted(rows, key=lambda r: int(trace.columns.ts[r])))


def fusion_trace(tmp_path: Path, kernels: bool = True) -> Trace:
    """Step 0-25 µs: aten::mul 0-4, aten::add 4-8, aten::relu 8-12, each launching (at 1, 5, 9; 1 µs) one
    10 µs elementwise kernel, at 20, 32, 44 (ends 54). Without ``kernels`` (a CPU run): the ops 0-10, 10-20,
    20-30 in a 30 µs step."""
    b = TraceBuilder()
    names = ("aten::mul", "aten::add", "aten::relu")
    if kernels:
        b.step(0, ts=0, dur=25)
        for i, name in enumerate(names):
            op = b.cpu_op(name, ts=4 * i, dur=4)
            b.launch(op, kernel=f"elementwise_{i}", kernel_ts=20 + 12 * i, kernel_dur=10, ts=4 * i + 1, dur=1)
    else:
        b.step(0, ts=0, dur=30)
        for i, name in enumerate(names):
            b.cpu_op(name, ts=10 * i, dur=10)
    return _load(b, tmp_path)


def test_fusion_opportunitys_chains_are_fused(tmp_path: Path) -> None:
    """The rule's chain (mul → add → relu) moves 6,000 bytes op by op, 2,000 fused. Its kernels took 30 µs:
    0.2 B/ns achieved; the fused kernel moves 2,000 B at that bandwidth, 10 µs, from 20: the step ends at
    30 µs (54 before). On a CPU the ops' 30 µs of host time x 2,000 / 6,000: 3 x 3,333 ns, the step 9,999 ns."""
    names = ("aten::mul", "aten::add", "aten::relu")
    trace = fusion_trace(tmp_path)
    graph = build_graph(trace)
    assert fused_chains(graph, trace) == []  # no chain from the rule: nothing to fuse
    trace.cache[FUSED_CHAINS] = (FusedChain(_op_rows(trace, names), 2_000, 6_000),)
    (edit,) = fused_chains(graph, trace)
    assert isinstance(edit, Fuse) and len(edit.nodes) == 3
    assert _step_us(graph, []) == 54
    assert _step_us(graph, [edit]) == 30
    cpu = fusion_trace(tmp_path / "cpu", kernels=False)
    cpu.cache[FUSED_CHAINS] = (FusedChain(_op_rows(cpu, names), 2_000, 6_000),)
    cpu_graph = build_graph(cpu)
    assert predict(cpu_graph, fused_chains(cpu_graph, cpu)).predicted_median_ns == 9_999


def test_host_gaps_fix_removes_the_gaps_the_rule_counted(tmp_path: Path) -> None:
    """Step 0-10 ms on a CPU: aten::mm 0-2, a traced Python frame 2-7 (logging), aten::add 7-10. The rule's gap
    (2-7 ms: Python outside any op) goes: the step is 5 ms. Without the rule's gaps (``aiprof whatif``) only
    untraced gaps of 1 ms or more go, and this trace has none: 10 ms."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=10_000)
    b.cpu_op("aten::mm", ts=0, dur=2_000)
    b.python("train.py(57): log_stats", ts=2_000, dur=5_000)
    b.cpu_op("aten::add", ts=7_000, dur=3_000)
    trace = _load(b, tmp_path)
    graph = build_graph(trace)
    assert predict(graph, host_gap_spans(graph, trace)).predicted_median_ns == 10_000_000
    trace.cache[HOST_GAP_SPANS] = ((2_000_000, 7_000_000),)
    assert predict(graph, host_gap_spans(graph, trace)).predicted_median_ns == 5_000_000


def test_scale_kernels_and_to_roof(tmp_path: Path) -> None:
    """5 µs kernels at 20, 27, 34 (ends 39). Halved: 20-22.5, then each 2 µs behind the previous
    (the second kernel's launch at 3 + 19 µs latency = 22 binds no earlier): ends 31.5. At 50 % of a 2 µs
    roof: 4 µs each, ends 36."""
    trace = chain_trace(tmp_path, kernel_dur=5)
    graph = build_graph(trace)
    assert _step_us(graph, []) == 39
    assert _step_us(graph, [ScaleKernels(0.5)]) == 31.5
    roof = tuple(2_000 if k == NodeKind.KERNEL else 0 for k in graph.kind.tolist())
    assert _step_us(graph, [KernelsToRoof(roof, fraction=0.5)]) == 36
    one = kernels_matching(graph, trace, "elementwise_2")
    assert _step_us(graph, [ScaleKernels(0.0, one)]) == 34  # only the last kernel: it vanishes


def test_overlap_comm(tmp_path: Path) -> None:
    """The second compute kernel no longer queues behind the all-reduce: it runs 20-30 beside it, and the
    step ends with the all-reduce at 50 µs (56 with 20 % interference on it)."""
    graph = build_graph(comm_trace(tmp_path))
    assert (graph.kind == NodeKind.COMM).sum() == 1
    assert _step_us(graph, []) == 60
    assert _step_us(graph, [OverlapComm()]) == 50
    assert _step_us(graph, [OverlapComm(interference=1.2)]) == 56


def item_trace(tmp_path: Path) -> Trace:
    """Step 0-100 µs: aten::mm 0-10 launches (1-3) a kernel at 10-50; aten::item 20-55 launches (21-23) a
    1 µs device-to-host copy, queued behind the kernel (50-51), and blocks in cudaStreamSynchronize 24-52
    until it is done; aten::add 60-70; untraced Python to the step's end."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    mm = b.cpu_op("aten::mm", ts=0, dur=10)
    b.launch(mm, kernel="k", kernel_ts=10, kernel_dur=40, ts=1, dur=2)
    item = b.cpu_op("aten::item", ts=20, dur=35)
    b.launch(item, kernel="Memcpy DtoH (Device -> Pageable)", kernel_ts=50, kernel_dur=1, kind="memcpy", ts=21, dur=2)
    b.runtime("cudaStreamSynchronize", 24, 28)
    b.cpu_op("aten::add", ts=60, dur=10)
    return _load(b, tmp_path)


def test_scalar_reads_go_with_their_syncs(tmp_path: Path) -> None:
    """RemoveSyncs: the 28 µs call costs nothing and waits for nothing: the host runs 28 µs earlier, 72 µs.
    scalar_reads too: aten::item's own 7 µs (20-24, 52-55: its host time and its copy's launch) and the copy
    go, 65 µs; the kernel (10-50) ends before. Without a blocking call inside, an .item() stays (no node)."""
    trace = item_trace(tmp_path)
    graph = build_graph(trace)
    reads = scalar_reads(graph, trace)
    assert _step_us(graph, [RemoveSyncs()]) == 72
    assert _step_us(graph, [RemoveSyncs(), reads]) == 65
    assert NodeKind.MEMCPY in graph.kind[list(reads.nodes)] and NodeKind.SYNC_CALL in graph.kind[list(reads.nodes)]
    assert NodeKind.KERNEL not in graph.kind[list(reads.nodes)]
    plain = loader_trace(tmp_path)
    assert scalar_reads(build_graph(plain), plain).nodes == ()


def test_touched_nodes_show_shared_time(tmp_path: Path) -> None:
    """CUDA graphs and the host overhead edit change aten::mm's host segments (the same time); the loader
    edit changes only the DataLoader node."""
    trace = loader_trace(tmp_path)
    graph = build_graph(trace)
    loader, overhead, graphs = (touched(graph, [e]) for e in (RemoveDataLoading(), host_overhead(graph, trace),
                                                              CudaGraphs()))
    assert graph.kind[loader].tolist() == [NodeKind.DATA_LOADING]
    assert (overhead & graphs).any() and not (loader & (overhead | graphs)).any()
