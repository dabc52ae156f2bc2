"""A partial run (a trace cut off mid-write, or steps without their device side) says so in every format,
and `compare` and `export` carry it through; a lone rank-34 file is rank 34; a CPU-only summary speaks of
the CPU."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from report_docs import document_for_paths, document_of, shared_path
from corpus.cases_numbers import busy_steps, write_cut_off
from test_renderers import schema

from aiprof.report.compare import compare_reports
from aiprof.report.model import Report
from aiprof.report.render import render


def aiprof(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, timeout=180)


@pytest.fixture
def cut_off(tmp_path: Path) -> Path:
    """6 steps, cut off mid-write after the device records of the first 4 (Kineto's order)."""
    return write_cut_off(busy_steps(loader_us=400), tmp_path / "cut.pt.trace.json.gz", at_step=4)


@pytest.fixture
def whole(tmp_path: Path) -> Path:
    return busy_steps(loader_us=400).write(tmp_path / "whole.pt.trace.json.gz")


def _doc(path: Path) -> Report:
    return document_for_paths((str(path),))


@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_every_format_says_the_run_is_partial(cut_off: Path, fmt: str) -> None:
    doc = _doc(cut_off)
    assert doc.summary.partial and doc.summary.incomplete_step_count == 2
    text = render(doc, fmt)
    if fmt == "json":
        data = json.loads(text)
        jsonschema.validate(data, schema())
        assert data["summary"]["partial_note"].startswith("Partial run: the trace is cut off mid-write")
        assert [s["name"] for s in data["ranks"][0]["incomplete_steps"]] == ["ProfilerStep#4", "ProfilerStep#5"]
        return
    assert "Partial run: the trace is cut off mid-write" in text
    assert "ProfilerStep#4" in text and "ProfilerStep#5" in text  # which steps were left out
    if fmt == "terminal":
        assert max(len(line) for line in text.splitlines()) <= 80
        head = text.splitlines()[:6]
        assert any("Partial run" in line for line in head)  # the summary, not only a note at the end
        # the salvage warning is both a rank note and a run warning: said once
        assert text.count("salvaged") == 1
    if fmt == "html":
        assert 'class="partial"' in text and "incomplete step" in text


def test_a_whole_run_is_not_partial(whole: Path) -> None:
    doc = _doc(whole)
    assert doc.summary.partial is False and doc.summary.partial_note is None
    for fmt in ("terminal", "md", "html"):
        assert "Partial run" not in render(doc, fmt)


def test_compare_carries_the_partial_warning(cut_off: Path, whole: Path) -> None:
    cmp = compare_reports(_doc(whole), _doc(cut_off))
    assert cmp.partial is True and cmp.after.partial is True and cmp.before.partial is False
    assert cmp.verdict.caveat is not None and cmp.verdict.caveat.startswith("AFTER is a partial trace")
    assert any(w.startswith("after: ") and "cut off mid-write" in w for w in cmp.warnings)
    # only the complete steps are compared: the same workload, so no change
    assert cmp.verdict.result == "unchanged"
    for fmt in ("terminal", "md", "html"):
        text = render(cmp, fmt)
        assert "AFTER is a partial trace" in text and "cut off mid-write" in text
    assert json.loads(render(cmp, "json"))["warnings"] == cmp.warnings


def test_compare_cli_warns_about_a_partial_input(cut_off: Path, whole: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    run = aiprof("compare", whole, cut_off, "-o", out)
    assert run.returncode == 0, run.stderr
    assert "warning: after:" in run.stderr and "cut off mid-write" in run.stderr
    assert json.loads(out.read_text())["verdict"]["caveat"]
    # a JSON report of the partial run carries it too
    report = tmp_path / "partial.json"
    assert aiprof("analyze", cut_off, "-o", report).returncode == 0
    again = aiprof("compare", report, whole, "--format", "md")
    assert again.returncode == 0 and "BEFORE is a partial trace" in again.stdout


def test_export_reads_the_truncated_file_and_marks_the_incomplete_steps(cut_off: Path, tmp_path: Path) -> None:
    out = tmp_path / "merged.json.gz"
    run = aiprof("export", cut_off, "-o", out)
    assert run.returncode == 0, run.stderr
    assert "cut off mid-write" in run.stderr
    merged = json.loads(gzip.decompress(out.read_bytes()))
    assert merged["aiprof"]["partial"] is True and "Partial run" in merged["aiprof"]["partial_note"]
    events = merged["traceEvents"]
    assert len([e for e in events if e.get("cat") == "aiprof"]) == 4
    incomplete = [e for e in events if e.get("cat") == "aiprof.incomplete"]
    assert [e["name"].split(" ")[0] for e in incomplete] == ["ProfilerStep#4", "ProfilerStep#5"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 16  # the 4 complete steps' GEMMs the salvage recovered
    assert merged["deviceProperties"]  # the header written before traceEvents survives


def test_single_rank_34_file(tmp_path: Path) -> None:
    path = shared_path("cpu_only")
    out = tmp_path / "r.json"
    run = aiprof("analyze", path, "--rank", "34", "-o", out)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert [(r["rank"], r["rank_source"]) for r in doc["ranks"]] == [(34, "distributedInfo")]
    assert doc["summary"]["slowest_rank"] == 34
    wrong = aiprof("analyze", path, "--rank", "0")
    assert wrong.returncode == 2 and "ranks present: 34" in wrong.stderr


def test_cpu_only_summary_has_no_device_words() -> None:
    doc = document_of("cpu_only")
    assert doc.summary.device_kind == "cpu"
    terminal = render(doc, "terminal")
    summary = terminal.split("Top ops")[0]
    for word in ("GPU", "memcpy", "memset", "kernel"):
        assert word not in summary, word
    assert "CPU busy" in summary
    md = render(doc, "md")
    assert "memcpy" not in md and "GPU" not in md
    html = render(doc, "html")
    steps = html.split('<section id="steps">')[1].split("</section>")[0]
    assert "memcpy" not in steps and "memset" not in steps
