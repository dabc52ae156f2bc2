"""The attention path from kernel names, its share of kernel time and its rate vs the peak (roofline/attention.py).

Real data: the H200 planted pair (unfused fp32 attention by hand; SDPA, which on fp32 runs CUTLASS's
memory-efficient kernel), shared H100 / MI300X traces with FlashAttention and AOTriton kernels; synthetic traces
for the paths no recorded trace has (cuDNN, no shapes, a softmax that is not attention).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec import UNSET
from kineto_builder import TraceBuilder

import aiprof
from aiprof.report.render import render
from aiprof.roofline.attention import attention_path, attention_section, short_kernel_name
from aiprof.trace.model import Trace
from golden.shared_reports import no_measured_peaks

H200 = Path(__file__).resolve().parents[1] / "gpu" / "fixtures" / "h200"
B, H, S, D = 1, 4, 2048, 32  # aiprof.workloads.planted.ATTENTION_SHAPE


def _load(path: Path) -> Trace:
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


@pytest.mark.parametrize(("name", "path"), [
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t>, false>(pytorch_flash::Flash_fwd_params)", "flash"),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>(Flash_bwd_params)", "flash"),
    ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<cute::tuple<>>>(flash::Params)", "flash"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", "cudnn"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
     "true, 64, 64, 64, true, true>::Params)", "memory_efficient"),
    ("fmha_cutlassB_bf16_aligned_128x64_k128_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<>::Params)",
     "memory_efficient"),
    ("void ck_tile::kentry<64, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<>>>()", "ck"),
    ("attn_fwd", "triton"),
    ("bwd_kernel_dk_dv", "triton"),
    ("triton_tem_fused_flex_attention_0", "flex"),
    ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>(__hip_bfloat16 const*)", "paged"),
    ("kernel_unified_attention_2d", "paged"),
    # Named after attention but none of its work: Inductor pointwise fusions, KV-cache writes; other kernels.
    ("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10", None),
    ("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16>(__hip_bfloat16 const*)", None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas", None),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false>(float*)", None),
])
def test_path_from_kernel_name(name: str, path: str | None) -> None:
    assert attention_path(name) == path


def test_short_kernel_name() -> None:
    assert short_kernel_name("void pytorch_flash::flash_fwd_kernel<a, b>(p)") == "pytorch_flash::flash_fwd_kernel"
    assert short_kernel_name("attn_fwd") == "attn_fwd"
    assert short_kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16>(c10::"
                             "BFloat16*)") == "at::native::cunn_SoftMaxForward"


def test_h200_unfused_attention_by_hand() -> None:
    """matmul → scale → softmax → matmul (fp32): the chain is one unfused attention per step with the
    planted shape, and its FLOPs are the two GEMMs' 4·B·H·S²·D."""
    with no_measured_peaks():
        sec = attention_section(_load(H200 / "planted-attention.pt.trace.json.gz"))
    assert sec.available and [p.path for p in sec.paths] == ["unfused"]
    (p,) = sec.paths
    steps = len(sec.steps)
    assert steps == 5 and p.calls == steps
    assert p.kernel_count == 4 * steps  # QK^T GEMM, scale, softmax, PV GEMM; the projections are not in it
    assert "softmax_warp_forward" in p.kernels[0]
    assert p.flops == 4 * B * H * S * S * D * steps
    (shape,) = p.shapes
    assert (shape.batch, shape.heads, shape.q_len, shape.kv_len, shape.head_dim, shape.dtype) == (B, H, S, S, D, "fp32")
    assert 0.8 < p.share < 1.0 and 0.8 < float(sec.share or 0) < 1.0
    assert all(0.8 < s.share < 1.0 and set(s.by_path) == {"unfused"} for s in sec.steps)
    assert p.timed_ns == p.gpu_ns  # the whole chain's time is the rate's denominator
    assert p.peak_key == "matrix_fp32" and 0.0 < float(p.fraction_of_peak or 0) < 1.0
    assert float(p.achieved_flops_per_s or 0) == pytest.approx(int(p.flops) / (p.gpu_ns / 1e9))


def test_h200_sdpa_runs_memory_efficient() -> None:
    """The fix (SDPA on fp32 q, k, v) runs CUTLASS's memory-efficient kernel: one call per step, the shape from
    the SDPA op's inputs, the same FLOPs as the unfused chain in less time (a higher rate)."""
    with no_measured_peaks():
        fixed = attention_section(_load(H200 / "planted-attention-fixed.pt.trace.json.gz"))
        planted = attention_section(_load(H200 / "planted-attention.pt.trace.json.gz"))
    (p,) = fixed.paths
    assert p.path == "memory_efficient" and p.kernels[0].startswith("fmha_cutlassF_f32")
    assert p.calls == len(fixed.steps) == 5 and p.kernel_count == 5
    (shape,) = p.shapes
    assert (shape.batch, shape.heads, shape.q_len, shape.head_dim, shape.causal, shape.backward) == (B, H, S, D, False, False)
    assert p.flops == planted.paths[0].flops
    assert p.gpu_ns < planted.paths[0].gpu_ns
    assert float(p.achieved_flops_per_s or 0) > float(planted.paths[0].achieved_flops_per_s or 0)


