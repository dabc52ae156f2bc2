"""MFU per op class and per ``nn.Module`` in ``aiprof compare`` (issue #23): two real CPU torch runs with
modules recorded (a narrow and a wide model, against one measured CPU peak), and two shared GPU traces of
one model on different devices (each side against its own datasheet peak, no modules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from aiprof import app
from aiprof.report.compare import Comparison, compare_reports
from aiprof.report.compare_mfu import compare_mfu, pct_text
from aiprof.roofline.peaks import DevicePeaks, save_measured

CPU_PEAK = 50e9  # the test's "measured" fp32 matrix peak of this CPU, FLOP/s


def _record(path: Path, hidden: int, with_stack: bool = True) -> Path:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 32)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3), with_stack=with_stack,
                 record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(4):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return path


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    tmp = tmp_path_factory.mktemp("mfu-compare")
    peaks = tmp / "peaks.json"
    save_measured([DevicePeaks(name="test CPU", memory_bw_bytes_per_s=20e9, source="test measurement",
                               flops_per_s={"matrix_fp32": CPU_PEAK, "vector_fp32": CPU_PEAK / 4},
                               provenance="measured", device_type="cpu", measured_at="2026-12-04T20:00:00")], peaks)
    narrow, wide = _record(tmp / "narrow.json", 16), _record(tmp / "wide.json", 256)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIPROF_PEAKS_FILE", str(peaks))
        return app.analyze([narrow]), app.analyze([wide])


def test_classes_and_modules_before_and_after_against_the_printed_peak(cpu_runs: tuple[Any, Any]) -> None:
    before, after = cpu_runs
    b, a = before.ranks[0].mfu, after.ranks[0].mfu
    assert b.available and a.available and b.by_module and a.by_module
    cmp = compare_reports(before, after)
    detail = cmp.mfu_detail
    assert detail is not None and detail.same_peak
    assert detail.before_peak.flops_per_s == detail.after_peak.flops_per_s == int(CPU_PEAK)
    assert detail.before_peak.key == "matrix_fp32" and detail.before_peak.device == "test CPU"
    assert (detail.before_mfu, detail.after_mfu) == (b.mfu, a.mfu)
    # Each class's numbers are the reports' own, matched by name; the matrix classes add up to the MFU
    classes = {c.op_class: c for c in detail.by_op_class}
    for side, sec in (("before", b), ("after", a)):
        for c in sec.by_op_class:
            row = classes[c.op_class]
            assert getattr(row, f"{side}_mfu") == c.mfu and getattr(row, f"{side}_flops_per_step") == c.flops_per_step
    mm = classes["matmul"]
    assert mm.delta == pytest.approx(a.mfu - b.mfu)
    assert mm.after_flops_per_step > 10 * mm.before_flops_per_step  # 256 hidden against 16
    # Modules by path: the same paths on both sides (one model class), with both MFUs and busy MFUs
    paths = {m.path: m for m in detail.by_module}
    assert set(paths) == {m.path for m in b.by_module} == {m.path for m in a.by_module}
    top = paths["Sequential_0"]
    assert top.status == "matched"
    by_b, by_a = {m.path: m for m in b.by_module}, {m.path: m for m in a.by_module}
    assert (top.before_mfu, top.after_mfu) == (by_b["Sequential_0"].mfu, by_a["Sequential_0"].mfu)
    assert top.before_busy_mfu == by_b["Sequential_0"].busy_mfu and top.after_busy_mfu == by_a["Sequential_0"].busy_mfu
    deltas = [abs(m.delta or 0.0) for m in detail.by_module]
    assert deltas == sorted(deltas, reverse=True)


@pytest.mark.parametrize("fmt", ["terminal", "md", "html"])
def test_every_format_prints_the_classes_the_modules_and_the_peak(cpu_runs: tuple[Any, Any], fmt: str) -> None:
    before, after = cpu_runs
    cmp = compare_reports(before, after)
    text = app.render(cmp, fmt)
    d = cmp.mfu_detail
    assert d is not None
    assert "Model FLOPs utilisation" in text
    assert "peak: matrix_fp32 50.0 GFLOP/s dense, test CPU (test measurement) (both sides)" in " ".join(text.split())
    mm = next(c for c in d.by_op_class if c.op_class == "matmul")
    assert pct_text(mm.before_mfu) in text and pct_text(mm.after_mfu) in text
    assert f"{100 * (mm.delta or 0):+.4f} pt" in text or f"{100 * (mm.delta or 0):+.2f} pt" in text
    assert "Sequential_0/Linear_1" in text and "nn.Module" in text and "elementwise (vector work, not in MFU)" in text
    top = next(m for m in d.by_module if m.path == "Sequential_0")
    assert f"{pct_text(top.before_busy_mfu)} → {pct_text(top.after_busy_mfu)}" in text  # while it runs


def test_the_json_comparison_carries_the_detail_and_decodes(cpu_runs: tuple[Any, Any]) -> None:
    cmp = compare_reports(*cpu_runs)
    raw = json.loads(app.render(cmp, "json"))
    detail = raw["mfu_detail"]
    assert detail["before_peak"]["key"] == "matrix_fp32" and detail["by_op_class"][0]["op_class"] == "matmul"
    assert {"path", "status", "before_mfu", "after_mfu", "delta", "before_busy_mfu"} <= set(detail["by_module"][0])
    back = msgspec.json.decode(app.render(cmp, "json").encode(), type=Comparison)
    assert back.mfu_detail == cmp.mfu_detail


def test_a_side_without_a_peak_has_no_section(cpu_runs: tuple[Any, Any], tmp_path: Path) -> None:
    before, _ = cpu_runs
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIPROF_PEAKS_FILE", str(tmp_path / "none.json"))  # no measured CPU peaks: no MFU
        other = app.analyze([_record(tmp_path / "t.json", 16)])
    assert other.ranks[0].mfu and not other.ranks[0].mfu.available
    cmp = compare_reports(before, other)
    assert cmp.mfu_detail is None and compare_mfu(other, before) is None
    assert "Model FLOPs utilisation" not in app.render(cmp, "terminal")


def test_two_devices_each_against_its_own_peak(traces_dir: Path) -> None:
    before = app.analyze([traces_dir / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"])
    after = app.analyze([traces_dir / "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz"])
    cmp = compare_reports(before, after)
    d = cmp.mfu_detail
    assert d is not None and not d.same_peak
    assert d.before_peak.device == "NVIDIA H100 SXM" and d.after_peak.device == "AMD Instinct MI300X"
    assert d.before_peak.flops_per_s != d.after_peak.flops_per_s
    # One model on both: every module did the same FLOPs per step; its MFU differs by the device and its peak
    assert d.by_module and not d.modules_note
    assert all(m.status == "matched" and m.before_flops_per_step == m.after_flops_per_step for m in d.by_module)
    mm = next(c for c in d.by_op_class if c.op_class == "matmul")  # the numbers docs/reports.md quotes
    assert mm.before_flops_per_step == mm.after_flops_per_step and round(mm.before_flops_per_step / 1e9, 2) == 8.04
    assert (round(100 * (mm.before_mfu or 0), 2), round(100 * (mm.after_mfu or 0), 2)) == (0.18, 0.15)
    top = next(m for m in d.by_module if m.path == "BertLMHeadModel_0")
    assert top.before_flops_per_step == before.ranks[0].mfu.flops_per_step
    text = app.render(cmp, "terminal")
    assert "peak before: matrix_bf16" in text and "peak after: matrix_bf16" in text
    assert "NVIDIA H100 SXM" in text and "AMD Instinct MI300X" in text
    assert "BertLMHeadModel_0/BertModel_0" in text


def test_without_modules_on_one_side_the_comparison_says_so(cpu_runs: tuple[Any, Any], tmp_path: Path) -> None:
    before, _ = cpu_runs
    with pytest.MonkeyPatch.context() as mp:
        save_measured([DevicePeaks(name="test CPU", memory_bw_bytes_per_s=20e9, source="test measurement",
                                   flops_per_s={"matrix_fp32": CPU_PEAK}, provenance="measured", device_type="cpu",
                                   measured_at="2026-12-04T20:00:00")], tmp_path / "peaks.json")
        mp.setenv("AIPROF_PEAKS_FILE", str(tmp_path / "peaks.json"))
        after = app.analyze([_record(tmp_path / "t.json", 64, with_stack=False)])
    d = compare_reports(before, after).mfu_detail
    assert d is not None and d.by_op_class and not d.by_module
    assert d.modules_note.startswith("no module view on the after side")
    assert "no module view on the after side" in app.render(compare_reports(before, after), "md")


def test_module_paths_are_data_in_every_format() -> None:
    """A module path from a trace is escaped in each sink (a table pipe, HTML, a terminal escape sequence)."""
    from aiprof.report.compare_mfu import MfuComparison, MfuModuleDelta, MfuPeak, html_section, markdown_text, terminal_text

    hostile = "Net_0/<script>x</script>|\x1b[31mred"
    peak = MfuPeak(flops_per_s=int(1e12), key="matrix_bf16", device="GPU <b>", source="spec", dtype="bf16")
    cmp = MfuComparison(before_peak=peak, after_peak=peak, same_peak=True, before_mfu=0.1, after_mfu=0.2, delta=0.1,
                        by_op_class=[], by_module=[MfuModuleDelta(
                            path=hostile, status="matched", before_mfu=0.1, after_mfu=0.2, delta=0.1,
                            before_busy_mfu=0.3, after_busy_mfu=0.4, before_flops_per_step=1, after_flops_per_step=2)])
    assert "<script>" not in html_section(cmp) and "&lt;script&gt;" in html_section(cmp) and "GPU &lt;b&gt;" in html_section(cmp)
    md = markdown_text(cmp)
    assert "\x1b" not in md and "x</script>|" not in md
    term = terminal_text(cmp)
    assert "\x1b" not in term and "red" in term
