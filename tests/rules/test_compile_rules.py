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
