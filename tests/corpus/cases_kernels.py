"""Kernel classes: concurrent streams, a dominant op far below its roofline, precision advice that follows
the hardware, FP32 GEMMs that look like tensor-core kernels, and one kernel whose calls vary several-fold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import Case, case
from kineto_builder import TraceBuilder

H100 = "NVIDIA H100 80GB HBM3"


def _device(b: TraceBuilder, major: int, minor: int, sms: int) -> TraceBuilder:
    b._device_props[0].update(computeMajor=major, computeMinor=minor, numSms=sms)
    return b


def _three_streams(tmp: Path) -> Path:
    """Six 1 ms steps; three streams each run back-to-back 330 µs kernels of 40 blocks on a 132-SM H100:
    the device is 99 % busy and the three kernels together fill 120 of the SMs."""
    b = TraceBuilder(device_name=H100)
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        for s, stream in enumerate((7, 8, 9)):
            for j in range(3):
                op = b.cpu_op("mylib::expert_ffn", ts=t0 + 1 + s * 3 + j, dur=1)
                b.launch(op, kernel=f"expert_kernel_{s}", ts=t0 + 1 + s * 3 + j, dur=0.5,
                         kernel_ts=t0 + 10 + j * 330, kernel_dur=330, grid=(40, 1, 1), stream=stream)
    return b.write(tmp / "streams.json")


def _attention_below_roof(tmp: Path) -> Path:
    """Each 1 ms step: one bf16 flash-attention call of 800 µs whose FLOPs take 160 µs at the H100's
    dense bf16 peak (20 % of the roof), then a bf16 GEMM near its roof."""
    b = TraceBuilder(device_name=H100)
    q = [4, 20, 2048, 128]  # B, H, S, D: 4·B·H·S²·D = 172 GFLOP → 174 µs at 989 TFLOP/s
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        attn = b.cpu_op("aten::_scaled_dot_product_flash_attention", ts=t0 + 2, dur=5, shapes=[q, q, q, [], []],
                        dtypes=["c10::BFloat16"] * 3 + ["Scalar", "Scalar"], concrete=["", "", "", "0.", "False"])
        b.launch(attn, kernel="void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>",
                 kernel_ts=t0 + 10, kernel_dur=800, grid=(640, 1, 1))
        mm = b.cpu_op("aten::mm", ts=t0 + 8, dur=3, shapes=[[4096, 4096], [4096, 4096]],
                      dtypes=["c10::BFloat16"] * 2)
        b.launch(mm, kernel="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", kernel_ts=t0 + 812,
                 kernel_dur=180, grid=(132, 1, 1))
    return b.write(tmp / "attention.json")


def _attention_without_shapes(tmp: Path) -> Path:
    """Issue #22 class 6 as recorded: ten AOTriton flash-attention forwards on an MI300X (bf16, B1 H32 S32768
    d128), 99.9 % of the trace busy, from a capture without ``Input Dims`` (rocprofiler-sdk): the op has no
    shapes; the kernel's grid is (⌈32768 / 128⌉, 32, 1) = (256, H, B)."""
    b = TraceBuilder(device_name="AMD Instinct MI300X")
    for i in range(10):
        t0 = i * 50_000
        b.step(i, ts=t0, dur=50_000)
        attn = b.cpu_op("aten::_scaled_dot_product_flash_attention", ts=t0 + 2, dur=20)
        b.launch(attn, kernel="attn_fwd", kernel_ts=t0 + 25, kernel_dur=49_950, grid=(256, 32, 1), block=(256, 1, 1),
                 api="hipModuleLaunchKernel")
    return b.write(tmp / "attention_no_shapes.json")


def _check_attention_without_shapes(run: Any, findings: list[dict[str, Any]]) -> None:
    (f,) = [f for f in findings if f["id"] == "attention_efficiency_unknown"]
    ev = f["evidence"]
    assert f["severity"] == "info" and f["est_saving_ns_per_step"] == 0 and ev["share_of_step"] >= 0.99
    (g,) = ev["grid_shapes"]
    assert (g["batch"], g["heads"], g["q_blocks"]) == (1, 32, 256)
    assert "key length nor the head dim" in ev["why"]


