"""Nsight Systems databases made hostile: a b-tree made a DAG (a page referenced many times: millions of
rows from a few hundred KB), more rows than --max-events, text or out-of-range numbers where integers
belong. Both read paths (the native reader, AIPROF_NATIVE=0) give the same trace or the same one-line
error. Inputs: hostile_inputs.btree_dag, nsys_export."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_inputs import btree_dag, nsys_export
from trace_compare import identical

import aiprof
from aiprof.errors import TraceError
from aiprof.trace import limits
from aiprof.trace.readers import ReaderOptions, nsys

ENV = dict(os.environ, PYTHONPATH=str(Path(aiprof.__file__).resolve().parents[1]))
NATIVE = pytest.importorskip("aiprof.trace.readers._sqlcols", reason="native reader not built")


def both(path: Path, monkeypatch: pytest.MonkeyPatch, bounds: limits.LoadLimits | None = None) -> tuple[object, object]:
    """What each path gives (read under ``bounds``, the defaults when None): its traces, or its error's text."""
    out: list[object] = []
    for native in ("1", "0"):
        monkeypatch.setenv("AIPROF_NATIVE", native)
        try:
            out.append(nsys.read_sqlite(path, ReaderOptions(limits=bounds or limits.LoadLimits())))
        except TraceError as err:
            assert "\n" not in str(err) and err.exit_code == 2
            out.append(str(err))
    return out[0], out[1]


def same(path: Path, monkeypatch: pytest.MonkeyPatch, bounds: limits.LoadLimits | None = None) -> object:
    native, python = both(path, monkeypatch, bounds)
    if isinstance(native, str) or isinstance(python, str):
        assert native == python
        return native
    assert isinstance(native, list) and isinstance(python, list) and len(native) == len(python)
    for a, b in zip(native, python):
        identical(a, b)
    return native


def test_a_btree_dag_is_refused_on_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = btree_dag(tmp_path / "dag.sqlite", 5000)
    assert path.stat().st_size < 1 << 20
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] > 500_000  # what SQLite sees
    con.close()
    error = same(path, monkeypatch)  # refused before any row is read: more rows than the file can hold
    assert isinstance(error, str) and "claims 940,188 rows, more than a file of" in error
    run = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(path), "--max-events", "100000"],
                         capture_output=True, text=True, timeout=120, env=ENV)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "claims" in run.stderr


@pytest.mark.parametrize("references", [2, 20])
def test_a_page_referenced_twice_is_refused_on_both_paths(references: int, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Within what the file can hold: the walk of the b-tree (C on the native path, Python before any SQLite
    read) finds the page reached twice; the same message on both paths, and through SQLite's queries."""
    path = btree_dag(tmp_path / "dag.sqlite", references)
    error = same(path, monkeypatch)
    assert isinstance(error, str) and "b-tree page 7 is referenced twice" in error
    monkeypatch.setattr(nsys, "_SCAN", False)  # the native reader's SQLite queries
    assert same(path, monkeypatch) == error


def test_the_native_scan_refuses_a_page_reached_twice(tmp_path: Path) -> None:
    path = btree_dag(tmp_path / "dag.sqlite", 40)
    con = sqlite3.connect(path)
    root, = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()
    count, = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(NATIVE.Error, match="referenced twice"):
            NATIVE.scan(fd, root, (0, 1), count)
    finally:
        os.close(fd)


def test_max_events_and_max_trace_mb_apply_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = nsys_export(tmp_path / "t.sqlite", 50)  # 50 kernels + 50 launches
    assert "more than 99 events" in str(same(path, monkeypatch, limits.LoadLimits(max_events=99)))
    assert isinstance(same(path, monkeypatch, limits.LoadLimits(max_events=100)), list)
    assert "--max-trace-mb" in str(same(path, monkeypatch, limits.LoadLimits.with_max_mb(0.001)))


# Text and out-of-range values where an integer belongs: (table, column, SQL value)
EDITS = [
    ("StringIds", "id", "'text'"),
    ("StringIds", "value", "X'00ff'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start", "'text'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "end", "'12abc'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", "'0x10'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "gridX", "1e300"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "gridY", "9223372036854775807"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start", "9223372036854775807"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "end", "-9223372036854775808"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName", "'not an id'"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid", "1e999"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "4.5"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid", "NULL"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId", "X'31'"),
]


@pytest.mark.parametrize("table,column,value", EDITS, ids=[f"{t[-6:]}.{c}={v[:12]}" for t, c, v in EDITS])
def test_text_or_extremes_where_an_integer_belongs_read_the_same_on_both_paths(
        table: str, column: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nsys, "_PACK_ROWS", 10)  # the packed read too (30 rows)
    for rows in (3, 30):
        path = nsys_export(tmp_path / f"t{rows}.sqlite", rows)
        con = sqlite3.connect(path)
        if table == "StringIds":  # an id that is not the rowid (no PRIMARY KEY): it can hold text
            con.executescript("CREATE TABLE s (id INTEGER NOT NULL, value TEXT NOT NULL); "
                              "INSERT INTO s SELECT id, value FROM StringIds; DROP TABLE StringIds; "
                              "ALTER TABLE s RENAME TO StringIds")
        con.execute(f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid = 2')
        con.commit()
        con.close()
        same(path, monkeypatch)
