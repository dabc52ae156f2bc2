"""A CUDA/HIP graph capture trace is a kind of trace (issue #22 class 5, issue #24): every format describes it
with a capture note, it is never partial, never cut, and no finding with a saving is given; a capture inside a
steady run leaves none of its steps incomplete. On the shared vLLM capture trace too."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from corpus.cases_comm import H100, hip_capture_trace
from kineto_builder import TraceBuilder
from report_docs import SHARED, document_for_paths
from test_renderers import schema

import aiprof
from aiprof.analysis.graphs import capture_ranges, captured_mask, graph_capture_info, launch_rows
from aiprof.analysis.run import analyze_trace
from aiprof.report.render import render

VLLM_CAPTURE = SHARED / "tracelens/inference/vllm_prefilldecode_piecewise/capture_traces"


@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_every_format_describes_a_capture_trace(tmp_path: Path, fmt: str) -> None:
    doc = document_for_paths((str(hip_capture_trace(tmp_path)),))
    assert doc.summary.trace_kind == "graph_capture" and not doc.summary.partial
    assert not [f for f in doc.findings if f.severity != "info" or f.est_saving_ns_per_step > 0]
    text = render(doc, fmt)
    if fmt == "json":
        data = json.loads(text)
        jsonschema.validate(data, schema())
        assert data["summary"]["capture_note"].startswith("Graph capture trace: 6 CUDA/HIP graph captures")
        assert data["ranks"][0]["graph_capture"]["captured_launches"] == 360
        return
    flat = " ".join(text.split())
    assert "Graph capture trace: 6 CUDA/HIP graph captures" in flat and "not a truncated one" in flat
    assert "Partial run" not in text and "partial trace" not in text
    if fmt == "terminal":
        assert any("Graph capture trace" in line for line in text.splitlines()[:4])  # said first


def test_a_steady_trace_has_no_capture_note(tmp_path: Path) -> None:
    b = TraceBuilder(device_name=H100)
    for i in range(4):
        b.step(i, ts=i * 100, dur=100)
        op = b.cpu_op("aten::mm", ts=i * 100 + 5, dur=10)
        b.launch(op, kernel_ts=i * 100 + 20, kernel_dur=60)
    doc = document_for_paths((str(b.write(tmp_path / "t.json")),))
    assert "trace_kind" not in json.loads(render(doc, "json"))["summary"]  # absent for any other trace
    assert "Graph capture trace" not in render(doc, "terminal")
    assert doc.ranks[0].graph_capture == {**doc.ranks[0].graph_capture, "captures": 0, "capture_trace": False}


def _steady_with_a_capturing_step(tmp_path: Path) -> Path:
    """Six busy steps; step 3 (torch.cuda.graph / a cudagraph tree recording a new shape) captures its
    launches instead of running them: no kernel of that step is in the trace, and none should be."""
    b = TraceBuilder(device_name=H100)
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        if i == 3:
            b.runtime("cudaStreamBeginCapture", ts=t0 + 5, dur=5)
            for j in range(10):
                b.cpu_op("aten::mm", ts=t0 + 20 + 60 * j, dur=50)
                b.runtime("cudaLaunchKernel", ts=t0 + 30 + 60 * j, dur=20)
            b.runtime("cudaStreamEndCapture", ts=t0 + 700, dur=10)
            b.runtime("cudaGraphInstantiateWithFlags", ts=t0 + 720, dur=200)
            continue
        for j in range(10):
            op = b.cpu_op("aten::mm", ts=t0 + 5 + 20 * j, dur=15)
            b.launch(op, kernel_ts=t0 + 10 + 90 * j, kernel_dur=85)
    return b.write(tmp_path / "steady.json")


def test_a_capturing_step_is_not_incomplete(tmp_path: Path) -> None:
    trace = aiprof.load(_steady_with_a_capturing_step(tmp_path))
    analysis = analyze_trace(trace)
    assert not analysis.partial and len(analysis.windows) == 6  # its launches were captured, not lost
    info = graph_capture_info(trace)
    assert (info.captures, info.instantiations, info.captured_launches, info.executed_launches) == (1, 1, 10, 50)
    assert not info.is_capture_trace  # a steady run that captured once
    assert analysis.sections["graph_capture"]["note"] is None


def test_launches_on_another_thread_are_not_captured(tmp_path: Path) -> None:
    b = TraceBuilder(device_name=H100)
    b.runtime("cudaStreamBeginCapture", ts=0, dur=5)
    b.runtime("cudaLaunchKernel", ts=10, dur=5)  # captured
    b.runtime("cudaLaunchKernel", ts=12, dur=5, tid=99)  # another thread, same time: executed
    b.runtime("cudaStreamEndCapture", ts=20, dur=5)
    b.runtime("cudaLaunchKernel", ts=30, dur=5)  # after the capture
    b.runtime("cudaStreamBeginCapture", ts=40, dur=5)  # never ended: the trace cut the capture
    b.runtime("cudaLaunchKernel", ts=50, dur=5)
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    rows = launch_rows(trace)
    c = trace.columns
    captured = {(int(c.ts[r]) // 1000, int(c.tid[r])) for r in rows[captured_mask(trace, rows)]}
    assert {ts for ts, _ in captured} == {10, 50}
    ranges = capture_ranges(trace)
    assert ranges.captures == 2 and ranges.instantiations == 0
    assert np.array_equal(ranges.merged[0] // 1000, [0, 40]) and int(ranges.merged[1][-1]) == 55_000


def test_the_shared_vllm_capture_trace() -> None:
    files = sorted(VLLM_CAPTURE.glob("*.json.gz")) if VLLM_CAPTURE.exists() else []
    if not files:
        pytest.skip(f"{VLLM_CAPTURE} not present (../shared/traces)")
    doc = document_for_paths((str(files[0]),))
    assert doc.summary.trace_kind == "graph_capture" and not doc.summary.partial
    section = doc.ranks[0].graph_capture
    assert isinstance(section, dict)
    assert (section["captures"], section["instantiations"]) == (25, 25)
    assert section["captured_launches"] > 3 * section["executed_launches"]  # 361 vs 100
    actionable = [f.id for f in doc.findings if f.severity != "info" or f.est_saving_ns_per_step > 0]
    assert actionable == []  # was: HIGH sync on hipDeviceSynchronize, HIGH host stall in moe_forward
    assert [f.id for f in doc.findings] == ["graph_capture"]
