"""Trace health on shared real traces: which items each shows (and, where it changes findings, which), measured
from the trace. A change here is a change in what a report says it cannot show: check it against the trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiprof.analysis.health import Health
from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.document import build_document

# trace -> (items that are not ok, with their status; changes as (id, action, item) that must be present)
EXPECTED: dict[str, tuple[dict[str, str], set[tuple[str, str, str]]]] = {
    # AlexNet on a GPU without record_shapes: no roofline verdict, so precision is "not judged", not "healthy".
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": (
        {"shapes": "missing", "stacks": "missing"}, {("precision", "not_run", "shapes")}),
    # The TensorBoard plugin's ResNet-50 (2021): shapes and stacks recorded, no cuda_sync events yet.
    "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz": (
        {"sync_events": "limited"}, set()),
    # A CPU-only trace: nothing device-side to miss.
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": ({"stacks": "missing"}, set()),
    # vLLM full-graph decode: kernels replayed from graphs have no op; the profiler's Python is a large share.
    "tracelens/inference/vllm_decode_full/graph_execution.json.gz": (
        {"graph_replays": "limited", "sync_events": "limited", "profiler_overhead": "limited"}, set()),
    # BERT-small on an H100 with stacks: ~27 % of the host time is the profiler's own: host overhead downgraded.
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz": (
        # Its stacks cost ~5.9 % of the step (Python calls x 203 ns): stated (limited), not enough to downgrade.
        {"sync_events": "limited", "profiler_overhead": "limited", "stacks": "limited"},
        {("host_bound", "downgraded", "profiler_overhead")}),
}


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_health_items_of_a_shared_trace(traces_dir: Path, rel: str) -> None:
    limits, changes = EXPECTED[rel]
    run, findings = analyze_and_diagnose([traces_dir / rel], workers=1)
    health = build_document(run, findings).health
    assert isinstance(health, Health)
    assert {i.id: i.status for i in health.limits} == limits
    assert changes <= {(c.id, c.action, c.item) for c in health.findings}
    changed = {c.id for c in health.findings if c.action == "downgraded"}
    for f in findings:  # a downgraded finding says why
        if f.id in changed:
            assert any("confidence" in n for n in f.notes), f
