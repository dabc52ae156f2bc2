"""attention_efficiency: a fused attention path that dominates the step far below its attainable fraction of the
matrix peak gets a finding (issue #22 class 6: ten flash-attention forwards, bf16, B1 H32 S32768 d128 at ~20 % of
the peak); one near its attainable fraction, or a small share of the step, stays quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.rules import DEFAULT_OPTIONS, Finding, diagnose_rank
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

B, H, S, D = 1, 32, 32768, 128
FLOPS = 4 * B * H * S * S * D  # one non-causal forward
H200_BF16 = 989.4e12  # the spec table's dense BF16 peak of an H200 (checked below against the evidence)
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
CK = "fmha_fwd_d128_bf16_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_w32x32x16_qr_async_vr_psddv_nlogits"


def _trace(tmp_path: Path, *, fraction: float, other_us: float = 0.0, device: str = "NVIDIA H200",
           kernel: str = FLASH, peak: float = H200_BF16) -> Trace:
    """Ten steps of one flash forward each, its kernel at ``fraction`` of ``peak``, then ``other_us`` of GEMM."""
    b = TraceBuilder(device_name=device)
    b._device_props[0].update(computeMajor=9, computeMinor=0, numSms=132)
    attn_us = FLOPS / (fraction * peak) * 1e6
    step_us = attn_us + other_us + 100
    for n in range(10):
        t0 = n * step_us
        b.step(n, ts=t0, dur=step_us)
        op = b.cpu_op("aten::_scaled_dot_product_flash_attention", ts=t0 + 5, dur=20,
                      shapes=[[B, H, S, D]] * 3 + [[], [], [], []],
                      dtypes=["c10::BFloat16"] * 3 + ["Scalar"] * 4, concrete=["", "", "", "0.", "False", "False", ""])
        b.launch(op, kernel=kernel, kernel_ts=t0 + 30, kernel_dur=attn_us, grid=(S // 128, B, H))
        if other_us:
            mm = b.cpu_op("aten::mm", ts=t0 + 40, dur=10, shapes=[[8192, 8192], [8192, 8192]],
                          dtypes=["c10::BFloat16"] * 2)
            b.launch(mm, kernel="sm90_xmma_gemm_bf16bf16_bf16f32", kernel_ts=t0 + 40 + attn_us, kernel_dur=other_us)
    trace = aiprof.load(b.write(tmp_path / "attn.json"))
    assert isinstance(trace, Trace)
    return trace


def _findings(trace: Trace) -> dict[str, Finding]:
    found, _ = diagnose_rank(trace, analyze_trace(trace), DEFAULT_OPTIONS)
    return {f.id: f for f in found}


def test_flash_at_a_fifth_of_the_peak_is_a_finding(tmp_path: Path) -> None:
    found = _findings(_trace(tmp_path, fraction=0.2))
    f = found["attention_efficiency"]
    ev = f.evidence
    assert ev["path"] == "flash" and ev["peak"] == "matrix_bf16" and ev["dtype"] == "bf16"
    assert ev["peak_flops_per_s"] == pytest.approx(H200_BF16, rel=0.01)
    assert ev["pct_of_peak"] == pytest.approx(20.0, abs=0.5)
    (shape,) = ev["shapes"]
    assert (shape["batch"], shape["heads"], shape["q_len"], shape["head_dim"]) == (B, H, S, D)
    # attainable 0.5 of the peak: t × (1 − 0.2 / 0.5) = 60 % of the attention time
    assert f.est_saving_ns_per_step == pytest.approx(0.6 * ev["ns_per_step"], rel=0.02)
    assert f.saving_kind == "estimate" and "FlashAttention-3" in f.fix
    assert "kernel_efficiency" not in found  # one finding for one problem


def test_amd_attainable_is_lower(tmp_path: Path) -> None:
    """On an MI300X (1307 dense BF16 TFLOP/s) CK's FMHA at 20 % is judged against 0.5 × 0.6 = 30 %."""
    f = _findings(_trace(tmp_path, fraction=0.2, device="AMD Instinct MI300X", kernel=CK, peak=1307.4e12))
    ev = f["attention_efficiency"].evidence
    assert ev["path"] == "ck" and ev["attainable_fraction_of_peak"] == pytest.approx(0.3)
    assert f["attention_efficiency"].est_saving_ns_per_step == pytest.approx(
        (1 - ev["pct_of_peak"] / 100 / 0.3) * ev["ns_per_step"], rel=0.02)


def test_near_the_attainable_fraction_stays_quiet(tmp_path: Path) -> None:
    assert "attention_efficiency" not in _findings(_trace(tmp_path, fraction=0.45))


def test_a_small_share_of_the_step_stays_quiet(tmp_path: Path) -> None:
    attn_us = FLOPS / (0.2 * H200_BF16) * 1e6
    found = _findings(_trace(tmp_path, fraction=0.2, other_us=attn_us * 19))  # attention 5 % of the step
    assert "attention_efficiency" not in found


def test_shape_factor_lowers_what_short_or_narrow_attention_attains() -> None:
    from aiprof.rules.kernel_efficiency import shape_factor

    assert shape_factor(128, 32768) == 1.0 and shape_factor(256, 4096) == 1.0
    assert shape_factor(64, 4096) == pytest.approx(0.8) and shape_factor(32, 4096) == pytest.approx(0.6)
    assert shape_factor(128, 559) == pytest.approx(0.7) and shape_factor(64, 300) == pytest.approx(0.4)
    assert shape_factor(128, 1024) > shape_factor(128, 1023)
