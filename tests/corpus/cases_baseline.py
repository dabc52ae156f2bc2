"""Baseline classes: a healthy trace says nothing; a plain data-loading stall is named first."""

from __future__ import annotations

from pathlib import Path

from corpus import Case, case
from kineto_builder import TraceBuilder


def _busy_gpu(tmp: Path) -> Path:
    """Six steps, each a big GEMM that keeps the GPU busy from the first launch to the step's end."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 5, dur=10, shapes=[[8192, 8192], [8192, 8192]], dtypes=["c10::BFloat16"] * 2)
        b.launch(op, kernel="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", kernel_ts=t0 + 8,
                 kernel_dur=990, grid=(132, 1, 1))
    return b.write(tmp / "busy.json")


def _loader_stall(tmp: Path) -> Path:
    """Every step waits 400 µs in a single-process DataLoader before its 500 µs of GEMM."""
    b = TraceBuilder()
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        b.dataloader(ts=t0 + 10, dur=400)
        op = b.cpu_op("aten::mm", ts=t0 + 420, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 450, kernel_dur=500, grid=(264, 1, 1))
    return b.write(tmp / "loader.json")


CASES: list[Case] = [
    case("busy_gpu_says_nothing", _busy_gpu, None,
         "the GPU runs one large GEMM back to back: no idle, nothing to fix"),
    case("loader_stall_first", _loader_stall, "data_loading",
         "40 % of every step is the GPU waiting for the next batch", absent={"launch_bound"}),
]
