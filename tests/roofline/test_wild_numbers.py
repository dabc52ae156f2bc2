"""Roofline numbers that held only on the traces we had (issue 12, items 8 and 9): legacy shapes without
dtypes, expanded (0-stride) inputs, no-op dropout / ``to``, the bias add of ``add*`` GEMMs, points above
their roof, CPU peaks for the threads the run used, FP32 GEMMs on TF32 tensor cores vs FMA cores."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from aiprof import load
from aiprof.roofline.analysis import ABOVE_ROOF_PCT, RooflineResult, fp32_matrix_math, roofline
from aiprof.report.roofline_chart import render_svg
from aiprof.roofline.cost import op_cost
from aiprof.roofline.peaks import DevicePeaks, scale_cpu_threads, spec_for
from aiprof.trace.model import Trace
from kineto_builder import TraceBuilder

F = "float"
N = 1024 * 1024  # elements of a [1024, 1024] tensor
CPU_PEAKS = DevicePeaks("test cpu", 10e9, {"matrix_fp32": 100e9, "vector_fp32": 100e9}, "test", "measured", "cpu",
                        threads=2)


def _load(path: Path) -> Trace:
    trace = load(path)
    assert isinstance(trace, Trace)
    return trace


def _row(result: RooflineResult, name: str) -> object:
    return next(r for r in result.rows if r.name == name)


# ----- 1. legacy traces: shapes without dtypes -----------------------------------------------------------


def test_untyped_shapes_are_costed_as_fp32_and_flagged() -> None:
    cost = op_cost("aten::mm", [[64, 32], [32, 16]], None)
    assert cost is not None and cost.dtype == "fp32" and cost.assumed_fp32
    assert cost.flops == 2 * 64 * 32 * 16 and cost.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4
    add = op_cost("aten::add", [[8, 8], [8, 8], []], [])  # ``[]``: the alpha scalar, not a tensor
    assert add is not None and add.bytes_read == 2 * 64 * 4 and add.assumed_fp32
    typed = op_cost("aten::mm", [[64, 32], [32, 16]], [F, F])
    assert typed is not None and not typed.assumed_fp32


def test_legacy_trace_roofline_modelled_with_a_note(tmp_path: Path) -> None:
    b = TraceBuilder(schema="legacy", device_name="NVIDIA A100-SXM4-40GB")
    for i in range(3):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 5, dur=10, args={"Input dims": [[2048, 2048], [2048, 2048]]})
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 20, kernel_dur=900)
    result = roofline(_load(b.write(tmp_path / "legacy.json")), measured={})
    mm = next(r for r in result.rows if r.name == "aten::mm")
    assert mm.family == "gemm" and mm.dtype == "fp32" and mm.assumed_fp32 and mm.bound == "compute-bound"
    assert mm.record().dtype_assumed and mm.record().assumed_dtype
    assert any("without dtypes" in n and "fp32" in n for n in result.notes)
    assert result.modelled_time_ns == result.total_time_ns


# ----- 2. expanded inputs -----------------------------------------------------------------------------------


def test_zero_stride_input_read_once() -> None:
    dims, types = [[1024, 1024], [1024, 1024]], [F, F]
    full = op_cost("aten::mul", dims, types, ["", ""], input_strides=[[1024, 1], [1024, 1]])
    row_bias = op_cost("aten::mul", dims, types, ["", ""], input_strides=[[1024, 1], [0, 1]])
    scalar = op_cost("aten::mul", dims, types, ["", ""], input_strides=[[0, 0], [1024, 1]])
    assert full is not None and row_bias is not None and scalar is not None
    assert full.bytes_read == 2 * N * 4 and not full.expanded_inputs
    assert row_bias.bytes_read == (N + 1024) * 4 and row_bias.expanded_inputs
    assert scalar.bytes_read == (N + 1) * 4
    assert row_bias.flops == full.flops and row_bias.bytes_written == full.bytes_written


def test_expanded_gemm_operand_and_matmul_broadcast_read_once() -> None:
    shared = op_cost("aten::bmm", [[8, 64, 32], [8, 32, 16]], [F, F], ["", ""],
                     input_strides=[[2048, 32, 1], [0, 16, 1]])
    assert shared is not None and shared.bytes_read == (8 * 64 * 32 + 32 * 16) * 4
    folded = op_cost("aten::matmul", [[8, 64, 32], [32, 16]], [F, F], ["", ""])
    assert folded is not None and folded.bytes_read == (8 * 64 * 32 + 32 * 16) * 4


def test_loader_keeps_input_strides(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mul", ts=5, dur=50, shapes=[[1024, 1024], [1024, 1024]], dtypes=[F, F],
             args={"Input Strides": [[1024, 1], [0, 1]]})
    result = roofline(_load(b.write(tmp_path / "expand.json")), CPU_PEAKS)
    mul = _row(result, "aten::mul")
    assert mul.bytes_read == (N + 1024) * 4 and mul.expanded_inputs  # type: ignore[attr-defined]


# ----- 3. no-op dropout -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["aten::dropout", "aten::feature_dropout", "aten::alpha_dropout"])
@pytest.mark.parametrize(("p", "train"), [("0.", "True"), ("0.1", "False"), ("0.5", "False")])
def test_noop_dropout_costs_nothing(name: str, p: str, train: str) -> None:
    cost = op_cost(name, [[1024, 1024], [], []], [F, "Scalar", "Scalar"], ["", p, train])
    assert cost is not None and cost.family == "noop" and cost.flops == cost.bytes == 0


def test_training_dropout_and_eval_native_dropout_are_work() -> None:
    train = op_cost("aten::dropout", [[1024, 1024], [], []], [F, "Scalar", "Scalar"], ["", "0.1", "True"])
    assert train is not None and train.family == "elementwise" and train.bytes > 0
    clone = op_cost("aten::native_dropout", [[1024, 1024], [], []], [F, "Scalar", "Scalar"], ["", "0.1", "False"])
    assert clone is not None and clone.family == "copy" and clone.bytes == N * 4 + N * 5  # clone + ones mask


def _cpu_noops(tmp: Path) -> Path:
    """A CPU-only eval step: a real add, an eval dropout and a no-op ``to`` (fp32 -> fp32, no child op)
    that take 1-2 µs on a 4 MB tensor, and a ``to`` that really converts (child ``_to_copy`` -> ``copy_``)."""
    b = TraceBuilder()
    shape = [[1024, 1024], [1024, 1024], []]
    b.step(0, ts=0, dur=3000)
    b.cpu_op("aten::add", ts=10, dur=1000, shapes=shape, dtypes=[F, F, "Scalar"], concrete=["", "", "1"])
    b.cpu_op("aten::dropout", ts=1020, dur=2, shapes=[[1024, 1024], [], []], dtypes=[F, "Scalar", "Scalar"],
             concrete=["", "0.1", "False"])
    b.cpu_op("aten::to", ts=1030, dur=1, shapes=[[1024, 1024], [], [], [], []],
             dtypes=[F, "Scalar", "Scalar", "Scalar", ""], concrete=["", "6", "False", "False", ""])
    b.cpu_op("aten::to", ts=1040, dur=900, shapes=[[1024, 1024], [], [], [], []],
             dtypes=[F, "Scalar", "Scalar", "Scalar", ""], concrete=["", "15", "False", "False", ""])
    b.cpu_op("aten::_to_copy", ts=1045, dur=890, shapes=[[1024, 1024], [], [], [], [], [], []],
             dtypes=[F] + ["Scalar"] * 6, concrete=["", "15", "", "", "", "False", ""])
    b.cpu_op("aten::copy_", ts=1050, dur=880, shapes=[[1024, 1024], [1024, 1024], []],
             dtypes=["c10::BFloat16", F, "Scalar"], concrete=["", "", "False"])
    return b.write(tmp / "cpu_noops.json")


def test_noop_dropout_and_to_not_drawn(tmp_path: Path) -> None:
    result = roofline(_load(_cpu_noops(tmp_path)), CPU_PEAKS)
    by_bound = {(r.name, r.bound) for r in result.rows}
    assert ("aten::dropout", "no-op") in by_bound and ("aten::to", "no-op") in by_bound
    for row in result.rows:
        if row.bound == "no-op":
            assert not row.drawn and row.saving_ns == 0 and row.flops == row.bytes == 0
    copy = _row(result, "aten::copy_")
    assert copy.bound == "memory-bound" and copy.drawn  # type: ignore[attr-defined]
    assert any("return their input" in n for n in result.notes)
    svg = render_svg(result)
    assert "aten::dropout" not in svg and "aten::to " not in svg and "aten::copy_" in svg
    data = json.loads(json.dumps(msgspec.to_builtins(result.section())))
    assert all(not r["drawn"] for r in data["rows"] if r["bound"] == "no-op")


# ----- 4. add* GEMMs count their bias add alike -------------------------------------------------------


def test_addmm_and_baddbmm_count_the_bias_add_alike() -> None:
    m, n, k = 64, 32, 16
    addmm = op_cost("aten::addmm", [[m, n], [m, k], [k, n], [], []], [F] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"])
    baddbmm = op_cost("aten::baddbmm", [[1, m, n], [1, m, k], [1, k, n], [], []], [F] * 3 + ["Scalar"] * 2,
                      ["", "", "", "1", "1"])
    assert addmm is not None and baddbmm is not None
    assert addmm.flops == baddbmm.flops == 2 * m * n * k + m * n
    assert addmm.bytes == baddbmm.bytes == (m * k + k * n + m * n + m * n) * 4
    batched = op_cost("aten::baddbmm", [[4, m, n], [4, m, k], [4, k, n], [], []], [F] * 3 + ["Scalar"] * 2,
                      ["", "", "", "1", "1"])
    assert batched is not None and batched.flops == 4 * (2 * m * n * k + m * n)


def test_beta_zero_ignores_the_input() -> None:
    cost = op_cost("aten::addmm", [[64, 32], [64, 16], [16, 32], [], []], [F] * 3 + ["Scalar"] * 2,
                   ["", "", "", "0", "1"])
    assert cost is not None and cost.flops == 2 * 64 * 32 * 16 and cost.bytes_read == (64 * 16 + 16 * 32) * 4


def test_addbmm_addmv_addr_linear_bias() -> None:
    scal = ["Scalar"] * 2
    addbmm = op_cost("aten::addbmm", [[6, 2], [4, 6, 5], [4, 5, 2], [], []], [F] * 3 + scal, ["", "", "", "1", "1"])
    assert addbmm is not None and addbmm.flops == 2 * 4 * 6 * 2 * 5 + 6 * 2 and addbmm.bytes_written == 6 * 2 * 4
    addmv = op_cost("aten::addmv", [[7], [7, 5], [5], [], []], [F] * 3 + scal, ["", "", "", "1", "1"])
    assert addmv is not None and addmv.flops == 2 * 7 * 5 + 7 and addmv.bytes_read == (7 * 5 + 5 + 7) * 4
    addr = op_cost("aten::addr", [[7, 5], [7], [5], [], []], [F] * 3 + scal, ["", "", "", "1", "1"])
    assert addr is not None and addr.flops == 2 * 7 * 5 and addr.bytes == (7 + 5 + 35 + 35) * 4
    linear = op_cost("aten::linear", [[7, 5], [3, 5], [3]], [F] * 3, ["", "", ""])
    no_bias = op_cost("aten::linear", [[7, 5], [3, 5], []], [F, F, ""], ["", "", ""])
    assert linear is not None and no_bias is not None
    assert linear.flops == 2 * 7 * 3 * 5 + 7 * 3 and no_bias.flops == 2 * 7 * 3 * 5


# ----- 5. points above their roof -------------------------------------------------------------------------


def test_point_above_its_roof_is_flagged_and_not_drawn(tmp_path: Path) -> None:
    """A 12 MB add in 1 µs is 12 TB/s on a 10 GB/s CPU: a timing / cost model disagreement, not a point."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=3000)
    b.cpu_op("aten::add", ts=10, dur=1, shapes=[[1024, 1024], [1024, 1024], []], dtypes=[F, F, "Scalar"],
             concrete=["", "", "1"])
    b.cpu_op("aten::mul", ts=20, dur=2000, shapes=[[1024, 1024], [1024, 1024]], dtypes=[F, F])
    result = roofline(_load(b.write(tmp_path / "above.json")), CPU_PEAKS)
    add, mul = _row(result, "aten::add"), _row(result, "aten::mul")
    assert add.bound == "above-roof" and add.pct_of_roof > ABOVE_ROOF_PCT  # type: ignore[attr-defined]
    assert not add.drawn and add.saving_ns == 0 and add.record().above_roof  # type: ignore[attr-defined]
    assert mul.bound == "memory-bound" and mul.drawn  # type: ignore[attr-defined]
    codes, names = result.call_bounds
    assert "above-roof" in [names[c] for c in codes.tolist()]
    assert any("above" in n and "not measurements" in n for n in result.notes)
    assert "aten::add" not in render_svg(result)


