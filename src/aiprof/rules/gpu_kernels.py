"""Rules on how well the GPU's kernels use it: ``precision``, ``tensor_core_alignment``,
``launch_config``, ``optimizer_unfused``.

``precision`` and ``tensor_core_alignment`` read the per-op roofline (``aiprof.roofline``: FLOPs, bytes,
dtype and class of every op from its recorded shapes, time = union of its kernels).

Every saving on kernel time is capped by what the timeline supports (:func:`aiprof.rules.views.kernels.removable_ns`): speeding up
some kernels can never shorten a step below the time the device spends on the rest of its work, so a
saving never exceeds, per step, the step minus the union of the device's other work (= the step's idle
time + the chosen kernels' exclusive time). ``launch_config`` counts a small-grid kernel only while no
other kernel runs on the device: the SMs it leaves free are otherwise used by other streams.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.rules.context import RankContext
from aiprof.rules.framework import fix_text
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.evidence import ms_text, top_ops
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rules.views.kernels import (alone_ns, capped, fp32_matrix_calls, gemm_mnk, kernels_of_ops, matrix_units,
                                        precision_fix)
from aiprof.trace.model import I64, Kind

# AMP gain model (Daydream's, made conservative): a compute-bound GEMM/conv moved from FP32 CUDA cores
# to 16-bit tensor cores runs at least 2x faster in practice (peaks say 4-16x; real layers reach less),
# and a memory-bound one moves half the bytes: both save half of their time.
AMP_GAIN = {"compute-bound": 0.5, "memory-bound": 0.5, "unknown-peaks": 0.5, "latency-bound": 0.0}
_GEMM_NAMES = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::_scaled_mm"}
_HALF = {"c10::Half", "c10::BFloat16", "Half", "BFloat16", "fp16", "bf16"}
_OPTIMIZER = r"^Optimizer\.step#"
_FOREACH = r"^aten::(_foreach_|_fused_)"


# ---------------------------------------------------------------------------------------------------
# precision
# ---------------------------------------------------------------------------------------------------
def _fp32_conv_gain(result: Any, idx: I64) -> Any:
    """AMP gain of FP32 convolutions whose kernels run on FP32 units although TF32 exists: their class
    against the FP32 roof (the roofline assumes cuDNN's TF32 default and may call them latency-bound)."""
    from aiprof.roofline.analysis import LATENCY_PCT

    peaks = result.peaks
    found = peaks.compute_peak("matrix", "fp32") if peaks is not None else None
    if found is None:
        return np.full(idx.size, AMP_GAIN["unknown-peaks"])
    calls = result.calls
    flops = np.array([calls.costs[int(k)].flops for k in calls.cost_id[idx].tolist()], dtype=np.float64)
    roof_ns = flops / found[0] * 1e9
    pct = 100.0 * roof_ns / np.maximum(calls.time_ns[idx], 1)
    return np.where(pct >= LATENCY_PCT, AMP_GAIN["compute-bound"], AMP_GAIN["latency-bound"])


@rank_rule(saving=Saving.TIME, options=("precision_share",), needs=("roofline", "fp32_matrix_calls", "kernels", "steps"))
def precision(ctx: RankContext) -> list[Finding]:
    """FP32 GEMMs / convolutions on a GPU with tensor cores (or FP64 anywhere on the GPU); on a CPU run,
    FP64 matrix work (:func:`cpu_fp64`). CPU runs get no tensor-core advice; the advice follows the device
    (fp16 + GradScaler on Volta/Turing, bf16 on Ampere+ and AMD CDNA)."""
    if not ctx.is_gpu:
        return cpu_fp64(ctx)
    units = matrix_units(ctx)
    if not units.any:
        return []
    # Columnar over the roofline's calls (a big trace has 100k+ GEMM calls): which costs qualify,
    # then each call's time and class.
    result = ctx.views.roofline
    calls = result.calls
    idx, facts = fp32_matrix_calls(ctx)
    if not idx.size:
        return []
    codes, bound_names = result.call_bounds
    code = codes[idx]
    gain = np.array([AMP_GAIN.get(b, 0.5) for b in bound_names])
    call_gain = gain[code]
    recheck = facts.conv_on_fp32_units
    if recheck.any():
        call_gain = np.where(recheck, _fp32_conv_gain(result, idx), call_gain)
    # Summed in call order in Python, as floats: the same total as a loop over the calls
    modelled = sum((calls.time_ns[idx] * call_gain).tolist()) / ctx.step_count
    saving, was_capped = capped(ctx, modelled, facts.kernels)
    if ctx.share(saving) < ctx.options.precision_share:
        return []
    time_by = Counter[str]()
    key = (calls.name[idx] * (len(calls.costs) + 1) + calls.cost_id[idx]) * (len(calls.texts) + 1) + calls.text_id[idx]
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    per_group = np.bincount(group.reshape(-1), weights=calls.time_ns[idx], minlength=len(first))
    for g in np.argsort(first, kind="stable").tolist():  # labels in order of their first call
        i = int(idx[first[g]])
        label = f"{calls.strings[int(calls.name[i])]} {calls.costs[int(calls.cost_id[i])].dtype} "
        time_by[(label + calls.texts[int(calls.text_id[i])][0])[:120]] += int(per_group[g])
    from aiprof.analysis.kernels import MATH_TENSOR_CORE, math_class_codes

    tc_kernels = ctx.kernels[math_class_codes(ctx.trace, ctx.kernels) == MATH_TENSOR_CORE]
    matrix_ns = int(calls.time_ns[idx].sum()) / ctx.step_count
    per_code = np.zeros(len(bound_names), dtype=np.int64)
    np.add.at(per_code, code, calls.time_ns[idx])
    by_bound = {bound_names[k]: int(per_code[k]) for k in unique(code).tolist()}
    families = {calls.costs[int(k)].family for k in unique(calls.cost_id[idx]).tolist()}
    dtypes = {calls.costs[int(k)].dtype for k in unique(calls.cost_id[idx]).tolist()}
    evidence = {
        "fp32_matrix_ns_per_step": int(matrix_ns),
        "fp32_matrix_ops_per_step": round(idx.size / ctx.step_count, 1),
        "compute_capability": units.compute_capability,
        "matrix_units": {"vendor": units.vendor, "fp16": units.fp16, "bf16": units.bf16, "tf32": units.tf32,
                         "fp8": units.fp8},
        "tensor_core_kernels_per_step": round(tc_kernels.size / ctx.step_count, 1),
        "non_tensor_core_fp32_kernels": [
            {"kernel": name[:160], "ns_per_step": int(t / ctx.step_count)}
            for name, t in facts.fp32_kernels.most_common(4)
        ],
        "fp32_ops_already_on_tf32_ns_per_step": int(facts.tf32_tensor_core_ns / ctx.step_count),
        "time_by_bound_ns_per_step": {b: int(by_bound[b] / ctx.step_count) for b in sorted(by_bound)},
        "top_ops": [{"op": k, "ns_per_step": int(v / ctx.step_count)} for k, v in time_by.most_common(5)],
    }
    if was_capped:
        evidence["modelled_saving_ns_per_step"] = int(modelled)
    evidence["matrix_dtype_mix_ns_per_step"] = dtype_mix(ctx, idx)
    fp64_ns = evidence["matrix_dtype_mix_ns_per_step"].get("fp64", 0)
    fix = precision_fix(units, conv="conv" in families, fp64="fp64" in dtypes)
    title = f"FP32 matrix math without tensor cores: {ms_text(matrix_ns)} per step"
    if fp64_ns * 2 >= matrix_ns:  # mostly float64: the first fix is float32 (FP64 runs at 1/2-1/64 the rate)
        title = f"float64 matrix math on the GPU: {ms_text(fp64_ns)} per step"
        fix = FP64_FIX + "; then " + fix[0].lower() + fix[1:]
    return [
        ctx.finding(
            "precision",
            title,
            saving,
            evidence=evidence,
            fix=fix,
            formula="Σ per steady step over FP32/FP64 GEMM, conv and attention ops not already on tensor cores of "
            "gain × GPU time, gain 1/2 (compute- and memory-bound: ≥2x on 16-bit tensor cores, half the bytes) "
            "and 0 for latency-bound ops (a conservative Daydream AMP model); at most the step minus the "
            "device's other work",
            kind="estimate",
            confidence="low",
        )
    ]


# FP64 matrix work on a CPU runs at about half the FP32 rate (AVX2/AVX-512 FMA: twice the float32 lanes
# per instruction; MKL/OpenBLAS DGEMM reaches ~half of SGEMM's FLOP/s), and moves twice the bytes.
CPU_FP64_SLOWDOWN = 2.0
FP64_FIX = ("Compute in float32: model.float() (drop .double()), convert NumPy inputs with torch.from_numpy(x).float() "
            "or create them with dtype=np.float32 (NumPy defaults to float64), and check "
            "torch.get_default_dtype() is torch.float32 (torch.set_default_dtype(torch.float64) makes every new "
            "tensor float64); keep float64 only where double precision is needed")


def fp64_slowdown(peaks: Any) -> tuple[float, str]:
    """How much slower FP64 matrix work runs than FP32 on this CPU: the measured ``aiprof peaks`` ratio
    when both rates are there, else :data:`CPU_FP64_SLOWDOWN`; and where the number came from."""
    if peaks is not None:
        fp32 = peaks.compute_peak("matrix", "fp32")
        fp64 = peaks.compute_peak("matrix", "fp64")
        if fp32 and fp64 and fp32[1] == "matrix_fp32" and fp64[1] == "matrix_fp64" and fp64[0] > 0:
            return max(fp32[0] / fp64[0], 1.0), f"measured peaks ({peaks.name}): fp32/fp64 matmul FLOP/s"
    return CPU_FP64_SLOWDOWN, "typical CPU ratio (~2x: twice the float32 lanes per FMA), no measured peaks"


def dtype_mix(ctx: RankContext, idx: I64) -> dict[str, int]:
    """Time per step of the roofline calls ``idx`` by their dtype (``unknown`` when none was recorded)."""
    calls = ctx.views.roofline.calls
    out: Counter[str] = Counter()
    for k, t in zip(calls.cost_id[idx].tolist(), calls.time_ns[idx].tolist()):
        out[(calls.costs[k].dtype or "unknown") if k >= 0 else "unmodelled"] += t
    return {d: int(t / ctx.step_count) for d, t in out.most_common()}


def cpu_fp64(ctx: RankContext) -> list[Finding]:
    """FP64 GEMM, convolution and attention work on a CPU run (a ``model.double()`` or NumPy's float64
    inputs): saving = FP64 matrix time × (1 − 1/slowdown), slowdown = measured FP32/FP64 rate or ~2x."""
    result = ctx.views.roofline
    calls = result.calls
    lo, hi = ctx.window
    matrix = result.calls_in(lo, hi, ("gemm", "conv", "attention"))
    fp64 = np.array([c.dtype == "fp64" for c in calls.costs] + [False], dtype=bool)
    idx = matrix[fp64[calls.cost_id[matrix]]]
    if not idx.size:
        return []
    fp64_ns = float(calls.time_ns[idx].sum()) / ctx.step_count
    slowdown, source = fp64_slowdown(result.peaks)
    saving = fp64_ns * (1.0 - 1.0 / slowdown)
    if ctx.share(saving) < ctx.options.precision_share:
        return []
    everything = result.calls_in(lo, hi, measured_only=False)
    fp64_all = everything[fp64[calls.cost_id[everything]]]
    evidence = {
        "fp64_matrix_ns_per_step": int(fp64_ns),
        "fp64_matrix_share_of_step": round(ctx.share(fp64_ns), 4),
        "fp64_matrix_ops_per_step": round(idx.size / ctx.step_count, 1),
        "fp64_all_ops_ns_per_step": int(float(calls.time_ns[fp64_all].sum()) / ctx.step_count),
        "fp32_over_fp64_rate": round(slowdown, 2),
        "rate_source": source,
        "matrix_dtype_mix_ns_per_step": dtype_mix(ctx, matrix),
        "top_ops": _fp64_top_ops(ctx, idx),
    }
    return [
        ctx.finding(
            "precision",
            f"float64 matrix math on the CPU: {ms_text(fp64_ns)} per step ({ctx.share(fp64_ns):.0%} of the step)",
            saving,
            evidence=evidence,
            fix=FP64_FIX + ".",
            formula="Σ per steady step of the CPU self time of FP64 GEMM, conv and attention ops × (1 − 1/r), r = "
            "FP32/FP64 matmul rate of this CPU (measured by `aiprof peaks`, else 2)",
            kind="estimate",
            confidence="medium",
        )
    ]


class Fp64Op(Evidence, kw_only=True):
    """An FP64 op (name and recorded shapes) of ``cpu_fp64``'s evidence and its time per step."""

    op: str
    dtype: str
    ns_per_step: int


def _fp64_top_ops(ctx: RankContext, idx: I64) -> list[Fp64Op]:
    calls = ctx.views.roofline.calls
    by: Counter[str] = Counter()
    for i in idx.tolist():
        by[f"{calls.strings[int(calls.name[i])]} {calls.texts[int(calls.text_id[i])][0]}"[:120]] += int(calls.time_ns[i])
    return [Fp64Op(op=k, dtype="fp64", ns_per_step=int(v / ctx.step_count)) for k, v in by.most_common(5)]


# ---------------------------------------------------------------------------------------------------
# tensor_core_alignment
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.TIME, options=("alignment_share",), needs=("cpu_ops", "attention", "shaped_ops", "kernels", "steps"))
def tensor_core_alignment(ctx: RankContext) -> list[Finding]:
    """16-bit / 8-bit GEMMs whose M, N or K is not a multiple of 8 (16-bit) or 16 (8-bit)."""
    if not ctx.is_gpu:
        return []
    c = ctx.trace.columns
    from aiprof.analysis.ops import gpu_ns_per_op

    gpu_total = gpu_ns_per_op(ctx.trace)[1]
    gemm_names = [i for i, name in enumerate(ctx.trace.strings) if name in _GEMM_NAMES]
    ops = ctx.cpu_ops[arrays.isin(c.name[ctx.cpu_ops], gemm_names)]
    ops = ops[gpu_total[ops] > 0]
    attention = ctx.views.attention.score_dims
    # What an op's name and recorded inputs say (M, N, K, multiple, label) is worked out once per
    # distinct (name, inputs); the calls then only add up their GPU times.
    sig = ctx.trace.op_signatures(ops)
    key = c.name[ops].astype(np.int64) * (ctx.trace.op_args.distinct + 1) + sig
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    shapes = [_gemm_shape(ctx, int(ops[i]), attention) for i in first.tolist()]
    keep = np.array([s is not None for s in shapes] + [False], dtype=bool)[group]
    ops, group = ops[keep], group[keep]
    bad: Counter[str] = Counter()
    aligned_rate: list[float] = []
    misaligned: list[tuple[int, int, int, int, float]] = []  # row, M, N, K, FLOPs
    for row, g in zip(ops.tolist(), group.tolist(), strict=True):
        m, n, k, flops, aligned, label = shapes[g]
        t = int(gpu_total[row])
        if aligned:
            aligned_rate.append(flops / t)
        else:
            misaligned.append((row, m, n, k, flops))
            bad[label] += t
    if not misaligned:
        return []
    # A misaligned GEMM padded to the multiple would run at the rate the aligned GEMMs of this trace reach
    # (FLOP per ns).
    rate = float(arrays.median(aligned_rate)) if aligned_rate else None
    saving = 0.0
    for row, m, n, k, flops in misaligned:
        gpu_ns = float(gpu_total[row])
        if rate is None:
            continue
        padded = flops * (_up(m, 8) * _up(n, 8) * _up(k, 8)) / max(m * n * k, 1)
        saving += max(gpu_ns - padded / rate, 0.0)
    saving, _ = capped(ctx, saving / ctx.step_count, kernels_of_ops(ctx, np.array([m[0] for m in misaligned], dtype=np.int64)))
    share = ctx.share(saving)
    if rate is not None and share < ctx.options.alignment_share:
        return []
    evidence = {
        "misaligned_gemms_per_step": round(len(misaligned) / ctx.step_count, 1),
        "misaligned_ns_per_step": int(sum(bad.values()) / ctx.step_count),
        "aligned_gemm_flops_per_s": int(rate * 1e9) if rate else None,
        "top_misaligned": [{"gemm": g, "ns_per_step": int(v / ctx.step_count)} for g, v in bad.most_common(4)],
    }
    return [
        ctx.finding(
            "tensor_core_alignment",
            f"{evidence['misaligned_gemms_per_step']} GEMMs per step with dims not a multiple of 8",
            saving,
            evidence=evidence,
            fix=(
                "Pad GEMM dimensions to multiples of 8 (16-bit) or 16 (8-bit), 64 or 128 for best speed: e.g. "
                "round the vocabulary / hidden size up (nn.Embedding(pad_to(vocab, 64), d)), and use batch and "
                "sequence lengths that are multiples of 8."
            ),
            formula="Σ per steady step over misaligned 16/8-bit GEMMs of max(t − FLOPs(padded to the multiple) / "
            "median FLOP rate of this trace's aligned GEMMs, 0)",
            kind="estimate",
            confidence="low",
            severity=None if rate is not None else "info",
        )
    ]


