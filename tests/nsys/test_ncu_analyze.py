"""``aiprof analyze TRACE --ncu REPORT``: Nsight Compute's measured per-kernel points in the analyze report's
roofline section (JSON and HTML), marked measured (ncu) beside the ops estimated from shapes, matched to
the timeline as ``aiprof roofline --ncu`` matches them."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_ncu import RAW, _Action

import aiprof
from aiprof import app
from aiprof.errors import AiprofError
from aiprof.trace.readers.ncu import match_kernels, read_csv

BENCH = Path(__file__).resolve().parents[2] / "bench"
M, K, N = 64, 32, 16  # the shapes of the aten::mm ranges below


def timeline(tmp_path: Path, ops: bool) -> Path:
    """A synthetic Nsight Systems report of 40 kernels (3 names, grid 120, block 256), each launched by one
    cudaLaunchKernel; with ``ops``, an autograd-nvtx ``aten::mm`` range around every launch."""
    sys.path.insert(0, str(BENCH))
    try:
        import nsys_import
    finally:
        sys.path.remove(str(BENCH))
    path = tmp_path / "timeline.sqlite"
    nsys_import.build(path, 40, kernel_names=3)
    if ops:
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                    "text TEXT, globalTid INTEGER, textId INTEGER)")
        launches = [r[0] for r in con.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start")]
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, NULL)", [
            (t - 100, t + 1_600, f"aten::mm, seq = {i}, op_id = {i + 1}, sizes = [[{M}, {K}], [{K}, {N}]]",
             nsys_import.GLOBAL_TID) for i, t in enumerate(launches)])
        con.commit()
        con.close()
    sys.modules.pop("nsys_import", None)
    return path


def analyze(path: Path, tmp_path: Path, *extra: str, name: str = "report.json") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(path), "-o", str(tmp_path / name), *extra],
                          capture_output=True, text=True, timeout=300)


def test_analyze_puts_measured_points_in_the_roofline_section(tmp_path: Path) -> None:
    trace_path = timeline(tmp_path, ops=True)
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(RAW)
    done = analyze(trace_path, tmp_path, "--ncu", str(csv_path))
    assert done.returncode == 0, done.stderr
    roof = json.loads((tmp_path / "report.json").read_text())["ranks"][0]["roofline"]
    measured = roof["measured"]
    results = read_csv(csv_path)
    trace = aiprof.load(trace_path)
    rows = match_kernels(trace, results)  # type: ignore[arg-type]
    assert [m["kernel"] for m in measured] == [r.kernel for r in results]
    assert [m["row"] for m in measured] == rows and all(r >= 0 for r in rows)
    # measured (ncu): straight from the counters of RAW
    assert measured[0]["duration_ns"] == 2000 and measured[0]["dram_bytes"] == 1_500_000
    assert measured[0]["flops"] == 10 + 20 + 2 * 1000
    assert measured[0]["achieved_flops_per_s"] == pytest.approx(2030 / 2000e-9)
    # estimated from shapes: the launching aten::mm, 2·M·N·K FLOPs
    assert all(m["op"] == "aten::mm" for m in measured)
    assert all(m["est_flops"] == 2 * M * N * K for m in measured)
    assert roof["basis"] == {"rows": "estimated from shapes", "measured": "measured (ncu)"}
    assert roof["measured_source"] == "Nsight Compute (raw.csv)"
    assert any(r["name"] == "aten::mm" for r in roof["rows"])  # the estimates are still there

    done = analyze(trace_path, tmp_path, "--ncu", str(csv_path), name="report.html")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "report.html").read_text()
    assert "measured (ncu)" in html and "estimated from shapes" in html
    assert "3 of 3 matched to the timeline" in html and "kernel_2(float*, int)" in html


def test_the_same_points_as_the_roofline_verb(tmp_path: Path) -> None:
    trace_path = timeline(tmp_path, ops=False)
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(RAW)
    report = app.analyze([trace_path], app.AnalyzeOptions(workers=1, ncu=csv_path))
    _, points = app.roofline_measured(trace_path, app.RooflineOptions(ncu=csv_path))
    assert points is not None
    roof = msgspec.to_builtins(report.ranks[0].roofline)
    assert isinstance(roof, dict)
    assert roof["measured"] == [p.to_dict() for p in points]
    assert all(m["op"] is None for m in roof["measured"])  # a CUDA program: no op, no estimate
    without = app.analyze([trace_path], app.AnalyzeOptions(workers=1))
    assert "measured" not in msgspec.to_builtins(without.ranks[0].roofline)


def test_an_ncu_rep_through_ncu_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .ncu-rep read by NVIDIA's module (a stand-in here: the real one is an optional extra)."""
    metrics: dict[str, tuple[Any, str]] = {"gpu__time_duration.sum": (3.0, "usecond"), "launch__grid_size": (120, ""),
                                           "launch__block_size": (256, ""), "dram__bytes.sum": (4.0, "Kbyte")}
    actions = [_Action("kernel_1", metrics), _Action("kernel_0", metrics)]
    rng = types.SimpleNamespace(num_actions=lambda: len(actions), action_by_idx=lambda i: actions[i])
    fake = types.ModuleType("ncu_report")
    fake.load_report = lambda path: types.SimpleNamespace(num_ranges=lambda: 1, range_by_idx=lambda i: rng)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ncu_report", fake)
    rep = tmp_path / "k.ncu-rep"
    rep.write_bytes(b"NVR\x00")
    report = app.analyze([timeline(tmp_path, ops=False)], app.AnalyzeOptions(workers=1, ncu=rep))
    roof = msgspec.to_builtins(report.ranks[0].roofline)
    assert isinstance(roof, dict)
    assert [m["kernel"] for m in roof["measured"]] == ["kernel_1", "kernel_0"]
    assert all(m["row"] >= 0 and m["achieved_bytes_per_s"] == pytest.approx(4000 / 3e-6) for m in roof["measured"])


def test_a_bad_ncu_file_is_one_line_before_any_analysis(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    done = analyze(timeline(tmp_path, ops=False), tmp_path, "--ncu", str(bad))
    assert done.returncode == 2 and "not an ncu CSV export" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    with pytest.raises(AiprofError):
        app.analyze([tmp_path / "nowhere.sqlite"], app.AnalyzeOptions(ncu=bad))


def test_kernel_names_from_ncu_are_escaped_in_html(tmp_path: Path) -> None:
    """ncu's kernel names are data: a hostile one is escaped in the HTML report (and unmatched: shown as such)."""
    hostile = "<img src=x onerror=alert(1)>k"
    raw = RAW.replace("kernel_2(float*, int)", hostile.replace('"', '""'))
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(raw)
    done = analyze(timeline(tmp_path, ops=False), tmp_path, "--ncu", str(csv_path), name="r.html")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "r.html").read_text()
    assert hostile not in html and "&lt;img src=x onerror=alert(1)&gt;k" in html
    assert "(not on the timeline)" in html and "2 of 3 matched to the timeline" in html
