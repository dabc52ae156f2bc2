"""Cycle files an ``aiprof run`` could not combine (it was killed, the disk was full) are traces to
``aiprof analyze``: found only in aiprof's own run directories, never twice (a rank whose trace was
written leaves its parts out), each read with a warning naming the file, why, and how much it holds; a
cut-off one is salvaged up to its last whole event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiprof import rundir
from aiprof.cli import main
from aiprof.trace.runset import find_trace_files


def _cycle(pid: int, steps: range) -> bytes:
    """A Kineto cycle as torch.profiler writes it: header first, one event per line, steps of 1 ms."""
    events: list[dict[str, Any]] = []
    for n in steps:
        start = 1000.0 * n
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": pid, "tid": pid,
                       "ts": start, "dur": 900.0})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": start + 100,
                       "dur": 500.0, "args": {"External id": n}})
    body = ",\n".join("  " + json.dumps(e) for e in events)
    return ('{\n  "schemaVersion": 1,\n  "baseTimeNanoseconds": 1700000000000000000,\n  "traceEvents": [\n'
            + body + '\n  ],\n  "traceName": "x"\n}').encode()


def _run_dir(folder: Path, status: str, **extra: Any) -> Path:
    folder.mkdir()
    meta = {"format": rundir.FORMAT, "format_version": 1, "status": status, "command": ["python", "train.py"], **extra}
    (folder / rundir.META).write_text(json.dumps(meta))
    return folder


def test_only_an_aiprof_run_directory_yields_its_cycle_files(tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run", "running")
    (run / ".pid7.cycle0.part").write_bytes(_cycle(7, range(2, 4)))
    (run / ".pid7.cycle1.part.tmp").write_bytes(_cycle(7, range(6, 8))[:-200])
    (run / ".pid7.cycle2.part.tmp").write_bytes(b"")  # cut before its first byte: nothing to read
    (run / ".pid7.state").write_text("torch\n")
    assert [p.name for p in find_trace_files(run)] == [".pid7.cycle0.part", ".pid7.cycle1.part.tmp"]

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "meta.json").write_text('{"format": "something-else"}')
    (foreign / ".pid7.cycle0.part").write_bytes(_cycle(7, range(2, 4)))
    (foreign / "x.json").write_bytes(_cycle(7, range(2, 4)))
    assert [p.name for p in find_trace_files(foreign)] == ["x.json"]


def test_the_parts_of_a_written_trace_are_not_read_twice(tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run", "complete", ranks=[
        {"pid": 7, "cycle_files": [".pid7.cycle0.part"], "trace_files": ["rank0.pt.trace.json"]},
        {"pid": 8, "cycle_files": [".pid8.cycle0.part"], "trace_files": ["rank1.pt.trace.json"]},  # never written
    ])
    (run / "rank0.pt.trace.json").write_bytes(_cycle(7, range(2, 4)))
    (run / ".pid7.cycle0.part").write_bytes(_cycle(7, range(2, 4)))  # combined, its removal failed
    (run / ".pid8.cycle0.part").write_bytes(_cycle(8, range(2, 4)))
    assert [p.name for p in find_trace_files(run)] == [".pid8.cycle0.part", "rank0.pt.trace.json"]
    # Hostile shapes in meta.json: no crash (analyze ignores such a meta.json altogether).
    (run / rundir.META).write_text(json.dumps({"format": rundir.FORMAT, "ranks": [
        {"pid": 9, "cycle_files": 5, "trace_files": "rank0.pt.trace.json"}, 3, None]}))
    assert [p.name for p in rundir.leftover_cycles(run)] == [".pid7.cycle0.part", ".pid8.cycle0.part"]


def test_analyze_says_which_file_why_and_how_much(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_dir(tmp_path / "run", "incomplete", write_errors=["/x/run/meta.json: cannot write (No space left on device)"])
    (run / ".pid7.cycle0.part").write_bytes(_cycle(7, range(2, 4)))
    whole = _cycle(7, range(6, 9))
    (run / ".pid7.cycle1.part.tmp").write_bytes(whole[: len(whole) * 2 // 3])
    assert main(["analyze", str(run), "--format", "json"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    first = [line for line in lines if ".pid7.cycle0.part:" in line]
    assert first and "did not combine" in first[0] and "No space left on device" in first[0]
    assert "4 events recovered" in first[0]  # two steps of two events each
    cut = [line for line in lines if ".pid7.cycle1.part.tmp:" in line]
    assert any("cut off mid-write" in line and "salvaged" in line and "bytes" in line for line in cut), captured.err
    report = json.loads(captured.out)
    steps = {s["name"] for r in report["ranks"] for s in r["steps"]}
    assert len(report["ranks"]) == 1  # the two cycles of one process are one rank
    assert {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#6"} <= steps