def _gemm_shape(
    ctx: RankContext, row: int, attention: frozenset[tuple[int, ...]]
) -> tuple[int, int, int, float, bool, str] | None:
    """(M, N, K, FLOPs, aligned, label) of a 16/8-bit GEMM call; None for other dtypes, unknown shapes
    and attention GEMMs over S×S scores (the unfused_attention finding covers those)."""
    name = ctx.trace.name_of(row)
    inputs = ctx.trace.op_inputs(row)
    dims = gemm_mnk(name, inputs.dims)
    types = [str(t) for t in inputs.types]
    if dims is None or not types or not any(t in _HALF or "Float8" in t or t == "signed char" for t in types[:3]):
        return None
    mult = 16 if any("Float8" in t or t == "signed char" for t in types[:3]) else 8
    m, n, k, batch = dims
    if (m, n) in attention or (m, k) in attention or (k, n) in attention:
        return None
    flops = 2.0 * float(batch * m * n * k)
    aligned = m % mult == 0 and n % mult == 0 and k % mult == 0
    return m, n, k, flops, aligned, f"{name} M={m} N={n} K={k}"


def _up(v: int, m: int) -> int:
    return -(-v // m) * m


# ---------------------------------------------------------------------------------------------------
# launch_config
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.TIME, options=("tiny_kernel_ns", "occupancy_lt_pct", "launch_config_share"),
           needs=("kernels", "steps"))
