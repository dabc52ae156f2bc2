"""Model FLOPs utilisation on shared traces, against a hand computation from the raw JSON: the GEMMs'
2·M·N·K (+ M·N for addmm's bias) and the attentions' 4·B·H·Sq·Sk·D from their recorded shapes, the window from the first to the
last event, and the datasheet's dense bf16 peak (H100 SXM 989.4 TFLOP/s, MI300X 1,307.4 TFLOP/s)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

import aiprof
from aiprof.roofline.mfu import mfu_section

_GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
_SDPA = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
         "aten::_scaled_dot_product_cudnn_attention")


def _dims(e: dict[str, Any]) -> list[Any]:
    value = e.get("args", {}).get("Input Dims")
    return json.loads(value) if isinstance(value, str) else list(value or [])


def _hand_flops(path: Path) -> int:
    events = json.load(gzip.open(path, "rt"))["traceEvents"]
    total = 0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "cpu_op":
            continue
        name, d = e["name"], _dims(e)
        if name == "aten::mm":
            (m, k), (_, n) = d[0], d[1]
            total += 2 * m * n * k
        elif name == "aten::addmm":  # out = bias + a @ b: the bias add is m*n more
            (m, k), (_, n) = d[1], d[2]
            total += 2 * m * n * k + m * n
        elif name in ("aten::bmm", "aten::baddbmm"):
            a, b = (d[0], d[1]) if name == "aten::bmm" else (d[1], d[2])
            total += 2 * a[0] * a[1] * a[2] * b[2] + (a[0] * a[1] * b[2] if name == "aten::baddbmm" else 0)
        elif name in _SDPA:
            (bsz, heads, sq, dim), k = d[0], d[1]
            total += 4 * bsz * heads * sq * k[2] * dim
    return total


@pytest.mark.parametrize(("rel", "peak"), [
    ("tracelens/torch_compile_triton/trace.json.gz", 1307.4e12),  # AMD Instinct MI300X, bf16 dense
    ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", 989.4e12),  # NVIDIA H100 SXM, bf16 dense
])
def test_mfu_matches_a_hand_computation(traces_dir: Path, rel: str, peak: float) -> None:
    path = traces_dir / rel
    trace = aiprof.load(path)
    assert isinstance(trace, aiprof.Trace)
    sec = mfu_section(trace)
    assert sec.available and sec.dtype == "bf16" and sec.peak_key == "matrix_bf16"
    assert sec.peak_flops_per_s == int(peak)
    assert sec.steps and sec.by_class_mfu and sec.mfu
    flops = sum(s.flops for s in sec.steps)
    assert flops == _hand_flops(path)
    duration = sum(s.duration_ns for s in sec.steps)
    assert sec.mfu == pytest.approx(flops / (duration / 1e9 * peak), rel=1e-9)
    assert math.isclose(sum(sec.by_class_mfu.values()), sec.mfu, rel_tol=1e-9)
    matrix = [c for c in sec.by_op_class or [] if c.op_class != "elementwise"]
    assert sum(c.flops for c in matrix) == flops
    assert math.isclose(sum(float(c.mfu or 0.0) for c in matrix), sec.mfu, rel_tol=1e-9)


def test_the_mi300x_compiled_trace_by_hand(traces_dir: Path) -> None:
    """torch_compile_triton: 4 GEMMs 32768x2048x2048, 2 of 32768x2048x8192, 1 of 32768x8192x2048 and one
    flash attention [8, 16, 4096, 128]; no ProfilerStep, so one window from the first cpu_op (12,939.993 µs
    to the last runtime call's end)."""
    trace = aiprof.load(traces_dir / "tracelens/torch_compile_triton/trace.json.gz")
    assert isinstance(trace, aiprof.Trace)
    sec = mfu_section(trace)
    gemm = 4 * 2 * 32768 * 2048 * 2048 + 3 * 2 * 32768 * 2048 * 8192
    attention = 4 * 8 * 16 * 4096 * 4096 * 128
    assert sec.by_class == {"gemm": gemm, "attention": attention}
    assert sec.steps and sec.mfu
    (step,) = sec.steps
    assert step.duration_ns == 12_939_993
    assert sec.mfu == pytest.approx((gemm + attention) / (12.939993e-3 * 1307.4e12), rel=1e-9)
    assert round(100 * sec.mfu, 1) == 32.5
    classes = {c.op_class: c for c in sec.by_op_class or []}
    assert classes["matmul"].flops == gemm and classes["attention"].flops == attention
    assert classes["attention"].mfu == pytest.approx(attention / (12.939993e-3 * 1307.4e12), rel=1e-9)
    assert classes["elementwise"].flops > 0  # the Triton pointwise/reduction kernels: vector work
    from aiprof import app

    text = app.render(app.analyze([traces_dir / "tracelens/torch_compile_triton/trace.json.gz"]), "terminal")
    assert "matmul: 26.00% of peak" in text and "attention: 6.50% of peak" in text, text[:3000]


def test_compare_shows_both_sides_mfu_with_their_peaks(traces_dir: Path) -> None:
    from aiprof import app
    from aiprof.report.compare import compare_reports

    before = app.analyze([traces_dir / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"])
    after = app.analyze([traces_dir / "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz"])
    cmp = compare_reports(before, after)
    assert cmp.mfu is not None
    assert before.ranks[0].mfu and after.ranks[0].mfu
    assert cmp.mfu.before == before.ranks[0].mfu.mfu and cmp.mfu.after == after.ranks[0].mfu.mfu
    assert "NVIDIA H100 SXM" in cmp.mfu_peak and "AMD Instinct MI300X" in cmp.mfu_peak
    for fmt in ("terminal", "md", "html"):
        assert "MFU (matrix_bf16" in app.render(cmp, fmt), fmt
