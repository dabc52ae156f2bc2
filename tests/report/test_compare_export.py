"""`aiprof compare` and `aiprof export` on real traces, and telemetry from a real run directory."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import msgspec
import pytest
from report_docs import document_for_paths, document_of, shared_path
from test_renderers import schema

from aiprof.analysis.overview import TimelineOverview
from aiprof.report.compare import compare_reports
from aiprof.report.model import Report
from aiprof.report.render import render


def aiprof(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, timeout=180)


def test_resnet_num_workers_0_vs_4_matches_the_manifest() -> None:
    """MANIFEST (TensorBoard plugin): average step 177,592 → 141,068 µs, GPU utilization 55.51 → 70.27 %."""
    cmp = compare_reports(document_of("resnet50_nw0"), document_of("resnet50_nw4"))
    mean = cmp.mean_step_time_ns
    assert abs(mean.before / 1e3 - 177_592) <= 1 and abs(mean.after / 1e3 - 141_068) <= 1
    assert mean.delta_pct == pytest.approx(100 * (141_068 - 177_592) / 177_592, abs=0.01)
    assert cmp.utilization.before == pytest.approx(0.5551, abs=5e-4)
    assert cmp.utilization.after == pytest.approx(0.7027, abs=5e-4)
    assert cmp.verdict.result == "faster"
    assert cmp.idle_causes_ns_per_step["data_loading"].delta < -50_000_000
    if not document_of("resnet50_nw0").findings:
        pytest.skip("the diagnosis rules are not installed")
    assert "data_loading" in [f.id for f in cmp.findings.resolved]
    for fmt in ("terminal", "md", "html"):
        text = render(cmp, fmt)
        assert "data_loading" in text and "faster" in text
    assert max(len(line) for line in render(cmp, "terminal").splitlines()) <= 80


def test_compare_cli_gate_and_json_report_inputs(tmp_path: Path) -> None:
    nw0 = shared_path("resnet50_nw0")
    nw4 = shared_path("resnet50_nw4")
    report = tmp_path / "before.json"
    assert aiprof("analyze", nw4, "-o", report).returncode == 0
    # AFTER (nw0) is ~40 % slower by median step than BEFORE (a JSON report of nw4): the gate trips.
    slow = aiprof("compare", report, nw0, "--fail-if-slower", "5", "-o", tmp_path / "c.json")
    assert slow.returncode == 1 and "slower" in slow.stderr
    cmp = json.loads((tmp_path / "c.json").read_text())
    assert cmp["comparison_schema_version"] == "1.0" and cmp["verdict"]["result"] == "slower"
    assert cmp["before"]["sources"] == [str(nw4)]
    fast = aiprof("compare", nw0, report, "--fail-if-slower", "5", "--format", "md")
    assert fast.returncode == 0 and "## aiprof compare: faster" in fast.stdout
    same = aiprof("compare", report, report, "--fail-if-slower", "0")
    assert same.returncode == 0 and "No change" in same.stdout
    assert aiprof("compare", report, tmp_path / "missing").returncode == 2


def test_per_op_deltas_are_matched_by_name() -> None:
    cmp = compare_reports(document_of("resnet50_nw0"), document_of("resnet50_nw4"))
    rows = {r.name: r for r in cmp.ops.rows}
    assert cmp.ops.metric == "gpu_total_ns"
    copy = rows["aten::copy_"]  # 4 workers pin and copy more per step: H2D memcpy grew
    assert copy.status == "matched" and copy.delta_ns_per_step > 0


def test_export_merges_ranks_findings_and_opens_as_chrome_trace(tmp_path: Path) -> None:
    folder = shared_path("dlrm_8rank")
    out = tmp_path / "merged.json.gz"
    run = aiprof("export", folder, "-o", out)
    assert run.returncode == 0, run.stderr
    merged = json.loads(gzip.decompress(out.read_bytes()))
    events = merged["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {f"rank {r} · python3" for r in range(8)} <= names
    steps = [e for e in events if e.get("cat") == "aiprof"]
    assert len(steps) == 8 and all(e["dur"] > 0 for e in steps)
    findings = [e for e in events if e.get("cat") == "aiprof.finding"]
    assert len(findings) == len(document_of("dlrm_8rank").findings)
    original = sum(len(json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]) for p in sorted(folder.glob("*.json.gz")))
    kineto = [e for e in events if e.get("pid") not in (999_999_001, 999_999_002)]
    assert len(kineto) == original


def _write_telemetry(path: Path, start_ns: int, end_ns: int) -> int:
    """Real samples from the capture's sampler (psutil), stamped across the trace's span."""
    telemetry = pytest.importorskip("aiprof.capture.telemetry")
    pytest.importorskip("psutil")
    n = 40
    times = iter([start_ns + (end_ns - start_ns) * i // (n - 1) for i in range(n)])
    sampler = telemetry.TelemetrySampler(path, [telemetry.SystemProbe()], interval_s=3600, clock=lambda: next(times))
    sampler.start()
    for _ in range(n - 2):
        sampler.sample_once()
    sampler.stop()
    return n


def test_run_directory_telemetry_reaches_every_format(tmp_path: Path) -> None:
    trace = shared_path("resnet50_nw0")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(trace, run_dir / "rank0.pt.trace.json.gz")
    overview = document_of("resnet50_nw0").ranks[0].timeline_overview
    assert isinstance(overview, TimelineOverview)
    ov = msgspec.to_builtins(overview)
    base = int(ov["base_time_ns"])
    n = _write_telemetry(run_dir / "telemetry.csv", base + ov["start_ns"], base + ov["end_ns"])
    (run_dir / "meta.json").write_text(json.dumps({"format": "aiprof-run", "command": ["python", "train.py"], "mode": "run"}))

    doc: Report = document_for_paths((str(run_dir),))
    jsonschema.validate(json.loads(render(doc, "json")), schema())
    assert doc.telemetry is not None and doc.run_metadata is not None
    assert doc.telemetry.samples == n and doc.run_metadata.mode == "run"
    assert len(doc.telemetry.series["cpu_pct"]) == n

    html = render(doc, "html")
    assert "<h3 style=\"margin-top:1em\">Telemetry</h3>" in html and f"{n} of {n} samples" in html
    assert "run.command" in html
    out = tmp_path / "m.json"
    assert aiprof("export", run_dir, "-o", out).returncode == 0
    counters = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "C"]
    assert {e["name"] for e in counters} >= {"cpu_pct", "mem_used_bytes"}
    assert all(ov["start_ns"] / 1e3 - 1 <= e["ts"] <= ov["end_ns"] / 1e3 + 1 for e in counters)
