"""The native SQLite column reader (``_sqlcols.c``) gives the same traces and the same errors as the Python
``sqlite3`` path (``AIPROF_NATIVE=0``): on the shared databases, on synthetic ones (small thresholds, so that
the packed read, the forked helpers and the threaded rowid ranges all run), and on bad input."""

from __future__ import annotations

import os
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


def both(path: Path, monkeypatch: pytest.MonkeyPatch, scan: bool = False) -> tuple[list[object], list[object]]:
    """The traces read natively (asserting the native reader ran: its b-tree scan with ``scan``, else its
    SQLite queries), then by Python's sqlite3."""
    calls: list[object] = []
    scans: list[object] = []
    real = nsys._native_fetch
    real_scan = sqlcols.scan

    def spy(*args: object) -> object:
        calls.append(args)
        return real(*args)  # type: ignore[arg-type]

    def spy_scan(*args: object) -> object:
        found = real_scan(*args)  # type: ignore[arg-type]
        if found is not None:
            scans.append(args)
        return found

    monkeypatch.delenv("AIPROF_NATIVE", raising=False)
    monkeypatch.setattr(nsys, "_native_fetch", spy)
    monkeypatch.setattr(sqlcols, "scan", spy_scan)
    monkeypatch.setattr(nsys, "_SCAN", scan)
    native = nsys.read_sqlite(path)
    if scan:
        assert scans, "the b-tree scan was not used"
    else:
        assert calls and not scans, "the native reader's queries were not used"
    monkeypatch.setenv("AIPROF_NATIVE", "0")
    calls.clear()
    scans.clear()
    python = nsys.read_sqlite(path)
    assert not calls and not scans
    return native, python  # type: ignore[return-value]


@pytest.mark.skipif(not SHARED, reason="../shared/traces/nsys not present")
@pytest.mark.parametrize("name", [p.name for p in SHARED])
@pytest.mark.parametrize("small", [False, True])
@pytest.mark.parametrize("scan", [False, True])
def test_the_shared_databases_read_the_same(name: str, small: bool, scan: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if small:  # every table is "long": packed reads, helpers, threaded ranges
        monkeypatch.setattr(nsys, "_PACK_ROWS", 3)
        monkeypatch.setattr(nsys, "_PARALLEL_ROWS", 7)
    native, python = both(NSYS / name, monkeypatch, scan)
    assert len(native) == len(python) > 0
    for a, b in zip(native, python):
        identical(a, b)  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [0, 1, 2_500])
