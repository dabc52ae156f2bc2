"""A run directory with aiprof's meta.json but no trace (the run crashed, was killed, never reached its
recorded steps, or is still going): every verb that reads traces says what is missing and what to do, in
one line, exit 2, from what meta.json says; a folder without aiprof's meta.json keeps the plain message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiprof.cli import main

RUN = {"format": "aiprof-run", "format_version": 1, "command": ["python", "train.py", "--lr", "3e-4"]}
CASES: list[tuple[dict[str, Any], str]] = [
    ({"status": "running"}, 'the run never finished (meta.json still says "running")'),
    ({"status": "incomplete", "finished_unix_ns": 1, "exit_code": 137, "exit_signal": "SIGKILL",
      "ranks": [{"rank": 0, "pid": 7, "steps_seen": 4}]},
     "the script was killed by SIGKILL after 4 step(s), before the schedule recorded any; no trace was written"),
    ({"status": "incomplete", "finished_unix_ns": 1, "exit_code": 1},
     "the script exited with status 1 before any process imported torch"),
    ({"status": "incomplete", "finished_unix_ns": 1, "ranks": [{"rank": 0, "pid": 7, "steps_seen": 3}],
      "schedule_text": "records steps 6-10 (at least 11 steps)"},
     "no steps recorded: the script ran 3 step(s) but the schedule records steps 6-10 (at least 11 steps); "
     "lower --wait/--warmup or run more steps"),
    ({"status": "incomplete", "finished_unix_ns": 1, "ranks": [{"rank": 0, "pid": 7, "steps_seen": 0}]},
     "no steps detected"),
]


def _one_line_error(capsys: pytest.CaptureFixture[str], code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("meta,why", CASES)
@pytest.mark.parametrize("verb", ["analyze", "roofline", "memory"])
def test_an_empty_run_directory_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str,
                                         meta: dict[str, Any], why: str) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({**RUN, **meta}))
    err = _one_line_error(capsys, main([verb, str(tmp_path)]))
    assert f"the aiprof run directory of `python train.py --lr 3e-4` has meta.json but no trace: {why}" in err


def test_compare_names_the_empty_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({**RUN, "status": "running"}))
    err = _one_line_error(capsys, main(["compare", str(tmp_path), str(tmp_path)]))
    assert "has meta.json but no trace: the run never finished" in err


@pytest.mark.parametrize("content", [None, '{"format": "something-else"}', "{cut mid-wri"])
def test_a_folder_without_aiprofs_meta_keeps_the_plain_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              content: str | None) -> None:
    if content is not None:
        (tmp_path / "meta.json").write_text(content)
    err = _one_line_error(capsys, main(["analyze", str(tmp_path)]))
    assert "no trace files (*.json, *.json.gz, *.sqlite) in this folder" in err and "meta.json but" not in err
