"""The native SQLite column reader (``_sqlcols.c``) gives the same traces and the same errors as the Python
``sqlite3`` path (``AIPROF_NATIVE=0``): on the shared databases, on synthetic ones (small thresholds, so that
the packed read, the forked helpers and the threaded rowid ranges all run), and on bad input."""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from trace_compare import identical

from aiprof.errors import TraceError
from aiprof.trace.readers import nsys

sqlcols = pytest.importorskip("aiprof.trace.readers._sqlcols", reason="native reader not built")

NSYS = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "nsys"
SHARED = sorted(NSYS.glob("*.sqlite")) if NSYS.is_dir() else []
BENCH = Path(__file__).resolve().parents[2] / "bench"


def both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[object], list[object]]:
    """The traces read natively (asserting the native reader ran), then by Python's sqlite3."""
    calls = []
    real = nsys._native_fetch

    def spy(*args: object) -> object:
        calls.append(args)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.delenv("AIPROF_NATIVE", raising=False)
    monkeypatch.setattr(nsys, "_native_fetch", spy)
    native = nsys.read_sqlite(path)
    assert calls, "the native reader was not used"
    monkeypatch.setenv("AIPROF_NATIVE", "0")
    calls.clear()
    python = nsys.read_sqlite(path)
    assert not calls
    return native, python  # type: ignore[return-value]


@pytest.mark.skipif(not SHARED, reason="../shared/traces/nsys not present")
@pytest.mark.parametrize("name", [p.name for p in SHARED])
@pytest.mark.parametrize("small", [False, True])
def test_the_shared_databases_read_the_same(name: str, small: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if small:  # every table is "long": packed reads, helpers, threaded ranges
        monkeypatch.setattr(nsys, "_PACK_ROWS", 3)
        monkeypatch.setattr(nsys, "_PARALLEL_ROWS", 7)
    native, python = both(NSYS / name, monkeypatch)
    assert len(native) == len(python) > 0
    for a, b in zip(native, python):
        identical(a, b)  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [0, 1, 2_500])
def test_synthetic_databases_read_the_same(rows: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import nsys_import

    path = tmp_path / "synthetic.sqlite"
    nsys_import.build(path, rows or 300)
    if rows == 0:  # no launch rows at all (every kernel an orphan), negative grids (clamped on a long table)
        con = sqlite3.connect(path)
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL, gridX = -5")
        con.commit()
        con.close()
    monkeypatch.setattr(nsys, "_PACK_ROWS", 100)
    monkeypatch.setattr(nsys, "_PARALLEL_ROWS", 1_000)
    native, python = both(path, monkeypatch)
    for a, b in zip(native, python, strict=True):
        identical(a, b)  # type: ignore[arg-type]
    sys.modules.pop("nsys_import", None)


def errors(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    out = []
    for value in ("1", "0"):
        monkeypatch.setenv("AIPROF_NATIVE", value)
        with pytest.raises(TraceError) as caught:
            nsys.read_sqlite(path)
        out.append(str(caught.value))
    return out[0], out[1]


@pytest.mark.skipif(not SHARED, reason="../shared/traces/nsys not present")
@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_a_truncated_database_gives_the_same_error(fraction: float, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cut.sqlite"
    data = (NSYS / "perlmutter-cloverleaf-cuda.sqlite").read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    native, python = errors(path, monkeypatch)
    assert native == python and "\n" not in native


def test_not_sqlite_and_a_missing_table_give_the_same_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x07" * 5000)
    native, python = errors(junk, monkeypatch)
    assert native == python and "\n" not in native
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.commit()
    con.close()
    native, python = errors(other, monkeypatch)
    assert native == python and "no CUDA or NVTX activity" in native


def test_the_reader_reports_sqlite_errors_as_sqlite3_does(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, b REAL, c TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(1, 2.5, "7"), (None, -3.0, None), (2**62, 0.0, "x")])
    con.commit()
    con.close()
    rows, buffer = sqlcols.query(bytes(path), "SELECT a, b, c FROM t WHERE rowid BETWEEN ? AND ?", 3, -9, (1, 3))
    import numpy as np

    values = np.frombuffer(buffer, dtype=np.int64).reshape(rows, 3)
    assert values.tolist() == [[1, 2, 7], [-9, -3, -9], [2**62, 0, 0]]
    with pytest.raises(sqlcols.Error) as native:
        sqlcols.query(bytes(path), "SELECT a FROM missing", 1, -1)
    with pytest.raises(sqlite3.Error) as python:
        sqlite3.connect(path).execute("SELECT a FROM missing")
    assert native.value.args[0] == str(python.value)
    with pytest.raises(sqlcols.Error, match="unable to open"):
        sqlcols.query(bytes(tmp_path / "absent.sqlite"), "SELECT 1", 1, -1)
    assert not (tmp_path / "absent.sqlite").exists()  # read-only: never created
    shutil.rmtree(tmp_path)


def test_distinct_is_numpy_unique() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    for values in (rng.integers(0, 50, 1000), rng.integers(0, 1 << 40, 100), rng.integers(-3, 9, 77),
                   np.array([5], dtype=np.int64), rng.integers(0, 70_000, 10)):
        values = values.astype(np.int64)
        distinct, inverse = nsys._distinct(values)
        want, want_inverse = np.unique(values, return_inverse=True)
        assert distinct.dtype == np.int64 and np.array_equal(distinct, want)
        assert np.array_equal(inverse, want_inverse.reshape(-1))