# ----- 6. CPU peaks for the threads the run used ---------------------------------------------------------


def test_measured_thread_count_read_from_old_peaks_files() -> None:
    old = {"name": "cpu: x", "memory_bw_bytes_per_s": 1e10, "flops_per_s": {"matrix_fp32": 1e11},
           "source": "measured by `aiprof peaks` (torch, 2 threads) on host at t", "device_type": "cpu"}
    assert DevicePeaks.from_dict(old).threads == 2
    assert DevicePeaks.from_dict({**old, "threads": 4}).threads == 4
    assert DevicePeaks.from_dict({**old, "source": "measured (numpy)"}).threads == 0
    assert DevicePeaks.from_dict(CPU_PEAKS.to_dict()).threads == 2


def test_scale_cpu_threads() -> None:
    one = scale_cpu_threads(CPU_PEAKS, 1)
    assert one.flops_per_s["matrix_fp32"] == pytest.approx(50e9) and one.threads == 1
    assert one.memory_bw_bytes_per_s == CPU_PEAKS.memory_bw_bytes_per_s
    assert scale_cpu_threads(CPU_PEAKS, 0) is CPU_PEAKS and scale_cpu_threads(CPU_PEAKS, 2) is CPU_PEAKS


def _cpu_gemm(tmp: Path) -> Path:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100_000)
    b.cpu_op("aten::mm", ts=10, dur=90_000, shapes=[[1024, 1024], [1024, 1024]], dtypes=[F, F])
    return b.write(tmp / "trace.json")


