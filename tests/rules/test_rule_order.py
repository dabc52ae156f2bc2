"""The rules do not depend on their order in the list: they share views (computed once, whichever rule asks
first), never each other's results. Every corpus case and a set of real traces are diagnosed with the rank
rules in their registered order, reversed, and shuffled; findings and notes must be identical."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.rules import DEFAULT_RANK_RULES, RankRule, diagnose_rank, rank_findings
from aiprof.rules.context import load_run_inputs
from aiprof.trace import Trace
from test_corpus import CASES

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
# Real traces that exercise the cross-rule paths: graph replays, attention scores other rules skip,
# FP32 matrix calls shared by two rules, communication, host splits on CPU and GPU, a cold start.
# Each with a finding that shows the path is taken (so the comparison compares something).
REAL = {
    "hta/negative_queue_length_values_check/rank0.json.gz": "graph_trace_incomplete",
    "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz": "tensor_core_alignment",
    "tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz": "unfused_attention",
    "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz": "unfused_attention",
    "kineto-tbplugin/samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz": "precision",
    "hta/nccl_parser_config/nccl_data.json.gz": "comm_bandwidth",
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz": "host_gaps",
    "param/linear_kineto.json.gz": "cold_start",
}


def _orders() -> list[list[RankRule]]:
    shuffled = []
    for seed in (1, 2):
        order = list(DEFAULT_RANK_RULES)
        random.Random(seed).shuffle(order)
        shuffled.append(order)
    return [list(DEFAULT_RANK_RULES), list(reversed(DEFAULT_RANK_RULES)), *shuffled]


def _diagnoses(path: Path) -> list[tuple[str, str]]:
    """Per rank and rule order: the ranked findings and the sorted notes, as JSON text."""
    loaded = aiprof.load(path)
    traces = [loaded] if isinstance(loaded, Trace) else list(loaded)
    out = []
    for trace in traces:
        analysis = analyze_trace(trace)
        extras = load_run_inputs(trace.path)
        results = []
        for order in _orders():
            findings, notes = diagnose_rank(trace, analysis, rules=order, inputs=extras)
            results.append((json.dumps([f.to_dict() for f in rank_findings(findings)], sort_keys=True, default=str),
                            json.dumps(sorted(notes))))
        out.extend(results)
        assert all(r == results[0] for r in results), f"{path}: findings differ with the rule order"
    return out


def _ids(text: str) -> list[str]:
    return [f["id"] for f in json.loads(text)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_findings_do_not_depend_on_rule_order(case: Any, tmp_path: Path) -> None:
    _diagnoses(case.build(tmp_path))


@pytest.mark.parametrize("rel", sorted(REAL))
def test_real_trace_findings_do_not_depend_on_rule_order(rel: str) -> None:
    path = TRACES / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in ../shared/traces")
    results = _diagnoses(path)
    assert REAL[rel] in _ids(results[0][0])
