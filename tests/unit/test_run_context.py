"""The run directory found once, at the root (#28 step 3): an analysis reads each folder's ``meta.json``
once (:class:`aiprof.rundir.RunContext`), hands the decoded :class:`~aiprof.rundir.RunDir` to the ranks
(``RankAnalysis.run_dir``: the hook's run inputs) and the run (``RunAnalysis.run_dir``), and building the
report reads no ``meta.json``; a corrupt one is still a one-line note, never an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kineto_builder import TraceBuilder

from aiprof import rundir
from aiprof.cli import main
from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.document import build_document
from aiprof.runmeta import HostInfo

META = {"format": "aiprof-run", "format_version": 1, "mode": "run", "status": "complete",
        "command": ["python", "train.py"], "host": {"cores_logical": 4}}


def _run_dir(tmp: Path, meta: dict[str, Any] | bytes, ranks: int = 2) -> Path:
    """A run directory of ``ranks`` small GPU traces (three steps each) and its meta.json."""
    run = tmp / "run"
    run.mkdir()
    for rank in range(ranks):
        b = TraceBuilder()
        b.header["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": ranks}
        for i in range(3):
            b.step(i, ts=i * 1000, dur=1000)
            op = b.cpu_op("aten::mm", ts=i * 1000 + 10, dur=100)
            b.launch(op, kernel_ts=i * 1000 + 50, kernel_dur=400)
        b.write(run / f"rank{rank}.pt.trace.json")
    (run / "meta.json").write_bytes(meta if isinstance(meta, bytes) else json.dumps(meta).encode())
    return run


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every meta.json this process decodes (``rundir.read_run_meta``), in order."""
    seen: list[Path] = []
    original = rundir.read_run_meta

    def counting(path: Path) -> Any:
        seen.append(path)
        return original(path)

    monkeypatch.setattr(rundir, "read_run_meta", counting)
    return seen


def test_each_folder_is_read_once(tmp_path: Path, reads: list[Path]) -> None:
    run = _run_dir(tmp_path, META)
    traces = sorted(run.glob("*.json"))
    context = rundir.RunContext.find(traces + traces)
    assert len(reads) == 1
    found = context.common(traces)
    assert found is not None and found.path == run.resolve() and found.meta.host == HostInfo(cores_logical=4)
    assert all(context.of(t) is found for t in traces) and len(reads) == 1
    assert context.of(tmp_path / "elsewhere.json") is None


def test_the_report_is_built_without_reading_meta_json(tmp_path: Path, reads: list[Path]) -> None:
    run = _run_dir(tmp_path, META)
    analysis, findings = analyze_and_diagnose([str(run)], workers=1)
    assert analysis.run_dir is not None and analysis.run_dir.path == run.resolve()
    assert [r.run_dir for r in analysis.ranks] == [analysis.run_dir] * 2  # the hook saw it
    before = len(reads)
    doc = build_document(analysis, findings)
    assert len(reads) == before  # no I/O for the run context while building the report
    assert doc.run_metadata is not None and doc.run_metadata.command == ["python", "train.py"]
    assert doc.run_status is not None


def test_a_corrupt_meta_json_is_a_one_line_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_dir(tmp_path, b"{cut mid-wri", ranks=1)
    analysis, findings = analyze_and_diagnose([str(run)], workers=1)
    assert analysis.run_dir is None and analysis.ranks[0].run_dir is None
    doc = build_document(analysis, findings)
    notes = [w for w in doc.warnings if "meta.json" in w]
    assert len(notes) == 1 and "not a JSON object (cut mid-write?): ignored" in notes[0] and "\n" not in notes[0]
    assert doc.run_metadata is None
    assert main(["analyze", "--format", "json", str(run)]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "not a JSON object" in out.out