def test_cpu_roof_scaled_to_the_threads_of_the_run(tmp_path: Path) -> None:
    path = _cpu_gemm(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"format": "aiprof-run", "torch_threads": 1, "ranks": [{"rank": 0, "torch_threads": 1}]}))
    result = roofline(_load(path), CPU_PEAKS)
    assert result.peaks is not None and result.peaks.flops_per_s["matrix_fp32"] == pytest.approx(50e9)
    assert result.cpu_threads == 1 and "scaled to the 1 intra-op thread" in result.peaks_note
    mm = _row(result, "aten::mm")
    assert mm.roof_time_ns == pytest.approx(2 * 1024**3 / 50e9 * 1e9, rel=1e-6)  # type: ignore[attr-defined]


def test_cpu_threads_unknown_says_so(tmp_path: Path) -> None:
    result = roofline(_load(_cpu_gemm(tmp_path)), CPU_PEAKS)
    assert result.peaks is CPU_PEAKS and result.cpu_threads == 0
    assert "does not say how many intra-op threads" in result.peaks_note


# ----- FP32 GEMMs: TF32 tensor cores or FMA cores, from the kernel names ------------------------------------


@pytest.mark.parametrize(("kernel", "math"), [
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", "tf32"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel", "tf32"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute", "fma"),
    ("ampere_sgemm_128x64_nn", "fma"),
    ("void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>)", ""),
])
def test_fp32_matrix_math_from_kernel_name(kernel: str, math: str) -> None:
    assert fp32_matrix_math(kernel) == math


