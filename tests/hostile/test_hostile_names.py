"""A file name is only ever a name: a folder of files named as an attacker would name them
(hostile_inputs.HOSTILE_SQLITE_NAMES: ``%xx`` escapes, ``#``, ``?mode=rwc&``, ``..%2F``) is analysed file by
file, each read as itself, and nothing outside the inputs and the ``-o`` target is created or modified:
no write through a decoded URI, no ``-shm`` / ``-wal`` beside a database, no journal rolled back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_inputs import HOSTILE_SQLITE_NAMES, checksums, hostile_name_folder, nsys_export

import aiprof
from aiprof.errors import TraceError
from aiprof.trace.model import Kind
from aiprof.trace.readers import load_ranks
from aiprof.trace.readers.nsys import SqliteFile

ENV = dict(os.environ, PYTHONPATH=str(Path(aiprof.__file__).resolve().parents[1]))


def kernels(path: Path) -> int:
    (trace,) = load_ranks(path)
    return int((trace.columns.kind == int(Kind.KERNEL)).sum())


@pytest.mark.parametrize("native", ["1", "0"])
def test_every_hostile_name_reads_its_own_file(tmp_path: Path, native: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPROF_NATIVE", native)
    traces = hostile_name_folder(tmp_path)
    before = checksums(tmp_path)
    assert kernels(traces / "realA.sqlite") == 7
    for name in HOSTILE_SQLITE_NAMES:
        assert kernels(traces / name) == 3, name  # never realA.sqlite's 7, never ../victim/app.db
    assert checksums(tmp_path) == before


def test_analysing_the_folder_changes_nothing_around_it(tmp_path: Path) -> None:
    traces = hostile_name_folder(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    before = checksums(tmp_path)
    run = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(traces), "--format", "json",
                          "-o", str(out / "r.json")], capture_output=True, text=True, timeout=300, env=ENV)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    after = checksums(tmp_path)
    assert after.pop("out/r.json")
    assert after == before  # the victim database and its WAL as they were; nothing created; no -shm


def test_a_database_with_a_wal_is_read_as_the_file_holds_it(tmp_path: Path) -> None:
    """A WAL-mode export whose last rows are still in its ``-wal``: read without them, with a warning; the
    WAL is neither checkpointed nor deleted and no ``-shm`` appears (a read-only open of a WAL database
    otherwise creates one)."""
    work = tmp_path / "work"
    work.mkdir()
    db = nsys_export(work / "w.sqlite", 3)
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=wal")
    holder = sqlite3.connect(db)
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute("SELECT count(*) FROM StringIds").fetchall()
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT start + 1, end + 1, deviceId, streamId, correlationId, "
                "globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                "staticSharedMemory, dynamicSharedMemory FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / "w.sqlite").write_bytes(db.read_bytes())
    (folder / "w.sqlite-wal").write_bytes(Path(f"{db}-wal").read_bytes())
    holder.close()
    con.close()
    before = checksums(folder)
    (trace,) = load_ranks(folder / "w.sqlite")
    assert checksums(folder) == before
    assert int((trace.columns.kind == int(Kind.KERNEL)).sum()) == 3
    assert any("-wal file beside the database was not read" in w for w in trace.warnings), trace.warnings


def test_the_file_read_is_the_file_held_open(tmp_path: Path) -> None:
    """Another file renamed over the name after the open is detected, never read in its place."""
    path = nsys_export(tmp_path / "a.sqlite", 3)
    other = nsys_export(tmp_path / "b.sqlite", 7)
    held = SqliteFile.open(path)
    try:
        held.check()
        os.replace(other, path)
        with pytest.raises(TraceError, match="replaced while it was being read"):
            held.check()
    finally:
        held.close()


def test_a_fifo_or_a_folder_is_not_a_database(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="not a regular file"):
        SqliteFile.open(fifo)  # refused at once, never waited on
    text = tmp_path / "text.sqlite"
    text.write_text("not a database\n")
    with pytest.raises(TraceError, match="not an SQLite database"):
        SqliteFile.open(text)
    with pytest.raises(TraceError, match="cannot open"):
        SqliteFile.open(tmp_path / "absent.sqlite")
