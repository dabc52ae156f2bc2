"""``aiprof whatif``: the printed prediction, the JSON it writes, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiprof.cli import main
from test_whatif_edits import loader_builder


def _trace(tmp_path: Path) -> Path:
    """test_whatif_edits.py's loader trace: a 100 µs step, 60 µs once the 40 µs DataLoader wait is gone."""
    return loader_builder().write(tmp_path / "t.json")


def test_whatif_prints_and_writes_the_prediction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    assert main(["whatif", str(_trace(tmp_path)), "--remove", "data_loading", "--scale-host", "0.5",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "measured median step 0.10 ms" in text
    assert "remove data_loading" in text and "scale host x0.5" in text and "all together" in text
    doc = json.loads(out.read_text())
    assert doc["baseline_median_step_ns"] == 100_000
    assert [e["predicted_median_step_ns"] for e in doc["edits"]] == [60_000, 82_000]
    assert doc["combined"]["predicted_median_step_ns"] == 42_000
    assert doc["edits"][0]["predicted_saving_ns"] == 40_000 and doc["edits"][0]["predicted_saving_share"] == 0.4
    assert sum(doc["critical_path"]["breakdown_ns"].values()) == doc["critical_path"]["length_ns"]


@pytest.mark.parametrize("argv, message", [
    (["--scale-host", "nan"], "--scale-host"),
    (["--scale-host", "-1"], "--scale-host"),
    (["--kernels", "gemm"], "--kernels needs --scale-kernels"),
    (["--scale-kernels", "0.5", "--kernels", "nothing_like_this"], "matches no kernel"),
    (["--remove", "everything"], "--remove"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], message: str) -> None:
    assert main(["whatif", str(_trace(tmp_path)), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_a_missing_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope.json" in err and len(err.splitlines()) == 1
