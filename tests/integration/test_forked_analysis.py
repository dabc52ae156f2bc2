"""On every shared trace, the analysis split between this process and a forked child (what ``aiprof
analyze`` does with a spare core) gives exactly the sections and findings of the one-process analysis."""

from __future__ import annotations

import json
import os

import msgspec
import pytest
from test_load_all_traces import FILES, NOT_TRACES, ROOT

from aiprof.analysis import run
from aiprof.errors import TraceError
from aiprof.pipeline import diagnose_hook
from aiprof.trace.kineto.loader import load_file

pytestmark = [
    pytest.mark.skipif(not FILES, reason=f"shared traces not found at {ROOT}"),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
]


def _plain(analysis: run.RankAnalysis) -> str:
    diagnosis = msgspec.structs.asdict(analysis.diagnosis) if analysis.diagnosis is not None else None
    return json.dumps({"sections": analysis.sections, "diagnosis": diagnosis}, sort_keys=False, default=repr)


@pytest.mark.parametrize("rel", [f for f in FILES if f not in NOT_TRACES])
def test_forked_analysis_matches_one_process(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "1")  # a spare core, whatever this machine has
    try:
        serial_trace = load_file(ROOT / rel)
    except TraceError:
        pytest.skip("not a loadable trace")
    serial = run.analyze_trace(serial_trace, hook=diagnose_hook)
    split = run.analyze_trace(load_file(ROOT / rel), hook=diagnose_hook, fork=True)
    assert list(split.sections) == list(serial.sections)  # the report's order too
    assert _plain(split) == _plain(serial)


def test_a_failing_child_is_replaced_by_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiprof.analysis import forked

    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "1")
    rel = next(f for f in FILES if "mi250" in f)
    serial = run.analyze_trace(load_file(ROOT / rel), hook=diagnose_hook)

    real_start = forked.start

    def dying_start(fn: object) -> forked.Pending[object] | None:
        return real_start(lambda: os._exit(1))

    monkeypatch.setattr(forked, "start", dying_start)
    split = run.analyze_trace(load_file(ROOT / rel), hook=diagnose_hook, fork=True)
    assert _plain(split) == _plain(serial)
