"""Numbers one bad event wrecks: a kernel with an 11-day duration, or a timestamp far in the future,
stretched step 0 over everything ("median step 0.0 µs", no findings, no warning)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hostile_inputs import far_kernel

from aiprof.analysis.steps import step_windows
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES, account
from aiprof.trace import suspect
from aiprof.trace.kineto.loader import load_file

STEPS = 6
DAY_US = 86_400e6


@pytest.mark.parametrize(
    "kernel_ts_us,kernel_dur_us,where",
    [
        (130.0, 11 * DAY_US, "after"),  # starts in step 0, runs 11 days
        (30 * DAY_US, 100.0, "after"),  # a timestamp a month in the future
        (-30 * DAY_US, 100.0, "before"),  # and one in the past
    ],
    ids=["11-day kernel", "future timestamp", "past timestamp"],
)
def test_a_clock_glitch_neither_stretches_steps_nor_fills_the_accounting(
    tmp_path: Path, kernel_ts_us: float, kernel_dur_us: float, where: str
) -> None:
    trace = load_file(far_kernel(tmp_path / "t.json", STEPS, kernel_ts_us, kernel_dur_us))
    bad = suspect.rows(trace)
    assert [trace.name_of(int(r)) for r in bad] == ["glitch_kernel"]
    note = [w for w in trace.warnings if "far outside the host activity" in w]
    assert len(note) == 1 and f"{where} the host activity" in note[0] and "days" in note[0]

    windows = step_windows(trace)
    assert len(windows) == STEPS
    durations = [w.duration_ns for w in windows]
    assert min(durations) > 0 and float(np.median(durations)) >= 900_000  # each step about its 1 ms
    assert max(durations) < 2_000_000

    for device in account(trace, windows):
        for step in device.steps:
            assert sum(step.breakdown_ns[b] for b in BUCKETS) == step.duration_ns
            assert sum(step.idle_causes_ns[c] for c in IDLE_CAUSES) == step.breakdown_ns["idle"]
        assert device.totals.median_step_ns > 0
        assert device.totals.breakdown_ns["compute"] == STEPS * 100_000  # the glitch is not compute


def test_ordinary_device_lag_is_not_suspect(tmp_path: Path) -> None:
    """A device that trails the host by a few steps (a deep queue) keeps every event."""
    trace = load_file(far_kernel(tmp_path / "t.json", STEPS, 130.0 + 20_000, 100.0))  # 20 ms after the host
    assert suspect.rows(trace).size == 0
    assert not any("far outside" in w for w in trace.warnings)
    windows = step_windows(trace)
    assert windows[0].end_ns >= trace.columns.ts.min() + 20_000_000  # step 0 still stretches to its work


def test_steps_swallowed_by_a_long_stretch_are_dropped_not_shown_as_zero(tmp_path: Path) -> None:
    """Below the suspect margin a long kernel still stretches its step (the TensorBoard rule), but the
    steps it swallows are left out instead of being presented as 0 µs steps."""
    trace = load_file(far_kernel(tmp_path / "t.json", STEPS, 130.0, 3_500.0))  # ends inside step 3
    windows = step_windows(trace)
    assert all(w.duration_ns > 0 for w in windows)
    assert [w.number for w in windows] == [0, 3, 4, 5]
    assert all(a.end_ns <= b.start_ns for a, b in zip(windows, windows[1:]))  # still no overlap
    assert windows[1].start_ns == windows[0].end_ns  # step 3 starts where step 0's stretch ends
