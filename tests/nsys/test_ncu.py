"""Nsight Compute: CSV exports (raw and details pages), ``.ncu-rep`` through ``ncu_report`` (a stand-in
module here; the real one when installed), matching results to timeline kernels, measured points."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import aiprof
from aiprof.errors import TraceError
from aiprof.trace import Trace
from aiprof.trace.readers.ncu import NcuResult, match_kernels, measured_points, read_csv, read_ncu

BENCH = Path(__file__).resolve().parents[2] / "bench"
NCU_REP = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "nsys" / "extrap_ex-gpu.ncu-rep"

# The shape ``ncu --csv --page raw --print-units base`` writes: a header, a units row, a row per kernel.
RAW = '''==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum","sm__sass_thread_inst_executed_op_fadd_pred_on.sum","sm__sass_thread_inst_executed_op_fmul_pred_on.sum","sm__sass_thread_inst_executed_op_ffma_pred_on.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
"","","","","","","","","","","","nsecond","byte","byte","inst","inst","inst","%","%"
"0","4242","bench","host","kernel_1(float*, int)","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","2,000","1,000,000","500,000","10","20","1,000","12.5","80.25"
"1","4242","bench","host","kernel_2(float*, int)","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","4000","2000000","0","0","0","0","7","90"
"2","4242","bench","host","kernel_1(float*, int)","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","3000","n/a","n/a","0","0","4","1","2"
'''
DETAILS = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","bench","host","kernel_1","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","GPU Speed Of Light Throughput","Duration","usecond","2.00"
"0","4242","bench","host","kernel_1","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","GPU Speed Of Light Throughput","Memory Throughput","%","80.25"
"0","4242","bench","host","kernel_1","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","12.50"
"0","4242","bench","host","kernel_1","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","Memory Workload Analysis","Memory Throughput","Gbyte/second","500.5"
"0","4242","bench","host","kernel_1","1","7","(256, 1, 1)","(120, 1, 1)","0","8.0","SOL Rule","","",""
'''


def synthetic_trace(tmp_path: Path) -> Trace:
    sys.path.insert(0, str(BENCH))
    try:
        import nsys_import
    finally:
        sys.path.remove(str(BENCH))
    path = tmp_path / "timeline.sqlite"
    nsys_import.build(path, 40, kernel_names=3)
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


def test_raw_page_in_base_units(tmp_path: Path) -> None:
    path = tmp_path / "raw.csv"
    path.write_text(RAW)
    results = read_ncu(path)
    assert [r.kernel for r in results] == ["kernel_1(float*, int)", "kernel_2(float*, int)", "kernel_1(float*, int)"]
    first = results[0]
    assert (first.grid, first.block, first.device) == (120, 256, 0)
    assert first.duration_ns == 2000
    assert first.dram_bytes == 1_500_000
    assert first.flops == 10 + 20 + 2 * 1000
    assert (first.sm_sol_pct, first.memory_sol_pct) == (12.5, 80.25)
    assert results[2].dram_bytes is None  # n/a: that section was not collected


def test_details_page(tmp_path: Path) -> None:
    path = tmp_path / "details.csv"
    path.write_text(DETAILS)
    (result,) = read_csv(path)
    assert result.duration_ns == pytest.approx(2000)
    assert (result.sm_sol_pct, result.memory_sol_pct) == (12.5, 80.25)
    assert result.metrics["Memory Throughput"] == pytest.approx(500.5e9)  # the byte/s one, not the %
    assert result.flops is None and result.dram_bytes is None


def test_bad_csv_and_a_report_without_the_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match="not an ncu CSV export"):
        read_ncu(path)
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"NVR\x00" + b"\x00" * 64)
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import fails
    with pytest.raises(TraceError, match=r"ncu_report module .*--csv --page raw --print-units base"):
        read_ncu(rep)


def test_results_match_timeline_kernels_by_name_order_grid_and_block(tmp_path: Path) -> None:
    trace = synthetic_trace(tmp_path)
    path = tmp_path / "raw.csv"
    path.write_text(RAW)
    results = read_csv(path)
    rows = match_kernels(trace, results)
    kernels = trace.kernels()
    ones = [int(r) for r, n in zip(kernels.rows, kernels.names) if n == "kernel_1(float*, int)"]
    twos = [int(r) for r, n in zip(kernels.rows, kernels.names) if n == "kernel_2(float*, int)"]
    assert rows == [ones[0], twos[0], ones[1]]
    # a short name (ncu --print-kernel-base function) matches too; a different grid does not
    short = [NcuResult(0, "kernel_1", 120, 256), NcuResult(1, "kernel_1", 7, 256)]
    assert match_kernels(trace, short) == [ones[0], -1]
    points = measured_points(trace, results)
    assert points[0].row == ones[0] and points[0].op is None
    assert points[0].achieved_flops_per_s == pytest.approx(2030 / 2000e-9)
    assert points[0].achieved_bytes_per_s == pytest.approx(1.5e6 / 2000e-9)
    assert points[0].intensity == pytest.approx(2030 / 1.5e6)
    assert points[2].to_dict()["achieved_bytes_per_s"] is None


class _Metric:
    def __init__(self, value: Any, unit: str) -> None:
        self._value, self._unit = value, unit

    def value(self) -> Any:
        return self._value

    def unit(self) -> str:
        return self._unit


class _Action:
    def __init__(self, name: str, metrics: dict[str, tuple[Any, str]]) -> None:
        self._name, self._metrics = name, metrics

    def name(self) -> str:
        return self._name

    def metric_names(self) -> list[str]:
        return list(self._metrics)

    def metric_by_name(self, name: str) -> _Metric:
        return _Metric(*self._metrics[name])


def test_ncu_rep_through_the_ncu_report_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter over ncu_report's API (load_report → ranges → actions → metrics), with a stand-in."""
    actions = [_Action("init_array", {"gpu__time_duration.sum": (4.064, "usecond"), "launch__grid_size": (1, ""),
                                      "launch__block_size": (10, ""), "sm__throughput.avg.pct_of_peak_sustained_elapsed": (None, "%")}),
               _Action("vector_add", {"gpu__time_duration.sum": (3000, "nsecond"), "dram__bytes.sum": (2.0, "Kbyte")})]
    rng = types.SimpleNamespace(num_actions=lambda: len(actions), action_by_idx=lambda i: actions[i])
    context = types.SimpleNamespace(num_ranges=lambda: 1, range_by_idx=lambda i: rng)
    fake = types.ModuleType("ncu_report")
    fake.load_report = lambda path: context  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ncu_report", fake)
    rep = tmp_path / "x.ncu-rep"
    rep.write_bytes(b"NVR\x00")
    first, second = read_ncu(rep)
    assert (first.kernel, first.grid, first.block) == ("init_array", 1, 10)
    assert first.duration_ns == pytest.approx(4064)
    assert first.sm_sol_pct is None  # absent SOL section: None, not an error
    assert second.dram_bytes == pytest.approx(2000)


@pytest.mark.skipif(importlib.util.find_spec("ncu_report") is None or not NCU_REP.exists(),
                    reason="NVIDIA's ncu_report module is not installed (optional extra)")
def test_the_shared_ncu_rep_with_the_real_module() -> None:
    results = read_ncu(NCU_REP)
    assert len(results) == 6
    assert any(r.kernel.startswith("vector_add") for r in results)
    assert any(r.duration_ns == pytest.approx(4064) for r in results)


def test_roofline_command_puts_measured_points_beside_the_estimates(tmp_path: Path) -> None:
    import json
    import subprocess

    trace = synthetic_trace(tmp_path)
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text(RAW)
    out_json = tmp_path / "roofline.json"
    done = subprocess.run([sys.executable, "-m", "aiprof", "roofline", str(trace.path), "--ncu", str(csv_path),
                           "--json", str(out_json)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Measured by Nsight Compute (3 of 3 matched to the timeline)" in done.stdout
    measured = json.loads(out_json.read_text())["measured"]
    assert [m["kernel"] for m in measured] == [r.kernel for r in read_csv(csv_path)]
    assert measured[0]["achieved_bytes_per_s"] == pytest.approx(1.5e6 / 2000e-9)
