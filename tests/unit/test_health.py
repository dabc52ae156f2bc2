"""Trace health (analysis.health, rules.health, report.health_section): each item measured on a synthetic trace
that lacks (or has) what it checks, the findings it changes, and every renderer showing it first, escaped."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import msgspec
import pytest
from corpus.cases_numbers import busy_steps, drop_device_side
from kineto_builder import TraceBuilder

from aiprof.analysis.health import Health, HealthItem, RankHealth, run_health, shared_item, with_item
from aiprof.analysis.run import analyze_trace
from aiprof.errors import AiprofWarning
from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.document import build_document
from aiprof.report.render import render
from aiprof.rules.finding import Finding
from aiprof.rules.health import apply_health
from aiprof.rules.registry import RULE_SPECS
from aiprof.trace.kineto.loader import load_file
from aiprof.trace.model import Trace


def _load(path: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AiprofWarning)
        return load_file(path)


def _items(path: Path) -> dict[str, HealthItem]:
    rank = analyze_trace(_load(path))
    assert rank.health is not None
    return {i.id: i for i in run_health([rank.health]).items}


def _gpu_steps(b: TraceBuilder, steps: int = 4, *, shapes: bool = True) -> None:
    """Steps of one op launching one kernel, 2 µs after its launch call."""
    for i in range(steps):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 10, dur=50, shapes=[[64, 64], [64, 64]] if shapes else None)
        b.launch(op, kernel_ts=t0 + 13, kernel_dur=500)


def test_a_healthy_gpu_trace_lacks_only_sync_events_and_stacks(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_steps(b)
    items = _items(b.write(tmp_path / "t.json"))
    assert {k for k, i in items.items() if i.status != "ok"} == {"sync_events", "stacks"}
    assert items["sync_events"].status == "limited" and "enable_cuda_sync_events" in items["sync_events"].text
    assert items["stacks"].status == "missing"


def test_sync_events_and_stacks_recorded_are_ok(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_steps(b)
    b.raw({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 100.0, "dur": 1.0,
           "args": {"device": 0, "stream": 7, "correlation": 999}})
    b.python("train.py(12): step", ts=5, dur=900)
    items = _items(b.write(tmp_path / "t.json"))
    assert items["sync_events"].status == "ok" and items["stacks"].status == "ok"


def test_ops_without_shapes_are_missing_shapes_and_shape_rules_are_not_judged(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_steps(b, shapes=False)
    items = _items(b.write(tmp_path / "t.json"))
    assert items["shapes"].status == "missing" and items["shapes"].value == 0.0
    health = Health(items=list(items.values()))
    _, changes = apply_health([], health, RULE_SPECS)
    not_run = {c.id for c in changes if c.action == "not_run" and c.item == "shapes"}
    assert "precision" in not_run and "host_bound" not in not_run


def test_graph_replays_without_their_kernels_are_missing(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_steps(b)
    for i in range(4):
        b.runtime("cudaGraphLaunch", ts=i * 1000 + 70, dur=5)  # no kernel correlated with it
    items = _items(b.write(tmp_path / "t.json"))
    assert items["graph_replays"].status == "missing" and items["graph_replays"].value == 4
    _, changes = apply_health([], Health(items=[items["graph_replays"]]), RULE_SPECS)
    assert {"host_bound", "launch_bound"} <= {c.id for c in changes if c.action == "not_run"}


def test_graph_replays_with_kernels_are_kernels_without_ops(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_steps(b)
    for i in range(4):
        b.launch(None, api="cudaGraphLaunch", ts=i * 1000 + 70, kernel_ts=i * 1000 + 600, kernel_dur=250)
    item = _items(b.write(tmp_path / "t.json"))["graph_replays"]
    assert item.status == "limited"
    assert item.value == pytest.approx(250 / 750, abs=1e-3)  # replayed kernel time over all device time
    assert "have no op" in item.text


def test_steps_cut_by_the_end_of_the_recording(tmp_path: Path) -> None:
    b = busy_steps()
    drop_device_side(b, from_step=4)
    item = _items(b.write(tmp_path / "t.json"))["cut_steps"]
    assert item.status == "missing" and item.value == 2
    assert "2 of 6 recorded steps" in item.text


def test_device_activity_before_its_launch_is_clock_skew(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 100, dur=50, shapes=[[64, 64], [64, 64]])
        b.launch(op, kernel_ts=t0 + 80, kernel_dur=500)  # 21 µs before its launch call at t0 + 101
    item = _items(b.write(tmp_path / "t.json"))["clock_skew"]
    assert item.status == "limited" and item.value == 21_000
    assert "4 of 4 device activities" in item.text
    finding = Finding("launch_bound", "t", "high", 1_000_000, 0.2, "estimate", "f", "high", {}, "fix")
    out, changes = apply_health([finding], Health(items=[item]), RULE_SPECS)
    assert out[0].confidence == "medium" and [c.action for c in changes] == ["downgraded"]


def test_rank_clock_offsets_are_stated() -> None:
    facts = [RankHealth(rank=0), RankHealth(rank=1)]
    item = next(i for i in run_health(facts, {1: 3_500_000}).items if i.id == "clock_skew")
    assert item.status == "limited" and item.ranks == [1] and "3.5 ms (rank 1" in item.text
    assert next(i for i in run_health(facts, {1: 200_000}).items if i.id == "clock_skew").status == "ok"


def test_the_profilers_own_frames_are_its_overhead(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_steps(b)
    b.python("torch/profiler/profiler.py(747): __exit__", ts=4000, dur=2000)
    b.raw({"ph": "X", "cat": "overhead", "name": "CUPTI Overhead", "pid": 0, "tid": 1, "ts": 3000.0, "dur": 500.0})
    rank = analyze_trace(_load(b.write(tmp_path / "t.json")))
    assert rank.health is not None
    assert rank.health.profiler_measured_ns == 2_500_000  # the frame and the overhead span, not the user's steps
    item = next(i for i in run_health([rank.health]).items if i.id == "profiler_overhead")
    assert item.status == "limited" and item.value > 0.3


def test_a_shared_machine_downgrades_host_side_findings_only() -> None:
    item = shared_item(1.5, "telemetry")
    host = Finding("host_bound", "t", "high", 1_000_000, 0.2, "estimate", "f", "medium", {}, "fix")
    gemm = Finding("precision", "t", "high", 1_000_000, 0.2, "estimate", "f", "high", {}, "fix")
    note = Finding("noisy_neighbour", "t", "info", 0, 0.0, "estimate", "f", "high", {}, "fix")
    out, changes = apply_health([host, gemm, note], Health(items=[item]), RULE_SPECS)
    assert [f.confidence for f in out] == ["low", "high", "high"]
    assert "shared machine" in out[0].notes[-1]
    assert [(c.id, c.action, c.item) for c in changes] == [("host_bound", "downgraded", "shared_machine")]


def test_the_report_carries_health_and_every_renderer_shows_it_first_escaped(tmp_path: Path) -> None:
    b = TraceBuilder()
    _gpu_steps(b, shapes=False)
    run, findings = analyze_and_diagnose([b.write(tmp_path / "t.json")], workers=1)
    doc = build_document(run, findings)
    assert isinstance(doc.health, Health)
    assert {c.id for c in doc.health.findings if c.action == "not_run"} >= {"precision"}
    data = json.loads(render(doc, "json"))
    assert [i["id"] for i in data["health"]["items"]][:2] == ["graph_replays", "sync_events"]
    hostile = HealthItem(id="stacks", status="missing", text="<script>x</script> *b* \x1b[31m")
    doc = msgspec.structs.replace(doc, health=with_item(doc.health, hostile))
    html = render(doc, "html")
    assert "<script>x</script>" not in html and "&lt;script&gt;" in html
    assert html.index('class="health"') < html.index("class=kpis")
    md = render(doc, "md")
    assert md.index("### Trace health") < md.index("| rank |") and "\\*b\\*" in md
    text = render(doc, "terminal")
    assert text.index("Trace health") < text.index("Step time") and "\x1b[31m" not in text
