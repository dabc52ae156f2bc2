"""Kernel rules on tiny traces: which kernels are tensor-core kernels, exclusive time on concurrent streams,
launch_config and the timeline cap, precision advice per device, kernel_efficiency and kernel_variance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aiprof
from aiprof.analysis.kernels import MATH_FP32, MATH_TENSOR_CORE, MATH_UNKNOWN, exclusive_ns, math_class
from aiprof.analysis.run import analyze_trace
from aiprof.rules import DEFAULT_OPTIONS, Finding, diagnose_rank
from aiprof.rules.context import RankContext
from aiprof.rules.views.kernels import matrix_units, precision_fix, removable_ns
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

US = 1000


def _load(b: TraceBuilder, tmp_path: Path, name: str = "t.json") -> Trace:
    trace = aiprof.load(b.write(tmp_path / name))
    assert isinstance(trace, Trace)
    return trace


def _findings(b: TraceBuilder, tmp_path: Path, name: str = "t.json") -> dict[str, Finding]:
    trace = _load(b, tmp_path, name)
    found, notes = diagnose_rank(trace, analyze_trace(trace), DEFAULT_OPTIONS)
    assert notes == []
    return {f.id: f for f in found}


def _device(b: TraceBuilder, major: int, minor: int, sms: int) -> TraceBuilder:
    b._device_props[0].update(computeMajor=major, computeMinor=minor, numSms=sms)
    return b


# ----- which math unit a kernel uses --------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel"
     "__5x_cublas", MATH_FP32),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_ffma_execute_kernel__5x_cublas", MATH_FP32),
    ("ampere_sgemm_128x64_nn", MATH_FP32),
    ("volta_sgemm_128x32_nt", MATH_FP32),
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm::Params)", MATH_FP32),
    ("volta_scudnn_128x64_relu_interior_nn_v1", MATH_FP32),
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true, true>(int)", MATH_FP32),
    ("Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN", MATH_FP32),
    ("sm80_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x16_tensor16x8x8", MATH_TENSOR_CORE),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(Params)", MATH_TENSOR_CORE),
    ("ampere_s1688gemm_fp16_128x128_ldg8_stages_32x1_tn", MATH_TENSOR_CORE),
    ("volta_fp16_s884cudnn_fp16_128x128_ldg8_splitK_relu_f2f_exp_small_nhwc_tn_v1", MATH_TENSOR_CORE),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", MATH_TENSOR_CORE),
    ("nvjet_tst_144x128_64x6_2x1_v_bz_bias_TNN", MATH_TENSOR_CORE),
    ("Cijk_Ailk_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT128x64x32_MI32x32x1_SN", MATH_TENSOR_CORE),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>", MATH_TENSOR_CORE),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BFloat16>", MATH_UNKNOWN),
    ("triton_poi_fused_add_0", MATH_UNKNOWN),
])
def test_math_class_of_kernel_names(name: str, expected: int) -> None:
    assert math_class(name) == expected


def test_exclusive_time_of_overlapping_intervals() -> None:
    starts = np.array([0, 5, 20, 20, 40], dtype=np.int64)
    ends = np.array([10, 15, 30, 25, 50], dtype=np.int64)
    assert exclusive_ns(starts, ends).tolist() == [5, 5, 5, 0, 10]
    assert exclusive_ns(np.array([0, 10]), np.array([10, 20])).tolist() == [10, 10]  # touching is not overlap


# ----- launch_config and the timeline cap ---------------------------------------------------------------
def _small_grid_steps(b: TraceBuilder, *, overlapped: bool) -> None:
    """Four 1 ms steps, a 300 µs 33-block kernel each; with ``overlapped`` another stream runs a 44-block
    kernel over the same 300 µs."""
    for i in range(4):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 10, dur=20)
        b.launch(op, kernel="big_kernel", kernel_ts=t0 + 40, kernel_dur=600, grid=(264, 1, 1))
        red = b.cpu_op("aten::sum", ts=t0 + 600, dur=10)
        b.launch(red, kernel="reduce_kernel", kernel_ts=t0 + 650, kernel_dur=300, grid=(33, 1, 1))
        if overlapped:
            other = b.cpu_op("aten::cumsum", ts=t0 + 612, dur=10)
            b.launch(other, kernel="scan_kernel", kernel_ts=t0 + 650, kernel_dur=300, grid=(44, 1, 1), stream=8)


def test_launch_config_counts_only_the_time_a_small_kernel_runs_alone(tmp_path: Path) -> None:
    alone = TraceBuilder()
    _small_grid_steps(alone, overlapped=False)
    f = _findings(alone, tmp_path)["launch_config"]
    assert f.est_saving_ns_per_step == 300 * US * (132 - 33) // 132
    assert f.evidence["small_grid_alone_ns_per_step"] == 300 * US
    shared = TraceBuilder()
    _small_grid_steps(shared, overlapped=True)
    assert "launch_config" not in _findings(shared, tmp_path, "s.json")  # the other stream uses those SMs


def test_removable_time_is_idle_plus_exclusive_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    _small_grid_steps(b, overlapped=True)
    trace = _load(b, tmp_path)
    ctx = RankContext(trace, analyze_trace(trace), DEFAULT_OPTIONS)
    c = trace.columns
    reduce_rows = ctx.kernels[np.array(ctx.names(ctx.kernels)) == "reduce_kernel"]
    # Every step (the first holds no one-time cost and is no outlier, so it is kept): 1000 µs − big kernel 600 − scan 300 = 100 µs of idle, and the
    # reduce kernel has no time alone: speeding it up cannot give more than the idle.
    assert removable_ns(ctx, reduce_rows) == pytest.approx(100 * US)
    assert removable_ns(ctx, ctx.kernels) == pytest.approx(1000 * US)
    assert removable_ns(ctx, ctx.kernels[:0]) == pytest.approx(100 * US)  # nothing chosen: the idle only
    assert int(c.dur[reduce_rows].sum()) == 4 * 300 * US


# ----- precision follows the hardware -------------------------------------------------------------------
def _fp32_gemm_steps(b: TraceBuilder, kernel: str, *, op: str = "aten::mm", dim: int = 3072) -> None:
    """FP32 GEMMs of ``dim``³ in 9 ms each: choose ``dim`` so the point sits at 50-70 % of the device's FP32
    roof (a physically possible rate, not latency-bound; above 200 % of the roof a point is not drawn)."""
    for i in range(4):
        t0 = i * 10_000
        b.step(i, ts=t0, dur=10_000)
        if op == "aten::mm":
            mm = b.cpu_op("aten::mm", ts=t0 + 2, dur=5, shapes=[[dim, dim], [dim, dim]], dtypes=["float", "float"])
        else:
            mm = b.cpu_op("aten::conv2d", ts=t0 + 2, dur=5, shapes=[[32, 256, 56, 56], [256, 256, 3, 3], [], [], [], [], []],
                          concrete=["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"])
        b.launch(mm, kernel=kernel, kernel_ts=t0 + 10, kernel_dur=9_000, grid=(4096, 1, 1))


@pytest.mark.parametrize("name, cc, sms, dim, bf16, needs", [
    ("Tesla V100-SXM2-16GB", (7, 0), 80, 3584, False, ("torch.float16", "GradScaler", "Volta")),
    ("Tesla T4", (7, 5), 40, 2816, False, ("torch.float16", "GradScaler", "Turing")),
    ("NVIDIA A100-SXM4-80GB", (8, 0), 108, 3072, True, ("torch.bfloat16", "allow_tf32")),
    ("NVIDIA H100 80GB HBM3", (9, 0), 132, 5888, True, ("torch.bfloat16", "allow_tf32", "FP8")),
    ("AMD Instinct MI250X / MI250", (9, 0), 104, 6144, True, ("torch.bfloat16",)),
])
def test_precision_advice_follows_the_device(tmp_path: Path, name: str, cc: tuple[int, int], sms: int, dim: int,
                                             bf16: bool, needs: tuple[str, ...]) -> None:
    b = _device(TraceBuilder(device_name=name), cc[0], cc[1], sms)
    _fp32_gemm_steps(b, "some_gemm_kernel", dim=dim)
    f = _findings(b, tmp_path)["precision"]
    for text in needs:
        assert text in f.fix, (name, f.fix)
    assert ("bfloat16" in f.fix) == bf16
    if name.startswith("AMD"):
        assert "allow_tf32" not in f.fix and "GradScaler(" not in f.fix


def test_precision_fix_text_per_unit_set() -> None:
    from aiprof.rules.views.kernels import MatrixUnits

    volta = precision_fix(MatrixUnits("nvidia", 7.0, True, False, False, False), conv=True, fp64=True)
    assert "torch.float16" in volta and "bfloat16" not in volta and "channels_last" in volta and "FP64" in volta


def test_no_tensor_core_advice_on_a_cpu_run(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        b.step(i, ts=i * 1000, dur=1000)
        b.cpu_op("aten::mm", ts=i * 1000 + 10, dur=900, shapes=[[512, 512], [512, 512]], dtypes=["float", "float"])
    found = _findings(b, tmp_path)
    assert not {"precision", "kernel_efficiency", "tensor_core_alignment"} & set(found)


def test_fp32_gemm_on_tf32_tensor_cores_is_not_a_precision_problem(tmp_path: Path) -> None:
    b = _device(TraceBuilder(device_name="NVIDIA A100-SXM4-80GB"), 8, 0, 108)
    _fp32_gemm_steps(b, "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(Params)")
    assert "precision" not in _findings(b, tmp_path)
    ffma = _device(TraceBuilder(device_name="NVIDIA A100-SXM4-80GB"), 8, 0, 108)
    _fp32_gemm_steps(ffma, "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_ffma_execute_kernel")
    f = _findings(ffma, tmp_path, "f.json")["precision"]
    assert f.evidence["tensor_core_kernels_per_step"] == 0
    assert f.evidence["non_tensor_core_fp32_kernels"][0]["kernel"].startswith("sm80_xmma_gemm_f32f32")


def test_fp32_conv_on_ampere_counts_when_its_kernels_are_fp32(tmp_path: Path) -> None:
    tf32 = _device(TraceBuilder(device_name="NVIDIA A100-SXM4-80GB"), 8, 0, 108)
    _fp32_gemm_steps(tf32, "some_conv_kernel", op="conv")  # kernel name says nothing: cuDNN's TF32 default
    assert "precision" not in _findings(tf32, tmp_path)
    fp32 = _device(TraceBuilder(device_name="NVIDIA A100-SXM4-80GB"), 8, 0, 108)
    _fp32_gemm_steps(fp32, "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", op="conv")
    assert "precision" in _findings(fp32, tmp_path, "c.json")


# ----- kernel_efficiency ----------------------------------------------------------------------------------
def _attention_steps(b: TraceBuilder, kernel_us: int) -> None:
    q = [4, 20, 2048, 128]  # 172 GFLOP: 174 µs at the H100's 989 TFLOP/s
    for i in range(4):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        attn = b.cpu_op("aten::_scaled_dot_product_flash_attention", ts=t0 + 2, dur=5, shapes=[q, q, q, [], []],
                        dtypes=["c10::BFloat16"] * 3 + ["Scalar", "Scalar"], concrete=["", "", "", "0.", "False"])
        b.launch(attn, kernel="flash_fwd_kernel", kernel_ts=t0 + 10, kernel_dur=kernel_us, grid=(640, 1, 1))


def test_attention_efficiency_fires_far_below_the_roof_only(tmp_path: Path) -> None:
    """Fused attention is attention_efficiency's (judged per path), not kernel_efficiency's: one finding."""
    slow = TraceBuilder()
    _attention_steps(slow, 800)
    found = _findings(slow, tmp_path)
    f = found["attention_efficiency"]
    expected = 2 * 174_000  # the roof time at roof_fraction_attention = 0.5
    assert f.est_saving_ns_per_step == pytest.approx(800 * US - expected, rel=0.02)
    assert f.evidence["calls_per_step"] == 1.0 and f.evidence["path"] == "flash"
    assert "kernel_efficiency" not in found
    fast = TraceBuilder()
    _attention_steps(fast, 300)  # 58 % of the roof: fine
    assert "attention_efficiency" not in _findings(fast, tmp_path, "f.json")


def test_kernel_efficiency_leaves_host_copies_alone(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::copy_", ts=t0 + 2, dur=900, shapes=[[16_000_000], [16_000_000], []],
                      dtypes=["float", "float", "Scalar"])
        b.memcpy(op, ts=t0 + 10, dur=900, nbytes=64_000_000)  # PCIe speed, not HBM's
    assert "kernel_efficiency" not in _findings(b, tmp_path)


# ----- kernel_variance --------------------------------------------------------------------------------------
def _variance_steps(b: TraceBuilder, *, shapes_differ: bool = False, contended: bool = False) -> None:
    for i in range(6):
        t0 = i * 1200
        b.step(i, ts=t0, dur=1200)
        t = t0 + 10
        for j in range(4):
            rows = 65536 * (5 if shapes_differ and j == 1 else 1)
            op = b.cpu_op("mylib::gather_rows", ts=t0 + 2 + j, dur=1, shapes=[[rows, 512], [8192]],
                          dtypes=["float", "long int"])
            dur = 500 if j == 1 else 100
            b.launch(op, kernel="gather_rows_kernel", ts=t0 + 2 + j, dur=0.5, kernel_ts=t, kernel_dur=dur,
                     grid=(1024, 1, 1))
            if contended and j == 1:
                other = b.cpu_op("mylib::other", ts=t0 + 7, dur=1)
                b.launch(other, kernel="other_stream_kernel", ts=t0 + 7, dur=0.5, kernel_ts=t, kernel_dur=dur,
                         grid=(1024, 1, 1), stream=9)
            t += dur + 5


def test_kernel_variance_on_identical_calls_only(tmp_path: Path) -> None:
    b = TraceBuilder()
    _variance_steps(b)
    f = _findings(b, tmp_path)["kernel_variance"]
    assert f.est_saving_ns_per_step == 400 * US and f.evidence["p90_ns"] >= 3 * f.evidence["p10_ns"]
    assert f.evidence["same_input_shapes"] is True
    shapes = TraceBuilder()
    _variance_steps(shapes, shapes_differ=True)  # the slow call reads 5x the rows: not variance
    assert "kernel_variance" not in _findings(shapes, tmp_path, "s.json")
    contended = TraceBuilder()
    _variance_steps(contended, contended=True)  # the slow call shares the GPU with another stream
    assert "kernel_variance" not in _findings(contended, tmp_path, "c.json")


def test_matrix_units_from_device_properties(tmp_path: Path) -> None:
    b = _device(TraceBuilder(device_name="Tesla V100-SXM2-16GB"), 7, 0, 80)
    _fp32_gemm_steps(b, "volta_sgemm_128x64_nn")
    trace = _load(b, tmp_path)
    units = matrix_units(RankContext(trace, analyze_trace(trace), DEFAULT_OPTIONS))
    assert (units.fp16, units.bf16, units.tf32, units.fp8) == (True, False, False, False)


def test_attention_efficiency_saving_is_capped_by_the_other_streams_work(tmp_path: Path) -> None:
    """The attention kernel shares its 800 µs with a 700 µs kernel on another stream: speeding it up can
    take at most the 100 µs it runs alone plus the 200 µs idle off the step, not the modelled ~452 µs."""
    b = TraceBuilder()
    _attention_steps(b, 800)
    for i in range(4):
        other = b.cpu_op("mylib::side_work", ts=i * 1000 + 8, dur=1)
        b.launch(other, kernel="side_kernel", ts=i * 1000 + 8, dur=0.5, kernel_ts=i * 1000 + 10, kernel_dur=700,
                 grid=(1024, 1, 1), stream=9)
    f = _findings(b, tmp_path)["attention_efficiency"]
    assert f.est_saving_ns_per_step == 300 * US
    assert f.evidence["modelled_saving_ns_per_step"] == pytest.approx(800 * US - 2 * 174_000, rel=0.02)
