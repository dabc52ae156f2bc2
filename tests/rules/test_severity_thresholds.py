"""Severity thresholds on synthetic traces with fixed durations: the share of the step a finding saves
decides whether it is reported and how severe it is (``high`` ≥ ``high_share``, ``medium`` ≥
``medium_share``, ``low`` below), exactly at the boundaries, with no timed workload involved.

Each step is 1,000 µs with a 600 µs kernel that ends at 640 µs; what is planted after it is exposed in full.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.rules import DEFAULT_OPTIONS, Finding, RuleOptions, diagnose_rank
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

US = 1000
STEP_US = 1000


def _diagnose(tmp_path: Path, body: Callable[[TraceBuilder, int], None],
              options: RuleOptions = DEFAULT_OPTIONS) -> dict[str, Finding]:
    b = TraceBuilder()
    for i in range(4):
        t0 = i * STEP_US
        b.step(i, ts=t0, dur=STEP_US)
        op = b.cpu_op("aten::mm", ts=t0 + 10, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 40, kernel_dur=600, grid=(264, 1, 1))
        body(b, t0)
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    found, notes = diagnose_rank(trace, analyze_trace(trace), options)
    assert notes == []
    return {f.id: f for f in found}


# exposed loader wait per 1,000 µs step → severity (None: not reported; data_loading_share is 5 %)
@pytest.mark.parametrize("wait_us,severity", [(40, None), (49, None), (50, "medium"), (149, "medium"),
                                              (150, "high"), (300, "high")])
def test_data_loading_severity_follows_the_share_of_the_step(tmp_path: Path, wait_us: int, severity: str | None) -> None:
    found = _diagnose(tmp_path, lambda b, t0: b.dataloader(ts=t0 + 650, dur=wait_us))
    if severity is None:
        assert "data_loading" not in found
        return
    f = found["data_loading"]
    assert f.est_saving_ns_per_step == wait_us * US
    assert f.share_of_step == pytest.approx(wait_us / STEP_US)
    assert f.severity == severity


# exposed copy per step → severity (memcpy_exposed_share is 5 %)
@pytest.mark.parametrize("copy_us,severity", [(40, None), (50, "medium"), (149, "medium"), (150, "high")])
def test_memcpy_exposed_severity_follows_the_share_of_the_step(tmp_path: Path, copy_us: int, severity: str | None) -> None:
    def body(b: TraceBuilder, t0: int) -> None:
        b.memcpy(b.cpu_op("aten::copy_", ts=t0 + 650, dur=10), ts=t0 + 660, dur=copy_us, nbytes=8 << 20)

    found = _diagnose(tmp_path, body)
    if severity is None:
        assert "memcpy_exposed" not in found
        return
    f = found["memcpy_exposed"]
    assert f.est_saving_ns_per_step == copy_us * US and f.severity == severity


def test_severity_thresholds_are_options(tmp_path: Path) -> None:
    """The same 100 µs wait (10 % of the step) is medium by default, high with high_share=0.10, low with
    medium_share=0.2, and not reported with data_loading_share=0.2."""
    def body(b: TraceBuilder, t0: int) -> None:
        b.dataloader(ts=t0 + 650, dur=100)

    assert _diagnose(tmp_path, body)["data_loading"].severity == "medium"
    assert _diagnose(tmp_path, body, dataclasses.replace(DEFAULT_OPTIONS, high_share=0.10))["data_loading"].severity == "high"
    assert _diagnose(tmp_path, body, dataclasses.replace(DEFAULT_OPTIONS, medium_share=0.2))["data_loading"].severity == "low"
    assert "data_loading" not in _diagnose(tmp_path, body, dataclasses.replace(DEFAULT_OPTIONS, data_loading_share=0.2))


def test_a_saving_under_min_saving_ns_is_dropped_whatever_its_share(tmp_path: Path) -> None:
    """The registry's floor: 20 % of a step is not reported when it is under min_saving_ns per step."""
    def body(b: TraceBuilder, t0: int) -> None:
        b.dataloader(ts=t0 + 650, dur=200)

    assert "data_loading" in _diagnose(tmp_path, body)
    assert "data_loading" not in _diagnose(tmp_path, body, dataclasses.replace(DEFAULT_OPTIONS, min_saving_ns=250 * US))