@pytest.mark.parametrize(("kernel", "roof", "dur"), [
    # 137 GFLOP in 1.5 ms: 92 TFLOP/s, 59 % of TF32 (156): 4.7x the FP32 roof without the kernel's name
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", "matrix_tf32", 1500),
    ("ampere_sgemm_128x64_nn", "matrix_fp32", 8000),  # 17 TFLOP/s: 88 % of the FP32 FMA roof (19.5)
])
def test_fp32_gemm_roof_follows_its_kernels(tmp_path: Path, kernel: str, roof: str, dur: int) -> None:
    b = TraceBuilder(device_name="NVIDIA A100-SXM4-40GB")
    b.step(0, ts=0, dur=10_000)
    op = b.cpu_op("aten::mm", ts=5, dur=10, shapes=[[4096, 4096], [4096, 4096]], dtypes=[F, F])
    b.launch(op, kernel=kernel, kernel_ts=20, kernel_dur=dur)
    result = roofline(_load(b.write(tmp_path / "a100.json")), spec_for("NVIDIA A100-SXM4-40GB"))
    mm = _row(result, "aten::mm")
    assert mm.roof_key == roof and mm.dtype == "fp32"  # type: ignore[attr-defined]
    assert mm.bound == "compute-bound"  # type: ignore[attr-defined]


