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


# --- without shapes (issue #22 class 6: rocprofiler-sdk, no Input Dims) -------------------------------------
AOTRITON = "attn_fwd"


def _unshaped(tmp_path: Path, *, kernel: str, grid: tuple[int, int, int], device: str = "AMD Instinct MI300X",
              shaped_grid: tuple[int, int, int] | None = None) -> Trace:
    """Ten steps of one attention forward each, 99 % of the step, its op without ``Input Dims``; with
    ``shaped_grid``, one more call per step whose op has shapes (B1 H32) and that grid."""
    b = TraceBuilder(device_name=device)
    attn_us = 20_000.0
    step_us = attn_us * (2 if shaped_grid else 1) + 200
    for n in range(10):
        t0 = n * step_us
        b.step(n, ts=t0, dur=step_us)
        op = b.cpu_op("aten::_scaled_dot_product_flash_attention", ts=t0 + 5, dur=20)
        b.launch(op, kernel=kernel, kernel_ts=t0 + 30, kernel_dur=attn_us, grid=grid, block=(256, 1, 1))
        if shaped_grid:
            op = b.cpu_op("aten::_scaled_dot_product_flash_attention", ts=t0 + 60, dur=20,
                          shapes=[[B, H, S, D]] * 3 + [[], [], [], []],
                          dtypes=["c10::BFloat16"] * 3 + ["Scalar"] * 4, concrete=["", "", "", "0.", "False", "False", ""])
            b.launch(op, kernel=kernel, kernel_ts=t0 + 40 + attn_us, kernel_dur=attn_us, grid=shaped_grid)
    trace = aiprof.load(b.write(tmp_path / "unshaped.json"))
    assert isinstance(trace, Trace)
    return trace


def test_no_shapes_aotriton_says_what_its_grid_gives_and_that_efficiency_is_unknown(tmp_path: Path) -> None:
    """AOTriton attn_fwd launches (⌈Sq/BLOCK_M⌉, H, B): B1 H32 and 256 query blocks, no key length, no D."""
    found = _findings(_unshaped(tmp_path, kernel=AOTRITON, grid=(S // 128, H, B)))
    assert "attention_efficiency" not in found  # no FLOPs: no invented rate
    f = found["attention_efficiency_unknown"]
    assert f.severity == "info" and f.est_saving_ns_per_step == 0 and "record_shapes=True" in f.fix
    ev = f.evidence
    assert ev["path"] == "triton" and ev["share_of_step"] > 0.9
    (g,) = ev["grid_shapes"]
    assert (g["batch"], g["heads"], g["q_blocks"], g["grid"]) == (B, H, S // 128, [S // 128, H, B])
    assert g.get("head_dim", 0) == 0 and g.get("q_tile", 0) == 0  # attn_fwd's name says neither
    assert "B1 H32" in ev["why"] and "key length nor the head dim" in ev["why"]
    assert f.to_dict()["evidence"]["grid_shapes"][0]["grid"] == [S // 128, H, B]  # JSON-ready (no unset fields)


def test_no_shapes_flash2_reads_head_dim_tile_and_causal_from_the_name(tmp_path: Path) -> None:
    causal = FLASH.replace("cutlass::bfloat16_t>>", "cutlass::bfloat16_t>>, false, true, false, false, true, true, false>")
    f = _findings(_unshaped(tmp_path, kernel=causal, grid=(S // 128, B, H), device="NVIDIA H200"))
    (g,) = f["attention_efficiency_unknown"].evidence["grid_shapes"]
    assert (g["batch"], g["heads"], g["q_blocks"], g["q_tile"], g["q_len_max"], g["head_dim"], g["dtype"]) == (
        B, H, S // 128, 128, S, D, "bf16")
    assert g["causal"] is True
    assert "D128, but not the key length that" in f["attention_efficiency_unknown"].evidence["why"]


def test_a_one_dimensional_aotriton_grid_gives_nothing(tmp_path: Path) -> None:
    """attn_fwd's causal / persistent launches flatten the tiles into x (xDiT: (24, 1, 1) for B1 H12 S77)."""
    ev = _findings(_unshaped(tmp_path, kernel=AOTRITON, grid=(608, 1, 1)))["attention_efficiency_unknown"].evidence
    assert ev["grid_shapes"] == [] and "one-dimensional" in ev["why"]


def test_a_family_without_a_known_grid_layout_is_named(tmp_path: Path) -> None:
    ev = _findings(_unshaped(tmp_path, kernel=CK, grid=(32, 256, 1)))["attention_efficiency_unknown"].evidence
    assert ev["grid_shapes"] == [] and "knows no grid layout for fmha_fwd_d128" in ev["why"]


def test_a_grid_that_contradicts_the_shaped_calls_is_not_read(tmp_path: Path) -> None:
    """A shaped call (B1 H32) whose grid reads as B2 H16: the layout is wrong for this trace, nothing is taken."""
    from aiprof.roofline.attention import attention_section

    agreeing = _unshaped(tmp_path, kernel=AOTRITON, grid=(S // 128, H, B), shaped_grid=(S // 128, H, B))
    (p,) = attention_section(agreeing).paths
    assert [(g.batch, g.heads, g.calls) for g in p.grid_shapes] == [(B, H, 10)]
    contradicting = _unshaped(tmp_path, kernel=AOTRITON, grid=(S // 128, H, B), shaped_grid=(S // 128, 16, 2))
    (p,) = attention_section(contradicting).paths
    assert p.grid_shapes == []


def test_the_grid_layouts_agree_with_the_shapes_of_real_traces(traces_dir: Path) -> None:
    """Where a real trace's attention kernels have shapes, what their grid says must be what the shapes say."""
    from aiprof.roofline.attention import GridDims, _attention_op, attention_path, grid_dims
    from aiprof.trace import links
    from aiprof.trace.model import Kind

    checked = set()
    for name in ["h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "h100/gaunernst_bert-small-uncased__1016001.json.gz",
                 "h100/Falconsai_nsfw_image_detection__1016002.json.gz", "mi300/gaunernst_bert-small-uncased__1016001.json.gz",
                 "mi300/Falconsai_nsfw_image_detection__1016002.json.gz", "inference/xdit_sd_3.5/profile_trace_rank_0.json.gz",
                 "torch_compile_triton/trace.json.gz", "mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]:
        trace = aiprof.load(traces_dir / "tracelens" / name)
        assert isinstance(trace, Trace)
        c, gpu_op = trace.columns, links.gpu_op(trace)
        for row in trace.rows_of(Kind.KERNEL).tolist():
            kernel = trace.name_of(row)
            found = _attention_op(trace, int(gpu_op[row])) if attention_path(kernel) else None
            if found is None:
                continue
            dims = found[1]
            said = grid_dims(kernel, (int(c.grid_x[row]), int(c.grid_y[row]), int(c.grid_z[row])))
            if isinstance(said, GridDims):
                assert (said.batch, said.heads) == (dims.batch, dims.heads), (name, kernel[:60])
                if said.q_tile:
                    assert (said.q_blocks - 1) * said.q_tile < dims.q_len <= said.q_blocks * said.q_tile
                    assert said.head_dim == dims.head_dim and said.causal == dims.causal and said.dtype == dims.dtype
                checked.add((name, short(kernel)))
    assert len(checked) >= 6  # FlashAttention-2 on three H100 traces, attn_fwd on three MI300X / xDiT / compile ones


def short(kernel: str) -> str:
    from aiprof.roofline.attention import short_kernel_name

    return short_kernel_name(kernel)
