"""Reports: every string from the input escaped for its target; the CLI verb; binary units."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from snapshots import block, entry, segment, snapshot

from aiprof.cli import main
from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.render import render_html, render_markdown, render_terminal
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