@pytest.mark.parametrize(("rel", "path", "device"), [
    ("tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz", "flash", "H100"),
    ("tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz", "triton", "MI300X"),
])
def test_shared_flash_traces(traces_dir: Path, rel: str, path: str, device: str) -> None:
    """A ViT (12 layers, B4 H12 S197 D64 bf16) in one step: 12 flash calls, on the bf16 dense peak."""
    with no_measured_peaks():
        sec = attention_section(_load(traces_dir / rel))
    (p,) = sec.paths
    assert p.path == path and p.calls == 12 and device in str(sec.device)
    (shape,) = p.shapes
    assert (shape.batch, shape.heads, shape.q_len, shape.head_dim, shape.dtype) == (4, 12, 197, 64, "bf16")
    assert p.flops == 12 * 4 * 4 * 12 * 197 * 197 * 64
    assert p.peak_key == "matrix_bf16" and 0.0 < float(p.fraction_of_peak or 0) < 0.2


def _sdpa_trace(tmp_path: Path, kernel: str, *, shapes: bool) -> Path:
    b = TraceBuilder()
    for n in range(2):
        t0 = n * 1000
        b.step(n, ts=t0, dur=900)
        # query, key, value, attn_bias (None), compute_log_sumexp, dropout_p, is_causal, return_debug_mask
        kw = {"shapes": [[2, 8, 1024, 128]] * 3 + [[]] * 5, "dtypes": ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar",
              "Scalar", "Scalar"], "concrete": ["", "", "", "", "True", "0.", "True", "False"]} if shapes else {}
        sdpa = b.cpu_op("aten::_scaled_dot_product_cudnn_attention", ts=t0 + 10, dur=50, **kw)  # type: ignore[arg-type]
        b.launch(sdpa, kernel=kernel, kernel_ts=t0 + 100, kernel_dur=300)
        mm = b.cpu_op("aten::mm", ts=t0 + 70, dur=20, shapes=[[2048, 1024], [1024, 1024]], dtypes=["c10::BFloat16"] * 2)
        b.launch(mm, kernel="sm90_xmma_gemm_bf16bf16_bf16f32", kernel_ts=t0 + 400, kernel_dur=100)
    b.raw({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}})
    return b.write(tmp_path / "sdpa.json")


def test_cudnn_sdpa_with_and_without_shapes(tmp_path: Path) -> None:
    kernel = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0"
    sec = attention_section(_load(_sdpa_trace(tmp_path, kernel, shapes=True)))
    (p,) = sec.paths
    assert p.path == "cudnn" and p.calls == 2 and p.gpu_ns_per_step == 300_000
    assert p.share == pytest.approx(0.75) and [s.share for s in sec.steps] == [pytest.approx(0.75)] * 2
    (shape,) = p.shapes
    assert shape.causal and (shape.batch, shape.heads, shape.q_len, shape.head_dim) == (2, 8, 1024, 128)
    assert p.flops_per_step == 4 * 2 * 8 * 1024 * 1024 * 128 // 2  # causal, Sq == Sk: half the pairs
    bare = attention_section(_load(_sdpa_trace(tmp_path, kernel, shapes=False)))
    (q,) = bare.paths
    assert q.path == "cudnn" and q.gpu_ns == p.gpu_ns and q.flops is UNSET
    assert "record_shapes" in str(q.shapes_missing)


def test_a_softmax_that_is_not_attention(tmp_path: Path) -> None:
    """A classifier's softmax over [32, 1000] logits between two GEMMs is no attention (scores are ≥ 3-D)."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=900)
    for i, (name, kernel, shape) in enumerate([("aten::mm", "sm90_xmma_gemm_f32", [[32, 512], [512, 1000]]),
                                               ("aten::_softmax", "softmax_warp_forward<float>", [[32, 1000]]),
                                               ("aten::mm", "sm90_xmma_gemm_f32", [[32, 1000], [1000, 512]])]):
        op = b.cpu_op(name, ts=10 + 50 * i, dur=30, shapes=shape)
        b.launch(op, kernel=kernel, kernel_ts=300 + 100 * i, kernel_dur=50)
    sec = attention_section(_load(b.write(tmp_path / "cls.json")))
    assert not sec.available and "no attention kernel" in str(sec.reason)


def test_cpu_trace_has_no_attention_section(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mm", ts=10, dur=20, shapes=[[4, 8], [8, 16]])
    sec = attention_section(_load(b.write(tmp_path / "cpu.json")))
    assert not sec.available and sec.reason == "no device kernels in the trace"


@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_every_format_names_the_path(fmt: str) -> None:
    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.report.document import build_document

    with no_measured_peaks():
        doc = build_document(*analyze_and_diagnose([str(H200 / "planted-attention-fixed.pt.trace.json.gz")]))
    out = render(doc, fmt, width=200)
    if fmt == "json":
        import json

        (rank,) = json.loads(out)["ranks"]
        assert rank["attention"]["available"] and rank["attention"]["paths"][0]["path"] == "memory_efficient"
    else:
        assert "memory-efficient attention (CUTLASS / xFormers)" in out
        assert "B1 H4 S2048 D32 fp32" in out and "fmha_cutlassF_f32_aligned_64x64_rf_sm80" in out
        assert "% of the 67 TFLOP/s matrix fp32 peak" in out
