"""Model FLOPs utilisation (aiprof.roofline.mfu) on hand-built traces with known answers."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

import aiprof
from aiprof.roofline.mfu import mfu_section, mfu_text
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

BF = "c10::BFloat16"


def _load(b: TraceBuilder, tmp_path: Path) -> Trace:
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    return trace


def test_mfu_is_matrix_flops_per_step_over_the_dense_peak_of_the_dtype(tmp_path: Path) -> None:
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    for i in range(2):
        base = i * 1000
        b.step(i, ts=base, dur=1000)
        mm = b.cpu_op("aten::mm", ts=base + 10, dur=20, shapes=[[4096, 4096], [4096, 4096]], dtypes=[BF, BF])
        b.launch(mm, kernel_ts=base + 40, kernel_dur=500)
        add = b.cpu_op("aten::add", ts=base + 40, dur=5, shapes=[[4096, 4096], [4096, 4096], []], dtypes=[BF, BF, "Scalar"])
        b.launch(add, kernel="add_kernel", kernel_ts=base + 600, kernel_dur=100)
    sec = mfu_section(_load(b, tmp_path))
    flops = 2 * 4096**3  # the add is vector work: not counted
    assert sec.available and sec.dtype == "bf16" and sec.peak_key == "matrix_bf16"
    assert sec.flops_per_step == flops and sec.by_class == {"gemm": 2 * flops}
    assert sec.peak_flops_per_s == int(989.4e12)
    assert sec.mfu == pytest.approx(flops / (1e-3 * 989.4e12))  # 1 ms steps
    assert sec.steps and [s.mfu for s in sec.steps] == pytest.approx([sec.mfu, sec.mfu])
    assert "MFU 13.9%" in mfu_text(sec) and "989 TFLOP/s dense matrix_bf16" in mfu_text(sec)


def test_no_mfu_without_matrix_ops(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::add", ts=10, dur=5, shapes=[[64, 64], [64, 64], []], dtypes=["float", "float", "Scalar"])
    sec = mfu_section(_load(b, tmp_path))
    assert sec.available is False and sec.reason and "no matrix op" in sec.reason and mfu_text(sec) == ""
    assert msgspec.json.encode(sec) == b'{"available":false,"reason":"%s"}' % sec.reason.encode()


def test_a_device_without_a_known_peak_has_flops_but_no_mfu(tmp_path: Path) -> None:
    b = TraceBuilder(device_name="Imaginary Accelerator 9000")
    b.step(0, ts=0, dur=1000)
    mm = b.cpu_op("aten::mm", ts=10, dur=20, shapes=[[64, 64], [64, 64]], dtypes=["float", "float"])
    b.launch(mm, kernel_ts=40, kernel_dur=50)
    sec = mfu_section(_load(b, tmp_path))
    assert sec.available is False and sec.reason and mfu_text(sec) == ""
    assert sec.flops_per_step == 2 * 64**3 and sec.dtype == "fp32"
