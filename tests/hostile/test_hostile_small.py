"""The smaller hostile-input defects of issue 27: an ``@mention`` in a memory report's Markdown, compare's
error naming the user's file, ``aiprof export`` of a trace with ``pid: [1]``, and the messages for a FIFO,
a loop of symbolic links and a UTF-16 JSON file (one line, exit 2, saying what it is); a UTF-8 byte-order
mark is read."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import pytest
from hostile_inputs import kineto_trace as trace

from aiprof.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from snapshots import block, entry, segment, snapshot  # noqa: E402


def cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def one_line(code: int, err: str, words: str) -> None:
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and words in err, err


def test_memory_markdown_leaves_no_mention_live(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frame = {"filename": "/home/u/@octocat/train.py", "line": 3, "name": "forward_by_@octocat"}
    doc = snapshot([segment(0x1000, [block(0x1000, 4096)])],
                   [entry("alloc", 0x1000, 4096, 10, frames=[frame])])
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(doc))
    out = tmp_path / "m.md"
    assert cli(capsys, "memory", path, "-o", out)[0] == 0
    text = out.read_text()
    assert "octocat" in text and "@octocat" not in text and "@&#8203;octocat" in text


def test_compare_names_the_file_the_user_gave(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "before.json"
    assert cli(capsys, "analyze", trace(tmp_path / "t.json"), "-o", report)[0] == 0
    doc = json.loads(report.read_text())
    doc["summary"]["median_step_ns"] = 0
    doc["sources"] = ["/somewhere/else/inside.json"]
    report.write_text(json.dumps(doc))
    code, err = cli(capsys, "compare", report, tmp_path / "t.json")
    one_line(code, err, f"BEFORE ({report})")
    assert "/somewhere/else" not in err


def test_export_of_a_trace_with_a_list_for_a_pid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = trace(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    doc["traceEvents"].append({"ph": "i", "name": "odd", "pid": [1], "tid": 1, "ts": 5, "s": "t"})
    path.write_text(json.dumps(doc))
    code, err = cli(capsys, "export", path, "-o", tmp_path / "merged.json")
    assert code == 0, err
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert all(isinstance(e.get("pid", 0), int) for e in merged["traceEvents"])


def test_a_fifo_a_link_loop_and_a_bom_say_what_they_are(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    one_line(*cli(capsys, "analyze", fifo), "not a regular file or folder")
    loop = tmp_path / "loop.json"
    loop.symlink_to(tmp_path / "loop2.json")
    (tmp_path / "loop2.json").symlink_to(loop)
    one_line(*cli(capsys, "analyze", loop), "loop of links")
    bom = tmp_path / "bom.json"  # read as the file without it (tests/hostile/test_hostile_encodings.py)
    bom.write_bytes(b"\xef\xbb\xbf" + trace(tmp_path / "t.json").read_bytes())
    assert cli(capsys, "analyze", bom)[0] == 0
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes((tmp_path / "t.json").read_text().encode("utf-16"))
    one_line(*cli(capsys, "analyze", utf16), "UTF-16 text (its byte-order mark); save the file as UTF-8")
