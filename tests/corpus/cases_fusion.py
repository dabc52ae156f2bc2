"""Fusion classes: a chain of elementwise kernels is worth fusing when its time is the step's; when another
stream's work covers it, fusing it cannot shorten the step (the saving is capped by the timeline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import Case, case
from kineto_builder import TraceBuilder

F = "float"
X = [4096, 4096]  # 64 MB of fp32 per tensor


def _chain_steps(tmp: Path, *, other_stream: bool) -> Path:
    """Eight steps on an H100, each a chain add → mul → relu over 64 MB tensors (80 µs per kernel, ~70 % of
    the HBM bandwidth), then 150 µs of GEMM. With ``other_stream``, a second stream runs a GEMM over the
    whole chain (a pipeline stage, a side branch): the chain never holds the device alone."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    for i in range(8):
        t0 = i * 400
        b.step(i, ts=t0, dur=400)
        add = b.cpu_op("aten::add", ts=t0 + 2, dur=4, shapes=[X, X, []], dtypes=[F, F, "Scalar"], concrete=["", "", "1"])
        b.launch(add, kernel="void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
                 kernel_ts=t0 + 8, kernel_dur=80, grid=(65536, 1, 1))
        mul = b.cpu_op("aten::mul", ts=t0 + 8, dur=4, shapes=[X, X], dtypes=[F, F])
        b.launch(mul, kernel="void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>",
                 kernel_ts=t0 + 88, kernel_dur=80, grid=(65536, 1, 1))
        relu = b.cpu_op("aten::relu", ts=t0 + 14, dur=4, shapes=[X], dtypes=[F])
        b.launch(relu, kernel="void at::native::vectorized_elementwise_kernel<4, at::native::ClampMinFunctor<float>>",
                 kernel_ts=t0 + 168, kernel_dur=80, grid=(65536, 1, 1))
        # 3584³ bf16 in 150 µs: 614 TFLOP/s, 62 % of the H100's dense bf16 roof (a healthy GEMM)
        mm = b.cpu_op("aten::mm", ts=t0 + 20, dur=4, shapes=[[3584, 3584], [3584, 3584]], dtypes=["c10::BFloat16"] * 2)
        b.launch(mm, kernel="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", kernel_ts=t0 + 248,
                 kernel_dur=150, grid=(132, 1, 1))
        if other_stream:
            side = b.cpu_op("aten::mm", ts=t0 + 1, dur=1, shapes=[[8192, 4096], [4096, 2048]],
                            dtypes=["c10::BFloat16"] * 2)
            b.launch(side, kernel="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64", kernel_ts=t0 + 6,
                     kernel_dur=244, grid=(132, 1, 1), stream=9, ts=t0 + 1, dur=1)
    return b.write(tmp / ("chain_overlapped.json" if other_stream else "chain.json"))


def _alone(tmp: Path) -> Path:
    return _chain_steps(tmp, other_stream=False)


def _overlapped(tmp: Path) -> Path:
    return _chain_steps(tmp, other_stream=True)


def _check_alone(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    # t_chain 240 µs × (1 − 256 MB external / 512 MB moved) = 120 µs of a 400 µs step
    assert 100_000 <= f["est_saving_ns_per_step"] <= 130_000, f


CASES: list[Case] = [
    case("elementwise_chain_alone_is_fused_first", _alone, "fusion_opportunity",
         "add → mul → relu over 64 MB tensors hold 60 % of every step alone on the GPU: one fused kernel moves "
         "half the bytes", check=_check_alone),
    case("elementwise_chain_under_another_stream", _overlapped, None,
         "the same chain, but another stream's GEMM runs through all of it: a faster chain leaves that GEMM as "
         "long as before, so the timeline supports no saving and nothing is claimed",
         absent={"fusion_opportunity"}),
]