@pytest.mark.parametrize("scan", [False, True])
def test_synthetic_databases_read_the_same(rows: int, scan: bool, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
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
    native, python = both(path, monkeypatch, scan)
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


def scan_file(path: Path, *args: object) -> object:
    """``_sqlcols.scan`` of the file at ``path`` (the scan reads a descriptor the caller opened)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return sqlcols.scan(fd, *args)  # type: ignore[arg-type]
    finally:
        os.close(fd)


def scan_or_query(path: Path, table: str, columns: list[str]) -> tuple[object, object]:
    """The columns read by the b-tree scan (None where it declines) and by SQLite, NULL as None."""
    import numpy as np

    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    names = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
    want = con.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
    count = len(want)
    con.close()
    found = scan_file(path, root, tuple(names.index(c) for c in columns), count)
    if found is None:
        return None, want
    rows, values, nulls, _ = found
    v = np.frombuffer(values, dtype=np.int64).reshape(len(columns), rows).T.tolist()
    n = np.frombuffer(nulls, dtype=np.bool_).reshape(len(columns), rows).T.tolist()
    got = [tuple(None if isnull else x for x, isnull in zip(vr, nr)) for vr, nr in zip(v, n)]
    return got, want


def test_the_btree_scan_reads_every_integer_size_null_and_late_column(tmp_path: Path) -> None:
    """Every record integer encoding (0/1 constants, 1–8 bytes, negative), NULLs, a column added by ALTER
    TABLE (absent from older records: NULL), many pages (interior pages of the b-tree), deleted rows."""
    import numpy as np

    rng = np.random.default_rng(5)
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER, pad TEXT, c INTEGER)")
    magnitudes = [0, 1, 2, 127, 128, 1 << 15, 1 << 23, 1 << 31, 1 << 47, 1 << 62, (1 << 63) - 1]
    values = [int(rng.choice(magnitudes)) * int(rng.choice([1, -1])) - int(rng.integers(0, 2)) for _ in range(30_000)]
    rows = [(v, None if i % 7 == 0 else -max(v, -(1 << 63) + 1), "x" * (i % 50), i) for i, v in enumerate(values)]
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    con.execute("DELETE FROM t WHERE c % 11 = 3")
    con.execute("ALTER TABLE t ADD COLUMN d INTEGER")
    con.execute("INSERT INTO t (a, b, pad, c, d) VALUES (1, 2, 'y', 3, 4)")
    con.commit()
    con.close()
    got, want = scan_or_query(path, "t", ["a", "b", "c", "d"])
    assert got == want and len(want) > 20_000


def test_the_btree_scan_declines_what_it_does_not_read_as_sqlite_does(tmp_path: Path) -> None:
    """REAL and TEXT values in a wanted column, records on overflow pages: None (SQLite reads them)."""
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE r (a INTEGER, b)")
    con.executemany("INSERT INTO r VALUES (?, ?)", [(1, 2), (3, 4.5), (5, 6)])
    con.execute("CREATE TABLE s (a INTEGER, b)")
    con.executemany("INSERT INTO s VALUES (?, ?)", [(1, 2), (3, "7x")])
    con.execute("CREATE TABLE o (a INTEGER, big TEXT, b INTEGER)")
    con.executemany("INSERT INTO o VALUES (?, ?, ?)", [(1, "z" * 20_000, 2)])
    con.commit()
    con.close()
    assert scan_or_query(path, "r", ["a"])[0] == [(1,), (3,), (5,)]  # the REAL column is not wanted
    assert scan_or_query(path, "r", ["a", "b"])[0] is None
    assert scan_or_query(path, "s", ["b"])[0] is None
    assert scan_or_query(path, "o", ["a"])[0] is None
    assert sqlcols.scan(-1, 2, (0,), 0) is None  # no file
    fd = os.open(tmp_path, os.O_RDONLY)  # a folder
    try:
        assert sqlcols.scan(fd, 2, (0,), 0) is None
    finally:
        os.close(fd)


@pytest.mark.skipif(not SHARED, reason="../shared/traces/nsys not present")
@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_the_btree_scan_never_reads_past_a_truncated_file(fraction: float, tmp_path: Path) -> None:
    """A cut file: the scan declines (the query then gives SQLite's error) or, when the table's pages all
    precede the cut, reads exactly the full file's values; never garbage."""
    source = NSYS / "perlmutter-cloverleaf-cuda.sqlite"
    con = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    count = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.close()
    path = tmp_path / "cut.sqlite"
    data = source.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    found = scan_file(path, root, (0, 1), count)
    whole = scan_file(source, root, (0, 1), count)
    assert whole is not None and (found is None or found == whole)
    if fraction < 0.5:
        assert found is None


def test_columns_in_time_order_match_a_per_row_reference() -> None:
    """``readers.base._columns`` (one argsort, concatenate + take per column) against a per-row reference:
    stable time order, absent columns -1 / NaN, scalar columns, empty blocks, already-sorted input."""
    import numpy as np

    from aiprof.trace.model import Columns
    from aiprof.trace.readers.base import _DTYPES, _INT_COLUMNS, _columns, block

    rng = np.random.default_rng(11)
    cases = [
        [block(5, ts=rng.integers(0, 4, 5), pid=3, dur=rng.integers(0, 9, 5)),
         block(0, ts=np.zeros(0, dtype=np.int64), name=7),
         block(4, ts=rng.integers(0, 4, 4), name=np.arange(4), blocks_per_sm=np.linspace(0, 1, 4), pid=3),
         block(3, ts=rng.integers(0, 4, 3), kind=2, occupancy_pct=0.5)],
        [block(3, ts=np.arange(3), kind=1), block(2, ts=np.arange(3, 5), kind=1, tid=np.array([4, 5]))],
        [],
    ]
    for blocks in cases:
        columns, got_order = _columns(blocks)
        rows = [(int(t), b, i) for b in blocks for i, t in enumerate(np.asarray(b["ts"]).tolist())]
        order = sorted(range(len(rows)), key=lambda r: rows[r][0])  # Python's sort is stable
        assert got_order.tolist() == order
        for name in Columns.__dataclass_fields__:
            got = getattr(columns, name)
            absent = -1 if name in _INT_COLUMNS else np.nan
            want = []
            for r in order:
                _, b, i = rows[r]
                value = b.get(name, absent)
                want.append(np.asarray(value).reshape(-1)[i] if np.ndim(value) else value)
            assert got.dtype == np.dtype(_DTYPES.get(name, np.int64)) and len(got) == len(rows)
            np.testing.assert_array_equal(got, np.asarray(want, dtype=got.dtype), err_msg=name)


def nvtx_database(path: Path) -> None:
    """A synthetic report with every kind of NVTX row the reader handles (and some it skips): inline and
    StringIds texts, marks, thread names, push/pop and start/end ranges (one ending before it starts, one
    without an end), autograd-nvtx op ranges with shapes, another process, a text that is not UTF-8, a
    number in the text column, an event type the reader ignores."""
    sys.path.insert(0, str(BENCH))
    try:
        import nsys_import
    finally:
        sys.path.remove(str(BENCH))
    nsys_import.build(path, 50)
    gtid, other = nsys_import.GLOBAL_TID, nsys_import.GLOBAL_TID + (1 << 24) + 1
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
                "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(900, "range by id"), (901, "main thread")])
    rows: list[tuple[object, ...]] = []
    for i in range(400):
        t = 1_000_000 + i * 5_000
        rows += [
            (t, t + 4_000, 59, f"ProfilerStep#{i}, op_id = {i}", gtid, None),
            (t + 10, t + 900, 59, f"aten::mm, seq = {i % 7}, op_id = {i + 1}, sizes = [[{i % 3 + 1}, 4], [4, 2]]", gtid, None),
            (t + 20, t + 800, 60, None, gtid, 900),
            (t + 30, None, 34, f"mark {i % 5}", gtid, None),
            (t + 40, t + 30, 59, "backwards", gtid, None),
            (t + 50, None, 59, "no end", gtid, None),
            (t + 60, t + 70, 59, f"other process {i % 2}", other, None),
            (t + 80, t + 90, 33, "ignored type", gtid, None),
        ]
    rows += [(1_000_001, None, 39, None, gtid, 901), (1_000_002, 1_000_500, 59, 12345, gtid, 900),
             (1_000_003, 1_000_600, 59, "tail", gtid, 424242)]
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?, ?, ?, ?, ?, ?)",
                    rows)
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES "
                "(1000004, 1000700, 59, CAST(X'6C6174696EE9' AS TEXT), ?)", (gtid,))
    con.commit()
    con.close()
    sys.modules.pop("nsys_import", None)