def test_fp32_conv_on_fma_kernels_gets_the_fp32_roof(tmp_path: Path) -> None:
    b = TraceBuilder(device_name="NVIDIA A100-SXM4-40GB")
    b.step(0, ts=0, dur=2000)
    op = b.cpu_op("aten::cudnn_convolution", ts=5, dur=10, shapes=[[32, 64, 56, 56], [64, 64, 3, 3], [], [], [], [],
                                                                  [], [], []],
                  dtypes=[F, F, "ScalarList", "ScalarList", "ScalarList", "Int", "Bool", "Bool", "Bool"],
                  concrete=["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "False"])
    b.launch(op, kernel="void cudnn::cnn::implicit_convolve_sgemm<float, float, 128, 5, 5>(int)", kernel_ts=20,
             kernel_dur=1500)
    result = roofline(_load(b.write(tmp_path / "conv.json")), spec_for("NVIDIA A100-SXM4-40GB"))
    assert _row(result, "aten::cudnn_convolution").roof_key == "matrix_fp32"  # type: ignore[attr-defined]


# ----- out= overloads and IValue tags in older traces -------------------------------------------------------


def test_out_overload_tensor_is_written_not_read() -> None:
    """2021 traces record ``clamp_min.out(self, min, out)`` as ``aten::clamp_min`` with three inputs: the
    out tensor is the result (V100 ResNet-50 ReLUs came out at 136 % of the bandwidth roof)."""
    n = 32 * 256 * 56 * 56
    cost = op_cost("aten::clamp_min", [[32, 256, 56, 56], [], [32, 256, 56, 56]], [F, "Int", F])
    assert cost is not None and cost.bytes_read == n * 4 and cost.bytes_written == n * 4
    add = op_cost("aten::add", [[4, 4], [4, 4], [], [4, 4]], [F, F, "Scalar", F])
    assert add is not None and add.bytes_read == 2 * 16 * 4
    clamp = op_cost("aten::clamp", [[4, 4], [], [4, 4]], [F, "", F])  # min=None, max a tensor: both read
    assert clamp is not None and clamp.bytes_read == 2 * 16 * 4


def test_ivalue_tags_are_not_tensor_dtypes() -> None:
    from aiprof.roofline.dtypes import normalise

    assert [normalise(t) for t in ("Int", "Double", "Bool", "int", "double", "bool")] == [
        None, None, None, "int32", "fp64", "bool"]


def test_calls_in_leaves_out_calls_that_are_not_measurements(tmp_path: Path) -> None:
    """Rules select calls with ``calls_in``: a no-op and a call above its roof are never their evidence."""
    result = roofline(_load(_cpu_noops(tmp_path)), CPU_PEAKS)
    picked = {result.calls.strings[int(result.calls.name[i])] for i in result.calls_in(0, 10**12).tolist()}
    every = {result.calls.strings[int(result.calls.name[i])]
             for i in result.calls_in(0, 10**12, measured_only=False).tolist()}
    assert "aten::dropout" in every and "aten::dropout" not in picked and "aten::copy_" in picked
