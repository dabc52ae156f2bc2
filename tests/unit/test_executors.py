"""The executors' choices that need no cluster: how a --executor value is read, and how many files are
analysed at once so that the ranks in flight fit in memory."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from aiprof.errors import AiprofError
from aiprof.trace import executors
from aiprof.trace.executors import DaskExecutor, LocalExecutor, executor_for, memory_bound_workers


def test_executor_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    assert executor_for(None) == LocalExecutor() and executor_for("local") == LocalExecutor()
    assert executor_for("dask") == DaskExecutor(None)
    assert executor_for("dask://head:8786") == DaskExecutor("tcp://head:8786")
    assert executor_for("tls://head:8786") == DaskExecutor("tls://head:8786")
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://sched:8786")
    assert executor_for("dask") == DaskExecutor("tcp://sched:8786")
    for bad in ("spark", "dask://", "ray"):
        with pytest.raises(AiprofError, match="expected local, dask"):
            executor_for(bad)


def _gz(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_the_pool_shrinks_to_what_memory_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = gzip.compress(b" " * (100 << 20), compresslevel=1)
    jobs = [(_gz(tmp_path / f"rank{i}.json.gz", data),) for i in range(8)]  # 100 MB of text each
    peak = executors._peak_estimate(jobs[0][0])
    assert peak == int(executors.PEAK_PER_TRACE_BYTE * (100 << 20))
    monkeypatch.setattr(executors, "_available_bytes", lambda: int(3.5 * peak / executors.MEMORY_HEADROOM))
    assert memory_bound_workers(jobs, 8) == 3
    monkeypatch.setattr(executors, "_available_bytes", lambda: 1)
    assert memory_bound_workers(jobs, 8) == 1  # never none
    monkeypatch.setattr(executors, "_available_bytes", lambda: 1 << 50)
    assert memory_bound_workers(jobs, 4) == 4  # never more than asked
    monkeypatch.setattr(executors, "_available_bytes", lambda: None)
    assert memory_bound_workers(jobs, 6) == 6


def test_small_and_unreadable_files_count_the_floor(tmp_path: Path) -> None:
    small = tmp_path / "a.json"
    small.write_text("{}")
    assert executors._peak_estimate(small) == executors.PEAK_FLOOR_BYTES
    assert executors._peak_estimate(tmp_path / "missing.json") == executors.PEAK_FLOOR_BYTES
