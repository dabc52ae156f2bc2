"""Reports: every string from the input escaped for its target; the CLI verb; binary units."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from snapshots import block, entry, segment, snapshot

from aiprof.cli import main
from aiprof.memory import analyze_memory, load_memory
from aiprof.report.memory_render import render_html, render_markdown, render_terminal
from aiprof.memory.units import binary

EVIL = "<script>alert(1)</script>|[x](http://e)\x1b[31m\u202e"


@pytest.fixture()
def evil_snapshot(tmp_path: Path) -> Path:
    frames = [{"filename": f"/home/{EVIL}/train.py", "line": 3, "name": EVIL}]
    trace = [entry("alloc", 4096, 1 << 20, 1, frames), entry("alloc", 4096 + (1 << 20), 2 << 20, 2, frames),
             entry("free_requested", 4096, 1 << 20, 3, frames)]
    snap = snapshot([segment(4096, [block(4096, 1 << 20, "inactive"), block(4096 + (1 << 20), 2 << 20)])], trace)
    snap["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] = EVIL
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    return path


def test_html_escapes_and_is_offline(evil_snapshot: Path) -> None:
    report = analyze_memory(load_memory(evil_snapshot))
    page = render_html(report, [])
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "\x1b" not in page and "\u202e" not in page
    assert "http://e" in page  # only as escaped text, never a resource
    assert "src=" not in page and "href=" not in page and "<svg" in page and "<polygon" in page


def test_terminal_strips_control_characters(evil_snapshot: Path) -> None:
    text = render_terminal(analyze_memory(load_memory(evil_snapshot)), [])
    assert "\x1b" not in text and "\u202e" not in text
    assert "GiB" in text or "MiB" in text


def test_markdown_escapes_table_syntax(evil_snapshot: Path) -> None:
    text = render_markdown(analyze_memory(load_memory(evil_snapshot)), [])
    row = next(line for line in text.splitlines() if "train.py" in line)
    assert row.count("|") - row.count("\\|") == 4  # a three-column row, the site's pipes escaped
    assert "\\[x\\]" in row and "<script>" not in text


def test_binary_units() -> None:
    assert binary(1536) == "1.50 KiB"
    assert binary(13 << 30) == "13.00 GiB"
    assert binary(100) == "100 B"


def test_cli_json_and_html(evil_snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", str(evil_snapshot), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory"]["devices"][0]["peak_allocated_bytes"] == 3 << 20
    out = tmp_path / "m.html"
    assert main(["memory", str(evil_snapshot), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04not really")
    assert main(["memory", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aiprof: error:") and err.count("\n") == 1
    assert main(["memory", str(tmp_path / "missing.pickle")]) == 2
    assert main(["memory", str(bad), "--device-memory-gib", "-1"]) == 2


def test_cli_shared_snapshot_with_device_memory(traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = traces_dir / "memory" / "transformer_lm_snapshot.pickle"
    assert main(["memory", str(snap), "--device-memory-gib", "14", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ids = {f["id"] for f in doc["findings"]}
    assert {"mem_near_capacity", "mem_activation_dominant"} <= ids
    assert "mem_underused" not in ids


def _cpu_trace(path: Path, carried: int) -> Path:
    """Four CPU steps, each keeping 1 KiB (a leak) and freeing a 512 B temporary; the profiler's counter
    starts at ``carried`` bytes that the trace never frees (a later CPU profiler session)."""
    events: list[dict[str, object]] = []
    total = carried

    def mem(ts: float, nbytes: int, addr: int) -> None:
        nonlocal total
        total += nbytes
        events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
                       "ts": ts, "args": {"Bytes": nbytes, "Addr": addr, "Device Type": 0, "Device Id": -1,
                                          "Total Allocated": total, "Total Reserved": 0}})

    for k in range(4):
        t0 = 100.0 * k
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": 90.0})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 1, "dur": 80.0})
        mem(t0 + 10, 1024, 1000 + k)
        mem(t0 + 20, 512, 9000)
        mem(t0 + 30, -512, 9000)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_reports_label_totals_per_step_and_what_bytes_are_freed(tmp_path: Path) -> None:
    from aiprof.rules.registry import memory_findings

    report = analyze_memory(load_memory(_cpu_trace(tmp_path / "t.json", carried=3 << 20)))
    (dev,) = report.devices
    assert dev.carried_over_bytes == 3 << 20 and dev.peak_allocated_bytes == 4 * 1024 + 512
    findings = memory_findings(report)
    leak = next(f for f in findings if f.id == "mem_leak")
    assert leak.evidence["saving_scope"]
    text = render_terminal(report, findings)
    assert f"left out: CPU counter carried over  {binary(3 << 20)}" in text
    assert "allocations, whole recording" in text and "in all)" in text
    assert "segment allocs" not in text  # Kineto has no segment events: no "0 / 0" row
    assert "per step:" in text and "bytes allocated" in text
    assert f"frees ≈ {binary(leak.evidence['est_saving_bytes'])} {leak.evidence['saving_scope']}" in text
    md_text = render_markdown(report, findings)
    assert "### Per step" in md_text and "| bytes allocated |" in md_text and "frees ≈" in md_text
    page = render_html(report, findings)
    assert "Per step" in page and "0 ms" in page and "whole recording" in page


def test_analyze_memory_section_shows_the_carried_over_bytes(tmp_path: Path) -> None:
    from aiprof import app

    report = app.analyze([_cpu_trace(tmp_path / "t.json", carried=3 << 20)], app.AnalyzeOptions(memory="all"))
    text = " ".join(app.render(report, "terminal").split())  # the terminal wraps long lines
    assert f"left out: {binary(3 << 20)} carried over" in text and "earlier profiler sessions" in text
    assert "frees ≈" in text and "of the peak (more with every step)" in text
    assert f"warning: {tmp_path}" not in text  # the report names the input once
    assert "left out" in app.render(report, "html") and "earlier profiler sessions" in app.render(report, "md")