def launch_config(ctx: RankContext) -> list[Finding]:
    """Kernels whose grid has fewer blocks than the GPU has SMs: most of the GPU sits idle while they run."""
    if not ctx.is_gpu or ctx.kernels.size == 0:
        return []
    from aiprof.analysis.comm import is_comm_kernel
    from aiprof.analysis.kernels import known_sm_count

    c = ctx.trace.columns
    info = ctx.trace.device_info(ctx.device.device_index)
    sms = info.num_sms or known_sm_count(info.name) or 0
    k = ctx.kernels[~is_comm_kernel(ctx.trace)[ctx.kernels]]
    k = k[(c.grid[k] > 0) & (c.dur[k] >= ctx.options.tiny_kernel_ns)]
    if sms <= 0 or k.size == 0:
        return []
    small = k[c.grid[k] < sms]
    dur, grid = c.dur[small].astype(np.float64), c.grid[small].astype(np.float64)
    alone = alone_ns(ctx, small)
    saving, _ = capped(ctx, float((alone * (sms - grid) / sms).sum()) / ctx.step_count, small)
    occ = c.occupancy_pct[k].astype(np.float64)
    low_occ = k[np.isfinite(occ) & (occ >= 0) & (occ < ctx.options.occupancy_lt_pct)]
    if ctx.share(saving) < ctx.options.launch_config_share:
        return []
    evidence = {
        "sm_count": sms,
        "small_grid_kernels_per_step": round(small.size / ctx.step_count, 1),
        "small_grid_ns_per_step": int(dur.sum() / ctx.step_count),
        "small_grid_alone_ns_per_step": int(alone.sum() / ctx.step_count),
        "median_grid_blocks": int(arrays.median(grid)) if grid.size else 0,
        "low_occupancy_kernels_per_step": round(low_occ.size / ctx.step_count, 1),
        "low_occupancy_threshold_pct": ctx.options.occupancy_lt_pct,
        "top_small_grid_kernels": top_ops(ctx, small, 4),
        "block_not_multiple_of_32": int((c.block[k] % 32 != 0).sum()),
    }
    return [
        ctx.finding(
            "launch_config",
            f"{evidence['small_grid_kernels_per_step']} kernels per step launch fewer blocks than the {sms} SMs",
            saving,
            evidence=evidence,
            fix=fix_text(ctx.trace, "launch_config", (
                "Give the GPU more parallel work per kernel: a larger batch (or fuse several small batches / "
                "heads), split-K or stream-K GEMM variants for skinny shapes (torch.compile(mode='max-autotune')), "
                "and avoid per-sample kernels; block sizes should be multiples of 32."
            )),
            formula="Σ per steady step over non-communication kernels ≥ tiny_kernel_ns with grid < SMs of "
            "t_alone × (SMs − grid) / SMs, t_alone = the part of the kernel's time when no other kernel runs on "
            "the device (other streams use the SMs it leaves free); upper bound: the idle SMs' share of that time",
            confidence="low",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# optimizer_unfused
# ---------------------------------------------------------------------------------------------------
@rank_rule(saving=Saving.TIME, options=("optimizer_kernels_per_step", "min_share"),
           needs=("cpu_ops", "kernels", "steps", "trace"))
def optimizer_unfused(ctx: RankContext) -> list[Finding]:
    """The optimizer step runs per-parameter ops (a Python for-loop over parameters) instead of foreach /
    fused multi-tensor kernels."""
    c = ctx.trace.columns
    ann = ctx.in_window(ctx.trace.rows_of(Kind.USER_ANNOTATION))
    steps = ann[ctx.trace.name_matches(ann, _OPTIMIZER)]
    if steps.size == 0:
        return []
    ops = ctx.cpu_ops
    inside = _inside(c.ts[ops], steps, c)
    ops = ops[inside & ctx.trace.name_matches(ops, r"^aten::")]
    fused = ops[ctx.trace.name_matches(ops, _FOREACH)]
    per_step = _outermost(ctx, ops).size / ctx.step_count
    if fused.size or per_step < ctx.options.optimizer_kernels_per_step:
        return []
    span, busy = _span_and_busy(ctx, steps)
    saving = max(span - busy, 0.0) / ctx.step_count
    if ctx.share(saving) < ctx.options.min_share:
        return []
    names = Counter(ctx.trace.name_of(s).split("#", 1)[-1] for s in steps.tolist())
    evidence = {
        "optimizer": names.most_common(1)[0][0],
        "optimizer_ops_per_step": round(per_step, 1),
        "optimizer_span_ns_per_step": int(span / ctx.step_count),
        "optimizer_busy_ns_per_step": int(busy / ctx.step_count),
        "top_ops": top_ops(ctx, _outermost(ctx, ops), 4),
    }
    return [
        ctx.finding(
            "optimizer_unfused",
            f"Per-parameter optimizer: {per_step:.0f} ops per step in {evidence['optimizer']}",
            saving,
            evidence=evidence,
            fix=_optimizer_fix(ctx.is_gpu),
            formula="Σ per steady step of (extent of the optimizer's kernels − their union) on GPU, or (optimizer "
            "span − union of its ops) on CPU: the launch / dispatch overhead multi-tensor kernels remove",
            kind="estimate",
            confidence="low",
        )
    ]


def _optimizer_fix(gpu: bool) -> str:
    """The multi-tensor advice for the device the run used (``fused=True`` is a GPU kernel; on the CPU the
    ``foreach`` path is what batches the per-parameter ops)."""
    if gpu:
        return (
            "Use the multi-tensor implementations: torch.optim.AdamW(params, lr=..., fused=True) on CUDA "
            "(or foreach=True), and avoid custom per-parameter update loops; apex / torch fused optimizers "
            "launch a handful of kernels for all parameters."
        )
    return (
        "Use the multi-tensor implementation: torch.optim.AdamW(params, lr=..., foreach=True) updates all "
        "parameters in a few batched ops instead of several ops per parameter; avoid custom per-parameter "
        "update loops in Python (torch.compile of the optimizer step also batches them)."
    )


def _inside(ts: I64, spans: I64, c: Any) -> Any:
    starts = c.ts[spans]
    ends = starts + c.dur[spans]
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = idx >= 0
    result = np.zeros(ts.shape, dtype=bool)
    result[ok] = ts[ok] < ends[idx[ok]]
    return result


def _outermost(ctx: RankContext, ops: I64) -> I64:
    from aiprof.trace import links

    par = links.parent(ctx.trace)[ops]
    kept: I64 = ops[~arrays.isin(par, ops)]
    return kept


def _span_and_busy(ctx: RankContext, spans: I64) -> tuple[float, float]:
    """Where the optimizer runs and how much of that the device worked. GPU: the extent of each step's
    optimizer kernels and their union (the gaps are launch overhead the GPU waited through). CPU: the
    optimizer spans and the union of their outermost aten ops (the rest is Python between ops)."""
    from aiprof.analysis import intervals as iv

    c = ctx.trace.columns
    if ctx.is_gpu:
        k = ctx.kernels
        issuer = ctx.issuing_op[k]
        mine = k[(issuer >= 0) & _inside(c.ts[np.maximum(issuer, 0)], spans, c)]
        if mine.size == 0:
            return 0.0, 0.0
        owner = np.searchsorted(np.sort(c.ts[spans]), c.ts[ctx.issuing_op[mine]], side="right") - 1
        extent = 0.0
        for o in unique(owner).tolist():
            sel = mine[owner == o]
            extent += float((c.ts[sel] + c.dur[sel]).max() - c.ts[sel].min())
        return extent, float(iv.total(iv.merge(c.ts[mine], c.ts[mine] + c.dur[mine])))
    span_set = iv.merge(c.ts[spans], c.ts[spans] + c.dur[spans])
    ops = ctx.cpu_ops
    top = _outermost(ctx, ops[_inside(c.ts[ops], spans, c) & ctx.trace.name_matches(ops, r"^aten::")])
    return float(iv.total(span_set)), float(iv.total(iv.intersect(iv.merge(c.ts[top], c.ts[top] + c.dur[top]), span_set)))
