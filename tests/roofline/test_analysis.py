"""Roofline on real traces (H100 Qwen and OWLv2, MI300X ResNet), the peaks table and file, the chart and CLI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest

from aiprof import load
from aiprof.cli import main
from aiprof.roofline.analysis import RooflineResult, roofline
from aiprof.report.roofline_chart import render_svg
from aiprof.roofline.peaks import DevicePeaks, load_measured, resolve, save_measured, spec_for

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
OWL = "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"


def _result(traces_dir: Path, rel: str) -> RooflineResult:
    trace = load(traces_dir / rel)
    assert not isinstance(trace, list)
    return roofline(trace, measured={})  # type: ignore[arg-type]


def test_qwen_big_gemms_compute_bound_near_roof(traces_dir: Path) -> None:
    result = _result(traces_dir, QWEN)
    assert result.peaks is not None and result.peaks.name == "NVIDIA H100 SXM"
    gemms = [r for r in result.rows if r.family == "gemm" and r.time_ns > 500_000]
    assert len(gemms) >= 4
    for row in gemms:
        assert row.bound == "compute-bound" and row.roof_key == "matrix_bf16"
        assert 50 <= (row.pct_of_roof or 0) <= 100
    mm = next(r for r in gemms if r.input_dims.startswith("[[8944,1024],[1024,2816]]"))
    assert mm.count == 48 and mm.flops == 48 * 51_581_550_592
    elementwise = [r for r in result.rows if r.family in ("elementwise", "norm", "copy", "reduce")
                   and r.time_ns > 500_000]
    assert elementwise and all(r.bound == "memory-bound" for r in elementwise)
    unmodelled = {r.name for r in result.unmodelled}
    assert "(no issuing op)" in unmodelled  # kernels whose launch predates the CPU capture: listed, not dropped


def test_owlv2_softmax_modelled_and_memory_bound(traces_dir: Path) -> None:
    result = _result(traces_dir, OWL)
    top = result.rows[0]
    assert top.name == "aten::_softmax" and top.family == "softmax" and top.bound == "memory-bound"
    assert result.share(top) > 0.4
    assert result.modelled_time_ns / result.total_time_ns > 0.99
    norms = [r for r in result.rows if r.family == "norm" and r.time_ns > 1_000_000]
    assert norms and all(r.bound == "memory-bound" for r in norms)
    big_gemm = [r for r in result.rows if r.name == "aten::addmm" and r.time_ns > 5_000_000]
    assert big_gemm and all(r.bound == "compute-bound" for r in big_gemm)
    data = json.loads(json.dumps(msgspec.to_builtins(result.section())))
    assert data["peaks"]["name"] == "NVIDIA H100 SXM"
    assert isinstance(data["rows"][0]["flops"], int) and isinstance(data["rows"][0]["time_ns"], int)


def test_backward_ops_linked_to_forward(traces_dir: Path) -> None:
    result = _result(traces_dir, "tracelens/mi300/resnet_act_checkpoint.json.gz")
    assert result.peaks is not None and result.peaks.name == "AMD Instinct MI300X"
    conv_bwd = [r for r in result.rows if r.name == "aten::convolution_backward"]
    assert conv_bwd and all(r.forward_op and "conv" in r.forward_op for r in conv_bwd)


def test_per_call_rows_agree_with_the_aggregated_rows(traces_dir: Path) -> None:
    """Calls are kept columnar and built on demand: every way of asking for them gives the same rows,
    and they add up to the aggregated rows (counts, times, FLOPs, bytes)."""
    result = _result(traces_dir, QWEN)
    calls = result.instances
    assert len(calls) == result.instance_count > 1000
    assert sum(r.time_ns for r in calls) == result.total_time_ns == sum(r.time_ns for r in result.rows)
    top = result.top_instances(25)
    assert [r.time_ns for r in top] == sorted((r.time_ns for r in calls), reverse=True)[:25]
    by_key: dict[tuple[str, str, str, str], list[int]] = {}
    for r in calls:
        have = by_key.setdefault((r.name, r.input_dims, r.input_types, r.concrete_inputs), [0, 0, 0])
        have[0], have[1], have[2] = have[0] + 1, have[1] + r.time_ns, have[2] + r.flops
    for row in result.rows:
        assert by_key[(row.name, row.input_dims, row.input_types, row.concrete_inputs)] == [
            row.count, row.time_ns, row.flops]
    lo, hi = sorted(r.ts_ns for r in calls if r.ts_ns >= 0)[len(calls) // 3], max(r.ts_ns for r in calls)
    window = [r for r in calls if lo <= r.ts_ns < hi and r.family in ("gemm", "attention")]
    assert window and result.instances_in(lo, hi, ("gemm", "attention")) == window
    assert result.instances_in(lo, hi) == [r for r in calls if lo <= r.ts_ns < hi]


def test_chart_is_valid_svg(traces_dir: Path) -> None:
    svg = render_svg(_result(traces_dir, QWEN))
    root = ET.fromstring(svg)
    circles = [e for e in root.iter() if e.tag.endswith("circle")]
    assert len(circles) > 10
    assert "ridge" in svg and "matrix_bf16" in svg


def test_cli_roofline(traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, out_svg = tmp_path / "r.json", tmp_path / "r.svg"
    peaks = tmp_path / "none.json"
    save_measured([], peaks)
    code = main(["roofline", str(traces_dir / QWEN), "--json", str(out_json), "--chart", str(out_svg),
                 "--peaks", str(peaks)])
    assert code == 0
    text = capsys.readouterr().out
    assert "compute" in text and "mm [8944,1024]·[1024,2816]" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    assert json.loads(out_json.read_text())["mode"] == "gpu"
    svg = out_svg.read_text()
    assert svg.startswith("<!-- generator: aiprof --><svg")  # the mark -o recognises as an aiprof output


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB SXM"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"),
    ("Tesla V100-SXM2-16GB", "Tesla V100 SXM2"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("AMD Instinct MI250X / MI250", "AMD Instinct MI250X"),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("NVIDIA H800", "NVIDIA H800 SXM"),
])
def test_fuzzy_device_names(name: str, expected: str) -> None:
    spec = spec_for(name)
    assert spec is not None and spec.name == expected and spec.source


def test_unknown_device_says_so_and_uses_measured(tmp_path: Path) -> None:
    assert spec_for("NVIDIA A10G") is None
    choice = resolve("Mystery GPU", cpu=False, measured={})
    assert choice.peaks is None and "unknown device" in choice.note
    mine = DevicePeaks("Mystery GPU", 1e12, {"matrix_bf16": 1e14}, "measured here", "measured")
    path = save_measured([mine], tmp_path / "p.json")
    loaded = load_measured(path)
    chosen = resolve("Mystery GPU", cpu=False, measured=loaded).peaks
    assert chosen is not None and chosen.flops_per_s["matrix_bf16"] == 1e14
    over = resolve("NVIDIA H100 80GB HBM3", cpu=False, measured={"NVIDIA H100 80GB HBM3": mine}).peaks
    assert over is not None and over.provenance == "spec+measured"
    assert over.flops_per_s["matrix_bf16"] == 1e14 and over.flops_per_s["matrix_fp8"] > 1e15


def test_peaks_file_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiprof.roofline.peaks import default_peaks_path

    monkeypatch.setenv("AIPROF_PEAKS_FILE", str(tmp_path / "x.json"))
    assert default_peaks_path() == tmp_path / "x.json"
    monkeypatch.delenv("AIPROF_PEAKS_FILE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_peaks_path() == tmp_path / "aiprof" / "peaks.json"


def test_cpu_run_uses_measured_cpu_peaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("AIPROF_PEAKS_FILE", str(tmp_path / "peaks.json"))
    assert main(["peaks", "--device", "cpu", "--quick"]) == 0
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.ReLU())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        model(torch.randn(32, 64)).sum().backward()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    capsys.readouterr()
    assert main(["roofline", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "CPU self time" in out and "measured CPU peaks" in out
    trace = load(tmp_path / "t.json")
    result = roofline(trace)  # type: ignore[arg-type]
    assert result.mode == "cpu" and result.peaks is not None and result.peaks.device_type == "cpu"
    assert any(r.family == "gemm" and r.pct_of_roof is not None for r in result.rows)
