"""``recompilation``, ``graph_break`` and the first compile as a ``cold_start`` cost, on hand-built traces
shaped like what torch 2.13 records (tests/integration/test_compile_runs.py checks the same on real runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiprof import app
from kineto_builder import TraceBuilder

US = 1000


def _compile(b: TraceBuilder, ts: float, dur: float, ident: str) -> None:
    b.cpu_op("dynamo", ts=ts, dur=dur)
    b.annotation(f"dynamo_data: compile_id={ident}", ts=ts + 0.5, dur=0.2)
    b.cpu_op("async_compile.wait", ts=ts + 4, dur=dur - 6)
    for k in range(4):  # the compiler's own elementwise ops on fake tensors: no fusion finding about them
        b.cpu_op("aten::mul", ts=ts + 10 + 5 * k, dur=4, shapes=[[1024, 1024], [1024, 1024]])


def _graph(b: TraceBuilder, ts: float, shape: list[int]) -> None:
    b.cpu_op("CompiledFunction", ts=ts, dur=8, shapes=[[16, 16], [16], shape], dtypes=["float", "float", "float"])
    b.cpu_op("aten::addmm", ts=ts + 1, dur=5)


def _findings(b: TraceBuilder, tmp_path: Path) -> dict[str, dict[str, Any]]:
    doc = app.analyze([b.write(tmp_path / "t.json")])
    return {f.id: {"evidence": f.evidence, "saving": f.est_saving_ns_per_step, "title": f.title} for f in doc.findings}


def test_compiling_again_every_step_is_recompilation_and_the_first_compile_is_cold_start(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(5):
        base = i * 1000
        b.step(i, ts=base, dur=1000)
        _compile(b, base + 20, 900, f"0/{i}")
        b.cpu_op(f"Torch-Compiled Region: 0/{i}", ts=base + 930, dur=10)
        _graph(b, base + 931, [4 + i, 16])
    found = _findings(b, tmp_path)
    rec = found["recompilation"]
    assert rec["evidence"]["recompiles"] == 4 and rec["evidence"]["causes"] == {"shape": 4}
    assert rec["saving"] == 900 * US  # steps 1-4 each compile 900 µs; step 0 (the first compile) is warm-up
    assert "compilation" in found["cold_start"]["evidence"]["kinds"]
    assert "fusion_opportunity" not in found
    assert list(found)[0] == "recompilation"


def test_a_model_compiled_once_has_no_compile_finding(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(5):
        base = i * 1000
        b.step(i, ts=base, dur=1000 if i == 0 else 100)
        if i == 0:
            _compile(b, base + 20, 900, "0/0")
        at = base + (930 if i == 0 else 10)
        b.cpu_op("TorchDynamo Cache Lookup", ts=at - 2, dur=1)
        b.cpu_op("Torch-Compiled Region: 0/0", ts=at, dur=10)
        _graph(b, at + 1, [4, 16])
    found = _findings(b, tmp_path)
    assert "recompilation" not in found and "graph_break" not in found
    assert found["cold_start"]["saving"] == 0


def test_eager_ops_between_two_graphs_are_a_graph_break_at_the_resume_line(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        base = i * 1000
        b.step(i, ts=base, dur=1000)
        b.cpu_op("Torch-Compiled Region: 0/0", ts=base + 10, dur=900)
        _graph(b, base + 11, [4, 16])
        b.cpu_op("aten::item", ts=base + 30, dur=300)  # the value a Python branch needs: eager
        b.cpu_op("TorchDynamo Cache Lookup", ts=base + 400, dur=1)
        b.cpu_op("Torch-Compiled Region: 1/0", ts=base + 410, dur=400)
        b.python("model.py(42): torch_dynamo_resume_in_forward_at_42", ts=base + 411, dur=398)
        _graph(b, base + 420, [4, 16])
    found = _findings(b, tmp_path)
    brk = found["graph_break"]
    (boundary,) = brk["evidence"]["boundaries"]
    assert boundary["break_at"] == "model.py:42 (forward)"
    assert boundary["ops"][0] == "aten::item" and boundary["calls"] == 4
    assert brk["saving"] == (420 - 19) * US  # from the first graph's end (19) to the second's start (420)
    assert "model.py:42" in brk["title"]


def _reduce_overhead_steps(b: TraceBuilder, *, new_shape_every_step: bool) -> None:
    """mode="reduce-overhead" on a GPU as CUDA graph trees record it: each compiled-graph call sets up its
    graph's container on the first call, records it on the second and replays it from the third. With a new
    shape every step each step compiles (and sets up) a new graph that runs eagerly and never replays."""
    for i in range(6):
        base = i * 2000
        b.step(i, ts=base, dur=2000)
        graph = i if new_shape_every_step else 0
        if new_shape_every_step or i == 0:
            _compile(b, base + 20, 900, f"0/{graph}")
        calls = i + 1 if not new_shape_every_step else 1  # the call of graph 0/0 in this step
        region = b.cpu_op(f"Torch-Compiled Region: 0/{graph}", ts=base + 1000, dur=600)
        if new_shape_every_step or i == 0:
            b.cpu_op("cudagraphify.get_container", ts=base + 1010, dur=20)
        if not new_shape_every_step and i == 1:
            b.cpu_op("CUDAGraphNode.record", ts=base + 1040, dur=100)
            b.runtime("cudaStreamBeginCapture", ts=base + 1041, dur=1)
            b.runtime("cudaStreamEndCapture", ts=base + 1130, dur=1)
        if new_shape_every_step or calls < 2:  # warm-up: the graph's kernels launched one by one
            for k in range(20):
                b.launch(region, kernel=f"triton_poi_fused_add_{k}", ts=base + 1200 + 10 * k, dur=5,
                         kernel_ts=base + 1205 + 10 * k, kernel_dur=4)
        else:
            b.launch(region, kernel="triton_poi_fused_add_0", api="cudaGraphLaunch", ts=base + 1200, dur=8,
                     kernel_ts=base + 1210, kernel_dur=80)
        b.launch(None, kernel="vectorized_elementwise_kernel", ts=base + 1700, dur=5, kernel_ts=base + 1710,
                 kernel_dur=5)  # the loss, eager, outside the compiled graph


def test_reduce_overhead_fed_a_new_shape_every_step_never_replays(tmp_path: Path) -> None:
    b = TraceBuilder()
    _reduce_overhead_steps(b, new_shape_every_step=True)
    found = _findings(b, tmp_path)
    graphs = found["cudagraphs_not_replayed"]
    ev = graphs["evidence"]
    assert ev["cause"] == "dynamic shapes" and ev["graph_replays_per_step"] == 0
    assert ev["steps_with_new_graph"] == ev["steps_used"] == 5  # steps 1-5: step 0 is the cold start
    assert ev["eager_launches_in_compiled_graphs_per_step"] == 20
    assert "never replayed" in graphs["title"] and "reduce-overhead did not take" in graphs["title"]
    # the 600 µs graph call less its 20 kernels of 4 µs (device busy), less one replay costing a launch call
    # (5 µs: the trace holds no cudaGraphLaunch)
    assert graphs["saving"] == (600 - 20 * 4 - 5) * US
    assert ev["launch_host_ns_per_step"] == 20 * 5 * US
    assert found["recompilation"]["evidence"]["recompiles"] == 5


def test_working_reduce_overhead_has_no_cuda_graph_finding(tmp_path: Path) -> None:
    b = TraceBuilder()
    _reduce_overhead_steps(b, new_shape_every_step=False)
    doc = app.analyze([b.write(tmp_path / "t.json")])
    assert "cudagraphs_not_replayed" not in {f.id for f in doc.findings}
    steps = doc.ranks[0].compile.cuda_graphs.steps
    # warm-up (eager), then recorded and replayed at once in step 1 (as the H200 trace shows), then replayed
    assert [s.graph_replays for s in steps] == [0, 1, 1, 1, 1, 1]
