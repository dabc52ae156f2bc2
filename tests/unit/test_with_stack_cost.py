"""What recording Python stacks (with_stack) costs the steps: python_function events inside the steps x the
tracer's CPU per call measured by bench/with_stack_overhead.py, stated by the health item ``stacks`` and beside
the host times by source line; at a quarter of the step the host-overhead findings are downgraded."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from kineto_builder import TraceBuilder

from aiprof.analysis.health import Health, run_health
from aiprof.analysis.run import analyze_trace
from aiprof.analysis.stacks import WITH_STACK_NS_PER_CALL
from aiprof.errors import AiprofWarning
from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.document import build_document
from aiprof.report.render import render
from aiprof.rules.finding import Finding
from aiprof.rules.health import apply_health
from aiprof.rules.registry import RULE_SPECS
from aiprof.trace.kineto.loader import load_file

H200 = Path(__file__).resolve().parents[1] / "gpu" / "fixtures" / "h200"


def _rank(path: Path):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AiprofWarning)
        rank = analyze_trace(load_file(path))
    assert rank.health is not None
    return rank


def test_a_real_trace_with_stacks_states_their_cost() -> None:
    """compile_graph_break (H200, the steady steps' stacks): 2,540 Python calls in 2 steps of 7.4 ms."""
    rank = _rank(H200 / "compile_graph_break.pt.trace.json.gz")
    h = rank.health
    assert h.python_events_in_steps == 2540 and h.python_events == 2560  # 20 outside the steps
    assert h.steps_ns == sum(w.duration_ns for w in rank.windows)
    item = next(i for i in run_health([h]).items if i.id == "stacks")
    expected = 2540 * WITH_STACK_NS_PER_CALL / h.steps_ns
    assert item.status == "ok" and item.value == pytest.approx(expected, abs=1e-4) and 0.02 < item.value < 0.05
    assert "1,270 Python calls per step" in item.text and "~0.26 ms per step" in item.text


def test_a_trace_without_stacks_has_no_cost_and_says_they_are_missing() -> None:
    rank = _rank(H200 / "planted-attention.pt.trace.json.gz")
    assert rank.health.python_events_in_steps == 0
    item = next(i for i in run_health([rank.health]).items if i.id == "stacks")
    assert item.status == "missing" and "with_stack=False" in item.text


def _python_heavy(tmp_path: Path, calls: int) -> Path:
    """Steps of 100 µs with ``calls`` tiny Python calls each (200 ns apart)."""
    b = TraceBuilder()
    for s in range(3):
        t0 = s * 100
        b.step(s, ts=t0, dur=100)
        b.cpu_op("aten::add", ts=t0 + 1, dur=2)
        for k in range(calls):
            b.python("train.py(3): f", ts=t0 + 5 + 0.2 * k, dur=0.1)
    return b.write(tmp_path / f"py{calls}.json")


@pytest.mark.parametrize(("calls", "status"), [(10, "ok"), (40, "limited"), (200, "limited")])
def test_the_share_of_the_step_decides_the_status(tmp_path: Path, calls: int, status: str) -> None:
    rank = _rank(_python_heavy(tmp_path, calls))
    item = next(i for i in run_health([rank.health]).items if i.id == "stacks")
    share = min(calls * WITH_STACK_NS_PER_CALL / 100_000, 1.0)
    assert item.status == status and item.value == pytest.approx(share, abs=1e-4)
    assert (": host-side times" in item.text) == (status == "limited")


def test_a_quarter_of_the_step_downgrades_host_overhead_findings(tmp_path: Path) -> None:
    rank = _rank(_python_heavy(tmp_path, 200))  # 200 x 203 ns of a 100 µs step: 41 %
    item = next(i for i in run_health([rank.health]).items if i.id == "stacks")
    host = Finding("host_bound", "t", "high", 1_000_000, 0.2, "estimate", "f", "high", {}, "fix")
    gemm = Finding("precision", "t", "high", 1_000_000, 0.2, "estimate", "f", "high", {}, "fix")
    out, changes = apply_health([host, gemm], Health(items=[item]), RULE_SPECS)
    assert [(c.id, c.action, c.item) for c in changes] == [("host_bound", "downgraded", "stacks")]
    assert out[0].confidence == "medium" and "Python stacks costs ~41 %" in out[0].notes[-1]
    assert out[1].confidence == "high"
    mild = next(i for i in run_health([_rank(_python_heavy(tmp_path, 40)).health]).items if i.id == "stacks")
    assert apply_health([host], Health(items=[mild]), RULE_SPECS)[1] == []  # 8 %: stated, not downgraded


@pytest.mark.parametrize("fmt", ["terminal", "md", "html"])
def test_the_source_lines_say_what_the_stacks_cost(fmt: str) -> None:
    doc = build_document(*analyze_and_diagnose([str(H200 / "compile_graph_break.pt.trace.json.gz")]))
    out = " ".join(render(doc, fmt, width=400).split())
    assert "ecording these stacks cost ~" in out and "Python calls x ~203 ns" in out
