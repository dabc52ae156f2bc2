"""What a reader is told (the step range, the load limits) is an argument of the read, carried with each
file's job to the worker that reads it: no process setting, so two analyses in one process never see each
other's options, and a forked pool and a Dask worker get the same ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiprof import app
from aiprof.errors import AiprofError, TraceError
from aiprof.trace import limits, readers
from aiprof.trace.readers import ReaderOptions, load_ranks
from kineto_builder import TraceBuilder


def _trace(tmp_path: Path, steps: int = 3) -> Path:
    b = TraceBuilder()
    for i in range(steps):
        b.step(i, ts=i * 1000, dur=1000)
        b.launch(b.cpu_op("aten::mm", ts=i * 1000 + 1, dur=5), kernel_ts=i * 1000 + 10, kernel_dur=900)
    return b.write(tmp_path / "t.json")


def test_no_process_setting_is_left() -> None:
    assert not hasattr(readers, "DEFAULT_OPTIONS") and not hasattr(readers, "set_default_options")
    assert not hasattr(limits, "configure") and not hasattr(limits, "current")
    assert not hasattr(app, "set_load_limits") and not hasattr(app, "set_step_range")


def test_the_limits_of_one_read_are_not_the_next_ones(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    few = ReaderOptions(limits=limits.LoadLimits(max_events=3))
    with pytest.raises(TraceError, match="more than 3 events"):
        load_ranks(path, few)
    assert len(load_ranks(path)) == 1  # the defaults again: nothing was left behind


def test_an_analysis_carries_its_reader_options_to_its_workers(tmp_path: Path) -> None:
    """Two files (one worker each where cores allow): both read under the analysis' limits."""
    folder = tmp_path / "run"
    folder.mkdir()
    for rank in range(2):
        _trace(tmp_path, 3).rename(folder / f"rank{rank}.json")
    strict = app.AnalyzeOptions(workers=2, reader=app.reader_options(max_events=3))
    with pytest.raises(AiprofError, match="none of the 2"):
        app.analyze([folder], strict)  # every file skipped for its event count
    assert len(app.analyze([folder], app.AnalyzeOptions(workers=2)).ranks) == 2
    with pytest.raises(AiprofError, match="--max-events"):
        app.reader_options(max_events=-1)
