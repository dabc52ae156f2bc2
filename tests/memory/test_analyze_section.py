"""`aiprof analyze` on a real CPU torch run recorded with ``profile_memory=True``: the report has a memory
section in every format, its peak is the profiler's own, and the JSON decodes (marked torch: imports torch)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from aiprof.cli import main
from aiprof.memory.report import MemoryReport
from aiprof.memory.units import binary
from aiprof.report.compare import load_report

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def activation_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    import workloads

    return workloads.record(tmp_path_factory.mktemp("act") / "trace.json", "activation", steps=3)


def _profiler_peak(path: Path) -> int:
    raw = json.loads(path.read_bytes() if path.suffix != ".gz" else gzip.decompress(path.read_bytes()))
    return max(e["args"]["Total Allocated"] for e in raw["traceEvents"] if e.get("name") == "[memory]")


def test_analyze_has_a_memory_section_in_every_format(activation_trace: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = {fmt: tmp_path / f"r.{ext}" for fmt, ext in (("json", "json"), ("md", "md"), ("html", "html"))}
    for path in out.values():
        assert main(["analyze", str(activation_trace), "--memory", "-o", str(path)]) == 0
    assert main(["analyze", str(activation_trace), "--memory"]) == 0
    text = capsys.readouterr().out
    report = load_report(out["json"])
    mem = report.ranks[0].memory
    assert isinstance(mem, MemoryReport) and report.schema_version == "1.1"
    cpu = next(d for d in mem.devices if d.device == "cpu")
    # to the byte; torch's CPU counter also holds what earlier profiler sessions of this pytest process
    # left in it (carried_over_bytes: not memory of this trace, docs/memory.md)
    assert cpu.peak_allocated_bytes == _profiler_peak(activation_trace) - cpu.carried_over_bytes
    assert [c.category for c in cpu.live_at_peak_by_category][0] == "activation"
    peak = binary(cpu.peak_allocated_bytes)
    assert f"peak allocated {peak}" in text and "at the peak: activation" in text
    assert "top memory finding: mem_activation_dominant" in text
    assert "### Memory" in out["md"].read_text() and f"| cpu | {peak}" in out["md"].read_text()
    page = out["html"].read_text()
    assert '<section id="memory">' in page and "<polygon" in page and "live at the peak" in page
    ids = [f.id for f in report.findings]
    assert "mem_activation_dominant" in ids
    savings = [f.est_saving_ns_per_step for f in report.findings]
    assert savings == sorted(savings, key=lambda s: s <= 0)  # no zero-saving finding above one that saves time


def test_memory_verb_goes_through_the_app(activation_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    assert main(["memory", str(activation_trace), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    dev = doc["memory"]["devices"][0]
    assert dev["peak_allocated_bytes"] == _profiler_peak(activation_trace) - dev.get("carried_over_bytes", 0)
