"""The typed report: the checked-in schema is the one the types generate, reports written by an older
aiprof read back (defaults for newer fields), `compare` validates a JSON report and refuses anything
else in one line, and ``build_document`` takes findings in every form they travel in."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from typed_builders import rank, report

from aiprof.errors import AiprofError
from aiprof.report.compare import compare_reports, load_report
from aiprof.report.model import Report
from aiprof.report.render import FORMATS, render
from aiprof.report.schema import schema_text
from aiprof.rules.finding import Finding, FindingRecord, as_record

FIXTURES = Path(__file__).parent / "fixtures"
OLD_REPORTS = sorted(FIXTURES.glob("report-1.0-*.json"))


def aiprof(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, timeout=180)


def test_checked_in_schema_is_generated_from_the_types() -> None:
    """Regenerate with: python -m aiprof.report.schema > src/aiprof/data/report.schema.json"""
    checked_in = resources.files("aiprof").joinpath("data/report.schema.json").read_text(encoding="utf-8")
    assert checked_in == schema_text()


@pytest.mark.parametrize("path", OLD_REPORTS, ids=lambda p: p.name)
def test_a_report_written_before_the_types_reads_back_unchanged(path: Path) -> None:
    doc = load_report(path)
    original = json.loads(path.read_text(encoding="utf-8"))
    assert json.loads(render(doc, "json")) == original  # same keys, same values
    jsonschema.validate(original, json.loads(schema_text()))
    for fmt in FORMATS:
        assert render(doc, fmt).strip()


def test_a_report_older_still_gets_defaults_for_newer_fields(tmp_path: Path) -> None:
    """Before partial runs were reported: no summary.partial*, no incomplete_steps, coverage or step_source."""
    data: dict[str, Any] = json.loads(OLD_REPORTS[0].read_text(encoding="utf-8"))
    for key in ("partial", "incomplete_step_count", "partial_note", "step_source"):
        data["summary"].pop(key)
    for r in data["ranks"]:
        for key in ("incomplete_steps", "coverage", "step_source", "roofline"):
            r.pop(key)
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data), encoding="utf-8")
    doc = load_report(older)
    assert doc.summary.partial is False and doc.summary.partial_note is None and doc.summary.step_source == "ProfilerStep"
    assert doc.ranks[0].incomplete_steps == [] and doc.ranks[0].coverage.partial is False
    assert "roofline" not in json.loads(render(doc, "json"))["ranks"][0]  # an absent section stays absent
    assert compare_reports(doc, doc).verdict.result == "unchanged"


def _one_line_error(path: Path) -> str:
    with pytest.raises(AiprofError) as err:
        load_report(path)
    message = str(err.value)
    assert "\n" not in message and len(message) < 500
    return message


@pytest.mark.parametrize(
    "content",
    [
        b'{"schema_version": "1.0"}',  # no summary / ranks
        b'{"schema_version": "1.0", "generator": "x", "sources": [], "summary": {}, "ranks": [], "findings": [], "warnings": []}',
        b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}]}',  # a Kineto trace
        b"[1, 2, 3]",
        b'{"schema_version": 1}',
        b'{"schema_version": "1.0", "summary": ',  # cut off
        b"\xff\xfe not json",
        b"[" * 100_000 + b"]" * 100_000,  # nested deeper than any decoder allows
    ],
)
def test_a_foreign_or_broken_json_is_a_one_line_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content)
    assert "not" in _one_line_error(path)


def test_a_report_with_a_wrong_field_names_it(tmp_path: Path) -> None:
    data = json.loads(OLD_REPORTS[0].read_text(encoding="utf-8"))
    data["findings"] = [{"id": "x", "title": "t", "severity": "urgent"}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert "findings[0]" in _one_line_error(path)
    data["findings"] = []
    data["schema_version"] = "2.0"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert "newer" in _one_line_error(path)


def test_compare_cli_refuses_a_foreign_json_report(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"schema_version": "1.0", "hello": "world"}', encoding="utf-8")
    run = aiprof("compare", foreign, OLD_REPORTS[0])
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "not an aiprof report" in run.stderr
    ok = aiprof("compare", OLD_REPORTS[0], OLD_REPORTS[0], "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"]["result"] == "unchanged"


def _finding(**changes: Any) -> Finding:
    base: dict[str, Any] = dict(id="host_bound", title="Host-bound", severity="high", est_saving_ns_per_step=1000,
                                share_of_step=0.25, saving_kind="estimate", saving_formula="f", confidence="medium",
                                evidence={"ns": 1}, fix="fix it")
    return Finding(**(base | changes))


def test_findings_in_every_form_become_the_same_record() -> None:
    f = _finding()
    forms: list[Finding | FindingRecord | dict[str, Any]] = [f, f.to_dict(), f.to_record(), json.loads(json.dumps(f.to_dict()))]
    records = [as_record(x) for x in forms]
    assert all(r == records[0] for r in records)
    assert msgspec.to_builtins(records[0]) == f.to_dict()  # the record is the dict form, key for key
    assert records[0].docs == "docs/findings.md#host_bound"


def test_a_zero_saving_finding_read_back_is_capped_at_low() -> None:
    data = _finding().to_dict() | {"est_saving_ns_per_step": 0, "severity": "high"}
    assert as_record(data).severity == "low"


def test_build_document_accepts_findings_as_objects_and_dicts(tmp_path: Path) -> None:
    from kineto_builder import TraceBuilder

    from aiprof.analysis.run import analyze_paths
    from aiprof.report.document import build_document

    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    op = b.cpu_op("aten::mm", ts=1, dur=10)
    b.launch(op, kernel="gemm", kernel_ts=5, kernel_dur=50)
    run = analyze_paths([str(b.write(tmp_path / "t.json"))], workers=1)
    f = _finding()
    doc = build_document(run, [f, f.to_dict() | {"id": "other"}])
    assert isinstance(doc, Report) and [x.id for x in doc.findings] == ["host_bound", "other"]
    with pytest.raises(AiprofError, match="finding"):
        build_document(run, [{"id": "x"}])


def test_typed_builders_make_valid_reports() -> None:
    doc = report([rank(0), rank(1)])
    jsonschema.validate(json.loads(render(doc, "json")), json.loads(schema_text()))