@pytest.mark.parametrize("step_range", [None, r"^ProfilerStep#\d+$"])
def test_nvtx_through_the_scan_reads_as_sqlite3_does(step_range: str | None, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from aiprof.trace.readers.base import ReaderOptions

    path = tmp_path / "nvtx.sqlite"
    nvtx_database(path)
    used = []
    real = nsys._nvtx_scan

    def spy(db: object) -> object:
        found = real(db)  # type: ignore[arg-type]
        used.append(found is not None)
        return found

    monkeypatch.setattr(nsys, "_nvtx_scan", spy)
    options = ReaderOptions(step_range=step_range)
    monkeypatch.delenv("AIPROF_NATIVE", raising=False)
    scanned = nsys.read_sqlite(path, options)
    assert used == [True]
    monkeypatch.setattr(nsys, "_SCAN", False)
    queried = nsys.read_sqlite(path, options)
    monkeypatch.setenv("AIPROF_NATIVE", "0")
    python = nsys.read_sqlite(path, options)
    assert used == [True, False, False]
    for a, b, c in zip(scanned, queried, python, strict=True):
        identical(a, b)  # type: ignore[arg-type]
        identical(a, c)  # type: ignore[arg-type]
    trace = scanned[0]
    assert "latin\ufffd" in trace.strings and "range by id" in trace.strings
    assert trace.thread_names[(nsys_import_pid(), nsys_import_pid())] == "main thread"


def nsys_import_pid() -> int:
    sys.path.insert(0, str(BENCH))
    try:
        import nsys_import
    finally:
        sys.path.remove(str(BENCH))
    return int(nsys_import.PID)
