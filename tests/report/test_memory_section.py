"""The memory section of `aiprof analyze` on synthetic traces (no torch): present only with memory data,
in every format, escaped for each sink; a run directory's allocator snapshot is read for its rank; memory
findings rank after the findings that save time; old 1.0 reports still decode; compare shows peak deltas."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest
from msgspec import UNSET

from aiprof import app
from aiprof.memory.report import MemoryReport
from aiprof.report.compare import load_report
from aiprof.report.model import SCHEMA_VERSION

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from kineto_builder import TraceBuilder  # noqa: E402
from snapshots import block, entry, segment, snapshot  # noqa: E402

EVIL = "<script>alert(1)</script>|[x](http://e)\x1b[31m\u202e"
MiB = 1 << 20
FIXTURES = Path(__file__).parent / "fixtures"

ALL = app.AnalyzeOptions(memory="all")  # a trace's [memory] events make the section only when asked (--memory)


def _memory_trace(path: Path, *, op: str = "aiten::mm", batch_mib: int = 4, steps: int = 3) -> Path:
    """CPU steps, each allocating ``batch_mib`` MiB inside ``op`` and freeing it at the step's end, after
    1 MiB allocated before the profiler started (freed in the first step)."""
    b = TraceBuilder(devices=0)
    total = 1 * MiB
    addr = 0x7000_0000
    b.memory(1.0, -MiB, total_allocated=0, total_reserved=0, addr=0x6000_0000)  # allocated before recording
    total = 0
    for i in range(steps):
        t0 = 10.0 + 100.0 * i
        b.step(i, t0, 90.0)
        b.cpu_op(op, t0 + 5, 40.0)
        total += batch_mib * MiB
        b.memory(t0 + 10, batch_mib * MiB, total_allocated=total, total_reserved=total, addr=addr + i * 0x100_0000)
        b.cpu_op("aten::add", t0 + 50, 30.0)
        total -= batch_mib * MiB
        b.memory(t0 + 60, -batch_mib * MiB, total_allocated=total, total_reserved=total, addr=addr + i * 0x100_0000)
    return b.write(path)


def test_a_trace_without_memory_events_has_no_memory_section(tmp_path: Path) -> None:
    b = TraceBuilder(devices=0)
    b.step(0, 10.0, 90.0)
    b.cpu_op("aten::mm", 15.0, 40.0)
    report = app.analyze([b.write(tmp_path / "t.json")])
    assert report.ranks[0].memory is UNSET
    doc = json.loads(app.render(report, "json"))
    assert "memory" not in doc["ranks"][0]
    for fmt in ("terminal", "md", "html"):
        assert "Memory" not in app.render(report, fmt)


def test_memory_section_in_every_format_and_the_json_decodes(tmp_path: Path) -> None:
    path = _memory_trace(tmp_path / "m.json")
    report = app.analyze([path], ALL)
    mem = report.ranks[0].memory
    assert isinstance(mem, MemoryReport) and report.schema_version == SCHEMA_VERSION == "1.1"
    peak = mem.devices[0].peak_allocated_bytes
    assert peak == 4 * MiB  # the profiler's own Total Allocated maximum
    out = tmp_path / "r.json"
    app.write(report, out, "json")
    back = load_report(out)
    assert isinstance(back.ranks[0].memory, MemoryReport)
    assert back.ranks[0].memory.devices[0].peak_allocated_bytes == peak
    text = app.render(report, "terminal")
    assert "Memory (kineto" in text and "peak allocated 4.00 MiB" in text
    md = app.render(report, "md")
    assert "### Memory" in md and "| cpu | 4.00 MiB" in md
    page = app.render(report, "html")
    assert '<section id="memory">' in page and "<svg" in page and "<polygon" in page


def test_hostile_site_names_are_escaped_in_every_format(tmp_path: Path) -> None:
    report = app.analyze([_memory_trace(tmp_path / "m.json", op=EVIL)], ALL)
    mem = report.ranks[0].memory
    assert isinstance(mem, MemoryReport)
    assert any(EVIL in s.site for s in mem.devices[0].live_at_peak_by_site)
    text = app.render(report, "terminal")
    memory_part = text[text.index("Memory ("):]
    assert "\x1b" not in memory_part and "\u202e" not in memory_part and "␛[31m" in memory_part
    md = app.render(report, "md")
    row = next(line for line in md.splitlines() if line.startswith("| cpu |"))
    assert row.count("|") - row.count("\\|") == 7  # six cells: the site's pipe is escaped
    assert "<script>" not in md and "\\[x\\]" in row
    page = app.render(report, "html")
    section = page[page.index('<section id="memory">'):]
    section = section[: section.index("</section>")]
    assert "<script" not in section and "&lt;script&gt;" in section and "\x1b" not in section


def test_run_directory_snapshot_of_the_rank_is_the_memory_input(tmp_path: Path) -> None:
    run = tmp_path / "run"
    b = TraceBuilder(devices=0)
    b.step(0, 10.0, 90.0)
    b.cpu_op("aten::mm", 15.0, 40.0)
    b.write(run / "traces" / "rank0.pt.trace.json")
    (run / "meta.json").write_text('{"format": "aiprof-run"}')
    snap = snapshot([segment(4096, [block(4096, 2 * MiB), block(4096 + 2 * MiB, MiB, "inactive")])],
                    [entry("alloc", 4096, 2 * MiB, 1)])
    (run / "memory").mkdir()
    (run / "memory" / "snapshot.rank0.pickle").write_bytes(pickle.dumps(snap))
    report = app.analyze([run / "traces" / "rank0.pt.trace.json"])
    mem = report.ranks[0].memory
    assert isinstance(mem, MemoryReport) and mem.source == "snapshot"
    dev = mem.devices[0]
    assert dev.peak_allocated_bytes == 2 * MiB and dev.peak_reserved_bytes == 3 * MiB
    assert "peak reserved 3.00 MiB" in app.render(report, "terminal")


def test_a_broken_snapshot_is_a_note_not_a_failed_analysis(tmp_path: Path) -> None:
    run = tmp_path / "run"
    b = TraceBuilder(devices=0)
    b.step(0, 10.0, 90.0)
    b.write(run / "rank0.pt.trace.json")
    (run / "meta.json").write_text('{"format": "aiprof-run"}')
    (run / "memory").mkdir()
    (run / "memory" / "snapshot.rank0.pickle").write_bytes(b"\x80\x04not a pickle")
    report = app.analyze([run / "rank0.pt.trace.json"])
    assert report.ranks[0].memory is UNSET
    assert any(n.startswith("memory section left out:") for n in report.ranks[0].notes)


def test_memory_findings_rank_after_findings_that_save_time(tmp_path: Path) -> None:
    from aiprof.rules.finding import Finding

    report = app.analyze([_memory_trace(tmp_path / "m.json")], ALL)
    assert report.findings  # the run has findings: time ones and, where the rules apply, memory ones
    savings = [f.est_saving_ns_per_step for f in report.findings]
    first_zero = next((i for i, s in enumerate(savings) if s <= 0), len(savings))
    assert all(s <= 0 for s in savings[first_zero:])
    # memory findings (0 ns, their bytes in the evidence) come after every other finding, even an info
    # note that saves nothing; a leak first whatever its bytes (checkpointing cannot free it), then the
    # largest saving in bytes
    from aiprof.pipeline import memory_last
    from aiprof.rules.memory_findings import finding
    from aiprof.rules.registry import rank_findings

    mem = report.ranks[0].memory
    assert isinstance(mem, MemoryReport)
    small = finding("mem_leak", "grows", mem.devices[0], MiB, {}, "fix", "formula", severity="medium")
    big = finding("mem_activation_dominant", "acts", mem.devices[0], 10 * MiB, {}, "fix", "formula")
    time = Finding(id="host_bound", title="host", severity="low", est_saving_ns_per_step=1000, share_of_step=0.01,
                   saving_kind="estimate", saving_formula="", confidence="low", evidence={}, fix="fix")
    note = Finding(id="cold_start", title="cold", severity="info", est_saving_ns_per_step=0, share_of_step=0.0,
                   saving_kind="estimate", saving_formula="", confidence="low", evidence={}, fix="")
    for order in ([small, big, note, time], [time, note, big, small]):
        ranked = [f.id for f in memory_last(rank_findings(order))]
        assert ranked == ["host_bound", "cold_start", "mem_leak", "mem_activation_dominant"]
    bigger = finding("mem_optimizer_dominant", "opt", mem.devices[0], 20 * MiB, {}, "fix", "formula")
    assert [f.id for f in memory_last([big, bigger])] == ["mem_optimizer_dominant", "mem_activation_dominant"]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("report-1.0-*.json")), ids=lambda p: p.name)
def test_an_old_report_decodes_without_a_memory_section(path: Path) -> None:
    report = load_report(path)
    assert report.schema_version == "1.0" and all(r.memory is UNSET for r in report.ranks)
    assert "Memory" not in app.render(report, "terminal")


def test_compare_shows_memory_peak_deltas(tmp_path: Path) -> None:
    before = app.analyze([_memory_trace(tmp_path / "a.json", batch_mib=4)], ALL)
    after = app.analyze([_memory_trace(tmp_path / "b.json", batch_mib=2)], ALL)
    cmp = app.compare(before, after)
    assert cmp.memory is not None
    peak = cmp.memory.peaks[0]
    assert (peak.device, peak.peak_allocated_bytes.before, peak.peak_allocated_bytes.after) == ("cpu", 4 * MiB, 2 * MiB)
    assert peak.peak_allocated_bytes.delta == -2 * MiB and peak.peak_allocated_bytes.delta_pct == -50.0
    text = app.render(cmp, "terminal")
    assert "peak allocated    4.00 MiB →   2.00 MiB  −2.00 MiB (-50.0%)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "### Memory" in app.render(cmp, "md") and '<section id="memory">' in app.render(cmp, "html")
    assert json.loads(app.render(cmp, "json"))["memory"]["peaks"][0]["peak_allocated_bytes"]["after"] == 2 * MiB
    # a side without memory data: no memory part
    plain = TraceBuilder(devices=0)
    plain.step(0, 10.0, 90.0)
    plain.cpu_op("aten::mm", 15.0, 40.0)
    assert app.compare(before, app.analyze([plain.write(tmp_path / "p.json")])).memory is None


def test_no_memory_leaves_the_section_and_its_findings_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aiprof.cli import main

    path = _memory_trace(tmp_path / "m.json")
    report = app.analyze([path], app.AnalyzeOptions(memory="off"))
    assert report.ranks[0].memory is UNSET and not [f for f in report.findings if f.id.startswith("mem_")]
    out = tmp_path / "r.json"
    assert main(["analyze", str(path), "--no-memory", "-o", str(out)]) == 0
    assert "memory" not in json.loads(out.read_text())["ranks"][0]
    assert main(["analyze", str(path), "--memory"]) == 0 and "Memory (kineto" in capsys.readouterr().out
    # a trace with [memory] events gets the memory section by default (a leak is found only from them)
    assert main(["analyze", str(path)]) == 0 and "Memory (kineto" in capsys.readouterr().out
    assert main(["analyze", str(path), "--no-memory"]) == 0 and "Memory (kineto" not in capsys.readouterr().out