def _v100_fp32_conv(tmp: Path) -> Path:
    """ResNet-style FP32 convolutions on a V100 (sm70: FP16 tensor cores only), cuDNN's scudnn kernels."""
    b = _device(TraceBuilder(device_name="Tesla V100-SXM2-16GB"), 7, 0, 80)
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        conv = b.cpu_op("aten::conv2d", ts=t0 + 2, dur=5, shapes=[[32, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []],
                        concrete=["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"])
        b.launch(conv, kernel="volta_scudnn_128x64_relu_interior_nn_v1", kernel_ts=t0 + 10, kernel_dur=600,
                 grid=(784, 1, 1))
        relu = b.cpu_op("aten::relu_", ts=t0 + 9, dur=2)
        b.launch(relu, kernel="void at::native::vectorized_elementwise_kernel<4, clamp_min>", kernel_ts=t0 + 615,
                 kernel_dur=300, grid=(4096, 1, 1))
    return b.write(tmp / "v100.json")


def _varying_kernel(tmp: Path) -> Path:
    """Four calls per step of the same custom kernel (same grid, block and inputs): three take 100 µs, one
    takes 500 µs, on a quiet single-stream GPU."""
    b = TraceBuilder(device_name=H100)
    for i in range(6):
        t0 = i * 1200
        b.step(i, ts=t0, dur=1200)
        t = t0 + 10
        for j in range(4):
            op = b.cpu_op("mylib::gather_rows", ts=t0 + 2 + j, dur=1, shapes=[[65536, 512], [8192]],
                          dtypes=["float", "long int"])
            dur = 500 if j == 1 else 100
            b.launch(op, kernel="gather_rows_kernel", ts=t0 + 2 + j, dur=0.5, kernel_ts=t, kernel_dur=dur,
                     grid=(1024, 1, 1))
            t += dur + 5
    return b.write(tmp / "variance.json")


def _a100_ffma_gemm(tmp: Path) -> Path:
    """An FP32 GEMM on an A100 that cuBLAS runs with an xmma FFMA kernel: CUDA cores, no tensor cores."""
    b = _device(TraceBuilder(device_name="NVIDIA A100-SXM4-80GB"), 8, 0, 108)
    for i in range(6):
        t0 = i * 10_000
        b.step(i, ts=t0, dur=10_000)
        # 4096³ FP32: 137 GFLOP in 9 ms = 15 TFLOP/s, 78 % of the A100's 19.5 TFLOP/s FP32 FMA roof (physically possible)
        mm = b.cpu_op("aten::mm", ts=t0 + 2, dur=5, shapes=[[4096, 4096], [4096, 4096]], dtypes=["float", "float"])
        b.launch(mm, kernel="sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
                 "aligna4_alignc4_execute_kernel__5x_cublas", kernel_ts=t0 + 10, kernel_dur=9_000, grid=(4096, 1, 1))
    return b.write(tmp / "ffma.json")


def _check_streams(run: Any, findings: list[dict[str, Any]]) -> None:
    for f in findings:  # nothing may claim more than the 1 % the device is idle
        assert f["share_of_step"] <= 0.02, f


def _check_attention(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    ev = f["evidence"]
    assert ev["path"] == "flash" and ev["peak"] == "matrix_bf16" and ev["shapes"]
    assert 15 <= ev["pct_of_peak"] <= 25 and ev["share_of_step"] >= 0.75
    # 800 µs × (1 − fraction / 0.5 attainable): ~480 µs per step, never more than its time
    assert 400_000 <= f["est_saving_ns_per_step"] <= 500_000
    assert "sdpa_kernel" in f["fix"] and "FlashAttention-3" in f["fix"]


def _check_v100(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert "torch.float16" in f["fix"] and "GradScaler" in f["fix"]
    assert "bfloat16" not in f["fix"] and "allow_tf32" not in f["fix"]


def _check_variance(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["evidence"]["kernel"] == "gather_rows_kernel" and f["evidence"]["median_ns"] == 100_000
    assert f["est_saving_ns_per_step"] == 400_000  # the slow call's time above the median


def _check_ffma(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["evidence"]["tensor_core_kernels_per_step"] == 0
    assert f["evidence"]["non_tensor_core_fp32_kernels"][0]["kernel"].startswith("sm80_xmma_gemm_f32f32")
    assert "bfloat16" in f["fix"] and "allow_tf32" in f["fix"]


CASES: list[Case] = [
    case("three_busy_streams_no_launch_config", _three_streams, None,
         "three streams keep the GPU 99 % busy with 40-block kernels: the SMs one kernel leaves free run the "
         "others, so small grids are not what to fix, and nothing may claim more than the 1 % idle",
         absent={"launch_config", "launch_bound", "kernel_efficiency"}, check=_check_streams),
    case("attention_far_below_roof_first", _attention_below_roof, "attention_efficiency",
         "80 % of every step is one flash-attention call at 20 % of the bf16 tensor-core roof: the dominant "
         "op is far below what fused attention reaches, and that is the thing to fix",
         absent={"launch_config", "precision", "kernel_efficiency"}, check=_check_attention),
    case("attention_without_shapes_says_it_cannot_judge", _attention_without_shapes, None,
         "ten flash-attention forwards fill the trace but it recorded no shapes (rocprofiler-sdk, no Input Dims): "
         "the grid gives B1 H32 and 256 query blocks, never the key length, so no FLOPs and no efficiency; the "
         "report says so (an info note with what the grid gave) instead of a healthy silence or an invented rate",
         present={"attention_efficiency_unknown"}, absent={"attention_efficiency", "kernel_efficiency"},
         check=_check_attention_without_shapes),
    case("v100_fp32_conv_fp16_advice", _v100_fp32_conv, "precision",
         "FP32 convolutions on a V100: it has FP16 tensor cores but no BF16/TF32, so the advice is fp16 "
         "autocast with a GradScaler", absent={"kernel_efficiency"}, check=_check_v100),
    case("one_kernel_varies_several_fold", _varying_kernel, "kernel_variance",
         "the same kernel with the same shapes and grid takes 100 µs three times a step and 500 µs once, alone "
         "on the GPU: a third of the step is time above its median", check=_check_variance),
    case("a100_xmma_ffma_gemm_is_not_tensor_core", _a100_ffma_gemm, "precision",
         "an FP32 GEMM on an A100 runs cuBLAS's xmma FFMA kernel on the CUDA cores: precision names it as FP32 "
         "without tensor cores (bf16 autocast, or at least TF32)", absent={"kernel_efficiency"}, check=_check_ffma),
]
