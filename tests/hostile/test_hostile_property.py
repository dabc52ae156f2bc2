"""The property: for every reader (Kineto JSON, Nsight Systems SQLite, Nsight Compute CSV, allocator snapshot
pickle, run directory meta.json), replacing any one field of a valid input by an extreme (huge, negative,
NaN, inf, text, empty, a container) gives a report (exit 0) or one line with exit 2: never exit 3 (an
internal error), never a traceback. The verbs run in this process (``aiprof.cli.main``), on fields drawn
with a fixed seed, so the test is the same every run and takes seconds."""

from __future__ import annotations

import json
import math
import pickle
import random
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_inputs import EXTREMES, NCU_HEADER, kineto_trace, ncu_csv, nsys_export
from kineto_builder import TraceBuilder

from aiprof.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from snapshots import block, entry, segment, snapshot  # noqa: E402

CASES = 24  # per reader: (field, extreme) pairs drawn with the seed below
SEED = 27
# Python values that a JSON document or a pickle may hold where a number is expected.
VALUES: list[Any] = [2**80, 2**63, -(2**63) - 1, -1, 10**400, float("nan"), float("inf"), float("-inf"), 1e308,
                     "text", "", None, [], {}, True, "1e400", "9" * 5000]
SQL_VALUES = ["9223372036854775807", "-9223372036854775808", "1e999", "-1e999", "'text'", "''", "NULL", "X'00'",
              "-1", "4.5", "'9999999999999999999999'"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> None:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    assert code in (0, 2), (code, err)
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("aiprof: error")]
        assert len(errors) == 1, err


def leaves(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field's path in a JSON-like document (containers included)."""
    if path:
        yield path
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield from leaves(value, (*path, key))


def replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``doc`` (through pickle: tuples and big ints stay as they are) with ``path`` set to ``value``."""
    out = pickle.loads(pickle.dumps(doc))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def draws(population: list[Any], values: list[Any], seed: int) -> list[tuple[Any, Any]]:
    rnd = random.Random(seed)
    return [(rnd.choice(population), rnd.choice(values)) for _ in range(CASES)]


def kineto_doc() -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return json.loads(kineto_trace(Path(tmp) / "t.json").read_text())  # type: ignore[no-any-return]


def test_kineto_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = kineto_doc()
    for k, (path, value) in enumerate(draws(list(leaves(doc)), VALUES, SEED)):
        file = tmp_path / f"k{k}.json"
        file.write_text(json.dumps(replaced(doc, path, value)))  # NaN / Infinity as Python's json writes them
        run_cli(capsys, "analyze", file, "--format", "json", "-o", tmp_path / f"k{k}.out.json")


def test_nsight_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    base = nsys_export(tmp_path / "base.sqlite", 3)
    con = sqlite3.connect(base)
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:  # the same tables without NOT NULL / PRIMARY KEY: any value fits anywhere
        con.executescript(f'CREATE TABLE loose AS SELECT * FROM "{table}"; DROP TABLE "{table}"; '
                          f'ALTER TABLE loose RENAME TO "{table}"')
    fields = [(table, r[1]) for table in tables for r in con.execute(f'PRAGMA table_info("{table}")')]
    con.close()
    for k, ((table, column), value) in enumerate(draws(fields, SQL_VALUES, SEED)):
        for native in ("1", "0"):
            monkeypatch.setenv("AIPROF_NATIVE", native)
            file = tmp_path / f"n{k}.{native}.sqlite"
            file.write_bytes(base.read_bytes())
            con = sqlite3.connect(file)
            con.execute(f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid = (SELECT min(rowid) FROM "{table}")')
            con.commit()
            con.close()
            run_cli(capsys, "analyze", file, "--format", "json", "-o", tmp_path / f"n{k}.{native}.json")


def test_ncu_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    timeline = nsys_export(tmp_path / "timeline.sqlite", 3)
    cells = [(row, column) for row in (-2, 0, 1, 2) for column in range(len(NCU_HEADER))]
    for k, ((row, column), value) in enumerate(draws(cells, list(EXTREMES), SEED)):
        file = ncu_csv(tmp_path / f"c{k}.csv", 3, {(row, column): value})
        run_cli(capsys, "analyze", timeline, "--ncu", file, "--format", "json", "-o", tmp_path / f"c{k}.json")


def snapshot_doc() -> dict[str, Any]:
    trace = [entry("alloc", 0x1000 + 4096 * i, 4096, 10 + i) for i in range(4)]
    trace += [entry("free_requested", 0x1000, 4096, 20), entry("free_completed", 0x1000, 4096, 21),
              entry("oom", 0, 1 << 30, 22, device_free=1 << 20)]
    return snapshot([segment(0x1000, [block(0x1000, 4096), block(0x2000, 4096, "inactive")])], trace)


def test_snapshot_pickle(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    doc = snapshot_doc()
    for k, (path, value) in enumerate(draws(list(leaves(doc)), VALUES, SEED)):
        file = tmp_path / f"s{k}.pickle"
        file.write_bytes(pickle.dumps(replaced(doc, path, value)))
        for native in ("1", "0"):
            monkeypatch.setenv("AIPROF_NATIVE", native)
            run_cli(capsys, "memory", file, "--format", "json", "-o", tmp_path / f"s{k}.{native}.json")


def test_run_directory_meta(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = {"format": "aiprof-run", "format_version": 1, "mode": "api", "status": "done",
            "host": {"cores_logical": 2, "cores_available": 2, "cpu_model": "AMD EPYC"},
            "torch_threads": 2, "ranks": [{"rank": 0, "torch_threads": 2, "pid": 123}]}
    b = TraceBuilder(device_name="cpu")
    for i in range(3):
        b.step(i, ts=i * 100, dur=90)
        b.cpu_op("aten::mm", ts=i * 100 + 5, dur=20)
    for k, (path, value) in enumerate(draws(list(leaves(meta)), VALUES, SEED)):
        run = tmp_path / f"run{k}"
        run.mkdir()
        (run / "meta.json").write_text(json.dumps(replaced(meta, path, value)))
        b.write(run / "host_123.1700000000000.pt.trace.json")
        run_cli(capsys, "analyze", run, "--format", "json", "-o", tmp_path / f"r{k}.json")


def test_the_draws_cover_every_kind_of_extreme() -> None:
    """The seed is fixed; with it every reader meets NaN or inf, a huge number and text at least once."""
    for population, values in ((list(leaves(kineto_doc())), VALUES), (list(leaves(snapshot_doc())), VALUES)):
        drawn = [v for _, v in draws(population, values, SEED)]
        assert any(isinstance(v, float) and not math.isfinite(v) for v in drawn)
        assert any(isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63 for v in drawn)
        assert any(isinstance(v, str) for v in drawn)
