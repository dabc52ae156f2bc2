"""Rules on GPU kernels that take longer than their work needs: ``kernel_efficiency`` (a dominant op far
below its roofline) and ``kernel_variance`` (one kernel whose calls with the same shapes vary several-fold).

``kernel_efficiency`` reads the per-op roofline (``aiprof.roofline``): only modelled ops (FLOPs and bytes
known from their recorded shapes and dtypes, a known device) can be judged; unmodelled ones get no claim.
Both rules cap their saving by what the timeline supports (:func:`aiprof.rules.views.kernels.removable_ns`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof import arrays
from aiprof.rules.context import RankContext
from aiprof.rules.evidence import ms_text
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rules.views.kernels import alone_ns, capped, fp32_matrix_calls, gemm_mnk, kernels_of_ops, matrix_units, owning_call
from aiprof.trace.model import I64

if TYPE_CHECKING:
    from aiprof.roofline.attention import AttentionPath, AttentionShape

# AMD Instinct spec matrix peaks are further from what libraries reach than NVIDIA's: hipBLASLt BF16 GEMMs on
# an MI300X measure ~600-800 of the 1307 dense TFLOP/s (SemiAnalysis MI300X vs H100 benchmarks, Dec 2024),
# where cuBLAS reaches ~70-80 % of an H100's. The realistic compute fractions are scaled by this on AMD.
AMD_ATTAINABLE_COMPUTE = 0.6

_ATTENTION_FIX = (
    "Make attention run at the fused kernels' speed: torch.nn.functional.scaled_dot_product_attention on "
    "fp16/bf16 q, k, v (contiguous, head_dim a multiple of 8 and ≤ 256) dispatches to FlashAttention; an "
    "arbitrary attn_mask or fp32 inputs push it to the slower memory-efficient or math kernels (use "
    "is_causal=True instead of a causal mask); on Hopper FlashAttention-3 (flash_attn_interface) is faster; "
    "check which kernel runs with torch.nn.attention.sdpa_kernel."
)
_GEMM_FIX = (
    "Get the GEMM onto a fast library kernel: 16-bit dtypes (bf16/fp16) rather than fp32, contiguous operands "
    "(no transpose / .contiguous() copies around it), dimensions that are multiples of 8 (16 for 8-bit), "
    "batched rather than many small GEMMs; let cuBLASLt / torch.compile(mode='max-autotune') choose the "
    "kernel."
)
_CONV_FIX = (
    "Speed up the convolution: torch.backends.cudnn.benchmark = True (cuDNN picks the fastest algorithm), "
    "channels_last memory format, 16-bit autocast, channel counts that are multiples of 8."
)
_MEMORY_FIX = (
    "The op moves far fewer bytes per second than the GPU's bandwidth: fuse it with its neighbours "
    "(torch.compile), make its inputs contiguous (strided or broadcast inputs read memory badly), and use the "
    "fused implementations (fused LayerNorm / RMSNorm, torch.nn.functional ops rather than composed ones)."
)


@dataclass
class _Group:
    """One op name's qualifying calls in the steady steps."""

    name: str
    family: str
    calls: I64  # indices into the roofline's calls
    time_ns: float
    expected_ns: float
    saving_ns: float
    compute_ns: float  # time of its compute-bound calls
    flops: float
    bytes: float
    roof_key: str
    fraction: float


def _roof_per_cost(ctx: RankContext, result: Any) -> tuple[Any, Any, Any, list[str]]:
    """Per cost of the roofline: roof time (ns, 0 when unknown), whether compute-bound, the realistic
    fraction of the roof, and the roof's key."""
    from aiprof.roofline.analysis import RooflineRow, roof_for

    peaks, opt = result.peaks, ctx.options
    attainable = AMD_ATTAINABLE_COMPUTE if matrix_units(ctx).vendor == "amd" else 1.0
    roof = np.zeros(len(result.calls.costs) + 1, dtype=np.float64)
    compute = np.zeros(roof.size, dtype=bool)
    fraction = np.ones(roof.size, dtype=np.float64)
    keys = [""] * roof.size
    if peaks is None or not peaks.memory_bw_bytes_per_s:
        return roof, compute, fraction, keys
    for k, cost in enumerate(result.calls.costs):
        if cost.assumed_dtype:
            continue  # the dtype was guessed: the roof could be the wrong one
        row = RooflineRow("", "", "", "", 1, 0, cost.flops, cost.bytes_read, cost.bytes_written, cost.family,
                          cost.unit, cost.dtype, "")
        found = roof_for(row, peaks)
        if found is None:
            continue
        compute_s, memory_s = cost.flops / found[0], cost.bytes / peaks.memory_bw_bytes_per_s
        roof[k] = max(compute_s, memory_s) * 1e9
        compute[k] = compute_s >= memory_s
        keys[k] = found[1] if compute[k] else "memory_bandwidth"
        if not compute[k]:
            fraction[k] = opt.eta
        elif cost.family in ("gemm", "conv"):
            fraction[k] = opt.roof_fraction_compute * attainable
        else:
            fraction[k] = opt.roof_fraction_attention * attainable
    return roof, compute, fraction, keys


def _on_scores(ctx: RankContext, name: str, dims_text: str) -> bool:
    """Whether a call works on the S×S scores of an unfused attention (``unfused_attention`` covers it)."""
    scores = ctx.views.attention.score_dims
    if not scores:
        return False
    try:
        dims = json.loads(dims_text)
    except ValueError:
        return False
    mnk = gemm_mnk(name, dims) if isinstance(dims, list) else None
    if mnk is not None:
        m, n, k, _ = mnk
        if (m, n) in scores or (m, k) in scores or (k, n) in scores:
            return True
    tensors = [d for d in dims if isinstance(d, list) and len(d) >= 2 and all(isinstance(v, int) for v in d)]
    return any((t[-2], t[-1]) in scores for t in tensors)


def _has_copies(ctx: RankContext, ops: I64) -> Any:
    """For each op, whether memcpy / memset activity of the steady steps belongs to it."""
    from aiprof.trace.model import Kind

    c = ctx.trace.columns
    copies = ctx.in_window(ctx.trace.rows_of(Kind.MEMCPY, Kind.MEMSET))
    copies = copies[(c.device[copies] == ctx.device.device_index) & (ctx.issuing_op[copies] >= 0)]
    out = np.zeros(ops.size, dtype=bool)
    if copies.size and ops.size:
        owner = owning_call(ctx, ops, copies)
        out[owner[owner >= 0]] = True
    return out


def _groups(ctx: RankContext) -> list[_Group]:
    """Op names whose modelled calls hold ≥ ``kernel_efficiency_share`` of the step and would take at
    most half their time at the realistic fraction of their roof."""
    result = ctx.views.roofline
    calls = result.calls
    lo, hi = ctx.window
    idx = result.calls_in(lo, hi)
    idx = idx[calls.cost_id[idx] >= 0]
    if matrix_units(ctx).any:
        idx = arrays.setdiff(idx, fp32_matrix_calls(ctx)[0])  # FP32 matrix work: the precision finding's
    idx = idx[~_has_copies(ctx, calls.op[idx])]  # a copy's time is PCIe/NVLink time, not the HBM roof's
    roof, compute, fraction, keys = _roof_per_cost(ctx, result)
    cost = calls.cost_id[idx]
    # A call whose work would take < 5 µs at the roof is launch / latency territory, not an inefficient kernel.
    idx = idx[roof[cost] >= ctx.options.tiny_kernel_ns / 2]
    if not idx.size:
        return []
    skip = {t for t in arrays.unique(calls.text_id[idx]).tolist()
            if _on_scores(ctx, "", calls.texts[t][0])} if ctx.views.attention.score_dims else set()
    out: list[_Group] = []
    step_ns = ctx.mean_step_ns * ctx.step_count
    for name in arrays.unique(calls.name[idx]).tolist():
        mine = idx[calls.name[idx] == name]
        text = calls.strings[int(name)]
        if skip:  # once per distinct recorded input text of the name, not per call
            texts, per_call = np.unique(calls.text_id[mine], return_inverse=True)
            keep = np.array([not (t in skip or _on_scores(ctx, text, calls.texts[t][0])) for t in texts.tolist()],
                            dtype=bool)
            mine = mine[keep[per_call.reshape(-1)]] if mine.size else mine
        t = calls.time_ns[mine].astype(np.float64)
        if not mine.size or step_ns <= 0 or t.sum() < ctx.options.kernel_efficiency_share * step_ns:
            continue
        k = calls.cost_id[mine]
        expected = roof[k] / fraction[k]
        if expected.sum() > 0.5 * t.sum():
            continue
        costs = [calls.costs[int(c)] for c in k.tolist()]
        family = Counter(c.family for c in costs).most_common(1)[0][0]
        if family == "attention":
            continue  # fused attention: attention_efficiency judges it per path, against its attainable fraction
        main_key = Counter(keys[int(c)] for c in k.tolist()).most_common(1)[0][0]
        out.append(_Group(text, family, mine, float(t.sum()), float(expected.sum()),
                          float(np.maximum(t - expected, 0.0).sum()), float(t[compute[k]].sum()),
                          float(sum(c.flops for c in costs)), float(sum(c.bytes for c in costs)), main_key,
                          float((fraction[k] * t).sum() / t.sum())))
    out.sort(key=lambda g: -g.saving_ns)
    return out


class OpEfficiency(Evidence, kw_only=True):
    """One op of ``kernel_efficiency``'s evidence: its time, what it achieved against its roof (FLOP/s for
    compute-bound work, bytes/s for memory-bound: one pair of the two is set), and what a realistic fraction
    of the roof would take."""

    op: str
    family: str
    bound: str  # "compute-bound" or "memory-bound"
    share_of_step: float
    ns_per_step: int
    calls_per_step: float
    achieved_flops_per_s: int | UnsetType = UNSET
    roof_flops_per_s: int | UnsetType = UNSET
    achieved_bytes_per_s: int | UnsetType = UNSET
    roof_bytes_per_s: int | UnsetType = UNSET
    roof: str
    pct_of_roof: float | None
    expected_fraction_of_roof: float
    expected_ns_per_step: int
    top_input_dims: list[str]
    top_kernels: list[str]


def _group_evidence(ctx: RankContext, g: _Group, result: Any) -> OpEfficiency:
    calls, peaks = result.calls, result.peaks
    n = ctx.step_count
    compute = g.compute_ns >= g.time_ns / 2
    secs = g.time_ns * 1e-9
    if compute:
        achieved, peak = g.flops / secs, float(peaks.flops_per_s.get(g.roof_key, 0.0))
    else:
        achieved, peak = g.bytes / secs, float(peaks.memory_bw_bytes_per_s)
    shapes = Counter[str]()
    for i in g.calls.tolist():
        shapes[calls.texts[int(calls.text_id[i])][0][:100]] += int(calls.time_ns[i])
    kernels = kernels_of_ops(ctx, calls.op[g.calls])
    names = Counter[str]()
    for row in kernels.tolist():
        names[ctx.trace.name_of(row)[:120]] += int(ctx.trace.columns.dur[row])
    row = OpEfficiency(
        op=g.name, family=g.family, bound="compute-bound" if compute else "memory-bound",
        share_of_step=round(ctx.share(g.time_ns / n), 3), ns_per_step=int(g.time_ns / n),
        calls_per_step=round(g.calls.size / n, 1), roof=g.roof_key,
        pct_of_roof=round(100.0 * achieved / peak, 1) if peak else None,
        expected_fraction_of_roof=round(g.fraction, 2), expected_ns_per_step=int(g.expected_ns / n),
        top_input_dims=[s for s, _ in shapes.most_common(3)], top_kernels=[k for k, _ in names.most_common(3)],
    )
    if compute:
        row.achieved_flops_per_s, row.roof_flops_per_s = int(achieved), int(peak)
    else:
        row.achieved_bytes_per_s, row.roof_bytes_per_s = int(achieved), int(peak)
    return row


@rank_rule(saving=Saving.TIME,
           options=("eta", "roof_fraction_compute", "roof_fraction_attention", "tiny_kernel_ns",
                    "kernel_efficiency_share", "min_share"),
           needs=("roofline", "fp32_matrix_calls", "attention", "shaped_ops", "kernels", "steps"))
def kernel_efficiency(ctx: RankContext) -> list[Finding]:
    """A dominant op (≥ ``kernel_efficiency_share`` of the step) that reaches so little of its roofline
    that a realistic fraction of the roof would at least halve its time."""
    if not ctx.is_gpu or ctx.kernels.size == 0:
        return []
    groups = _groups(ctx)
    if not groups:
        return []
    result = ctx.views.roofline
    calls = result.calls
    modelled = sum(g.saving_ns for g in groups) / ctx.step_count
    rows = kernels_of_ops(ctx, calls.op[np.concatenate([g.calls for g in groups])])
    saving, was_capped = capped(ctx, modelled, rows)
    if ctx.share(saving) < ctx.options.min_share:
        return []
    ops = [_group_evidence(ctx, g, result) for g in groups[:4]]
    top = ops[0]
    evidence: dict[str, Any] = {"ops": ops, "peaks": result.peaks_note}
    if was_capped:
        evidence["modelled_saving_ns_per_step"] = int(modelled)
    fix = {"attention": _ATTENTION_FIX, "gemm": _GEMM_FIX, "conv": _CONV_FIX}.get(groups[0].family, _MEMORY_FIX)
    if top.bound == "memory-bound" and groups[0].family != "attention":
        fix = _MEMORY_FIX
    return [
        ctx.finding(
            "kernel_efficiency",
            f"{top.op} takes {top.share_of_step:.0%} of the step at {top.pct_of_roof}% of its "
            f"{'compute' if top.bound == 'compute-bound' else 'memory'} roof ({ms_text(top.ns_per_step)} per step)",
            saving,
            evidence=evidence,
            fix=fix,
            formula="Σ per steady step over the calls of modelled ops holding ≥ kernel_efficiency_share of the step, "
            "where the expected time would be at most half the measured one, of max(t − roof_time / fraction, 0); "
            "fraction = eta for memory-bound calls, roof_fraction_compute for compute-bound GEMMs and convolutions, "
            "roof_fraction_attention for attention and others; at most the step minus the device's other work",
            kind="estimate",
            confidence="medium",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# kernel_variance
# ---------------------------------------------------------------------------------------------------
# Kernels that wait for other GPUs or for flags (custom all-reduce, all-to-all dispatch/combine, barriers): their
# time depends on their peers, whatever the communication classifier calls them.
_WAITS = (r"(?i)(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|all2all|alltoall|barrier|dispatch|combine"
          r"|nvshmem|cross_device|custom_ar|one_?shot|two_?shot|signal|wait|spin|flag)")


@dataclass
class _Spread:
    rows: I64
    median: float
    p10: float
    p90: float
    saving: float
    shapes_known: bool


def _spreads(ctx: RankContext) -> list[_Spread]:
    """Groups of kernel calls that should take the same time (same name, grid, block and issuing op's
    recorded inputs) whose p90 / p10 ≥ ``kernel_variance_ratio``, with enough calls, slow calls in more
    than one step, and slow calls not explained by other kernels running beside them."""
    from aiprof.analysis.comm import is_comm_kernel

    c, opt = ctx.trace.columns, ctx.options
    k = ctx.kernels[~is_comm_kernel(ctx.trace)[ctx.kernels]]
    names = arrays.unique(c.name[k])  # the pattern is tried on the kernels' own names, not every string of the trace
    waits = re.compile(_WAITS)
    is_wait = np.array([bool(waits.search(ctx.trace.strings[n])) for n in names.tolist()], dtype=bool)
    k = k[~arrays.isin(c.name[k], names[is_wait])]
    if k.size < opt.kernel_variance_min_calls:
        return []
    issuer = ctx.issuing_op[k]
    sig = np.where(issuer >= 0, ctx.trace.op_signatures(np.maximum(issuer, 0)), -1)
    # Groups by (name, grid, block, signature) in lexicographic order (``np.unique(axis=0)``'s), each group's
    # calls in time order (the sort is stable), then each group's calls by duration for its percentiles.
    order = np.lexsort((sig, c.block[k], c.grid[k], c.name[k]))
    name_s, grid_s, block_s, sig_s = c.name[k][order], c.grid[k][order], c.block[k][order], sig[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (name_s[1:] != name_s[:-1]) | (grid_s[1:] != grid_s[:-1]) | (block_s[1:] != block_s[:-1]) | (sig_s[1:] != sig_s[:-1])
    starts_g = np.flatnonzero(new)
    counts = np.diff(np.append(starts_g, order.size))
    group = np.cumsum(new) - 1
    dur_all = c.dur[k].astype(np.float64)
    by_dur = order[np.lexsort((dur_all[order], group))]  # group by group, shortest first
    big = np.flatnonzero(counts >= opt.kernel_variance_min_calls)
    if big.size == 0:
        return []
    pct = arrays.sorted_percentiles(dur_all[by_dur], counts[big], starts_g[big], [10, 50, 90])
    # The cheap tests first, on every group at once: only groups that vary enough get the per-group work.
    varies = (pct[:, 1] >= opt.tiny_kernel_ns) & (pct[:, 0] > 0) & (pct[:, 2] >= opt.kernel_variance_ratio * pct[:, 0])
    starts = np.array([s.start_ns for s in ctx.steps], dtype=np.int64)
    alone_all: np.ndarray | None = None
    out: list[_Spread] = []
    for i in np.flatnonzero(varies).tolist():
        g = int(big[i])
        pos = order[starts_g[g]:starts_g[g] + counts[g]]  # this group's calls, in time order
        rows = k[pos]
        dur = dur_all[pos]
        p10, median, p90 = (float(v) for v in pct[i])
        slow = dur > 2 * median
        if len(set(np.searchsorted(starts, c.ts[rows[slow]], side="right").tolist())) < min(2, len(starts)):
            continue  # one slow step, not a kernel that varies: step_variance's business
        if alone_all is None:
            alone_all = alone_ns(ctx, k)
        alone = alone_all[pos[slow]]
        if alone.sum() < 0.5 * dur[slow].sum():
            continue  # most of the slow calls' time shares the GPU with other kernels: contention, not this kernel
        out.append(_Spread(rows, median, p10, p90, float(np.maximum(dur - median, 0).sum()), bool((sig[pos] >= 0).all())))
    out.sort(key=lambda s: -s.saving)
    return out


class KernelVarianceEvidence(Evidence, kw_only=True):
    """``kernel_variance``'s evidence: the kernel (name, grid, block, the op that issued it), whether its calls'
    input shapes are known to be the same, the calls' spread (p10, median, p90, max), and the slow calls'
    count and first start times (ms after the first steady step)."""

    kernel: str
    grid_blocks: int
    block_threads: int
    issuing_op: str | None
    same_input_shapes: bool
    calls: int
    p10_ns: int
    median_ns: int
    p90_ns: int
    max_ns: int
    slow_calls: int
    slow_call_starts_ms: list[float]


@rank_rule(saving=Saving.TIME,
           options=("kernel_variance_min_calls", "tiny_kernel_ns", "kernel_variance_ratio", "kernel_variance_share"),
           needs=("kernels", "steps"))
def kernel_variance(ctx: RankContext) -> list[Finding]:
    """One kernel whose calls with identical launch and input shapes take several-fold different times."""
    if not ctx.is_gpu or ctx.kernels.size == 0:
        return []
    spreads = _spreads(ctx)
    if not spreads:
        return []
    s = spreads[0]
    saving, _ = capped(ctx, s.saving / ctx.step_count, s.rows)
    if ctx.share(saving) < ctx.options.kernel_variance_share:
        return []
    c = ctx.trace.columns
    row = int(s.rows[0])
    dur = c.dur[s.rows]
    slow = s.rows[dur > 2 * s.median]
    origin = ctx.steps[0].start_ns if ctx.steps else int(c.ts[s.rows].min())
    evidence = KernelVarianceEvidence(
        kernel=ctx.trace.name_of(row)[:160],
        grid_blocks=int(c.grid[row]),
        block_threads=int(c.block[row]),
        issuing_op=ctx.trace.name_of(int(ctx.issuing_op[row])) if ctx.issuing_op[row] >= 0 else None,
        same_input_shapes=s.shapes_known,
        calls=int(s.rows.size),
        p10_ns=int(s.p10),
        median_ns=int(s.median),
        p90_ns=int(s.p90),
        max_ns=int(dur.max()),
        slow_calls=int(slow.size),
        slow_call_starts_ms=[round((int(t) - origin) / 1e6, 3) for t in np.sort(c.ts[slow])[:5].tolist()],
    )
    notes = () if s.shapes_known else ("the trace has no input shapes for these calls: different shapes with the "
                                       "same grid (e.g. a GEMM's K) could explain part of the spread",)
    return [
        ctx.finding(
            "kernel_variance",
            f"One kernel varies {s.p90 / s.p10:.1f}x between calls with the same shapes "
            f"(median {ms_text(s.median)}, p90 {ms_text(s.p90)})",
            saving,
            evidence=evidence,
            fix=(
                "Find what slows the slow calls (their start times are in the evidence; open the trace there): if "
                "they follow idle gaps the GPU clocked down or its caches are cold (keep it fed; check power and "
                "thermal throttling with nvidia-smi -q -d PERFORMANCE or rocm-smi); another process on the same "
                "GPU shows as the same symptom; data-dependent kernels (index, scatter, sort, MoE routing) take as "
                "long as their input: balance it."
            ),
            formula="Σ per steady step over the calls of the kernel (same name, grid, block and input shapes) with "
            "the largest such sum of max(t − median, 0); reported when p90/p10 ≥ kernel_variance_ratio with ≥ "
            "kernel_variance_min_calls calls, slow calls (> 2 × median) in more than one step and mostly alone on "
            "the device; at most the step minus the device's other work",
            kind="upper_bound",
            confidence="medium" if s.shapes_known else "low",
            notes=notes,
        )
    ]


# ---------------------------------------------------------------------------------------------------
# attention_efficiency
# ---------------------------------------------------------------------------------------------------
_FUSED_ATTENTION_FIX = (
    "Attention runs far below the matrix peak. Check which kernel runs (torch.nn.attention.sdpa_kernel; the "
    "path is in the evidence): on Hopper (H100/H200) FlashAttention-3 (flash_attn_interface) or cuDNN SDPA "
    "(SDPBackend.CUDNN_ATTENTION) reach ~2x FlashAttention-2's rate, and FP8 (FlashAttention-3 / "
    "Transformer Engine) about 2x again; on AMD Instinct use the CK / AOTriton FMHA of a current ROCm and "
    "PyTorch. Keep head_dim 64 or 128 (a multiple of 8, ≤ 256), sequence lengths multiples of the kernel's "
    "128-row tile, q/k/v contiguous in bf16/fp16, and pass is_causal=True rather than an explicit mask."
)


def shape_factor(head_dim: int, kv_len: int) -> float:
    """How much of a path's best fraction of the peak attention of this head_dim and key length reaches, read off
    FlashAttention-2's forward benchmarks (Dao 2023, A100, figs. 4-5): head_dim 64 runs at ~0.8 of head_dim 128's
    rate, smaller ones ~0.6; 512 keys at ~0.7 of 16k keys' rate, 1k at ~0.85, ≥ 2k at full rate."""
    head = 1.0 if head_dim >= 128 or head_dim <= 0 else 0.8 if head_dim >= 64 else 0.6
    seq = 1.0 if kv_len >= 2048 or kv_len <= 0 else 0.85 if kv_len >= 1024 else 0.7 if kv_len >= 512 else 0.5
    return head * seq


def _shapes_factor(shapes: list[AttentionShape]) -> float:
    """:func:`shape_factor` over a path's shapes, weighted by their FLOPs (1 without shapes)."""
    weights = [float(s.calls) * s.batch * s.heads * s.q_len * s.kv_len * max(s.head_dim, 1) * (0.5 if s.causal else 1.0)
               * (2.5 if s.backward else 1.0) for s in shapes]
    if not shapes or sum(weights) <= 0:
        return 1.0
    return sum(w * shape_factor(s.head_dim, s.kv_len) for w, s in zip(weights, shapes)) / sum(weights)


def _attention_rows(ctx: RankContext, path: str) -> I64:
    """Kernel rows of the steady steps on one fused attention path (by name)."""
    from aiprof.roofline.attention import attention_path

    c = ctx.trace.columns
    names = arrays.unique(c.name[ctx.kernels])
    mine = np.array([attention_path(ctx.trace.strings[int(n)]) == path for n in names.tolist()], dtype=bool)
    return ctx.kernels[arrays.isin(c.name[ctx.kernels], names[mine])]


class AttentionEfficiencyEvidence(Evidence, kw_only=True):
    """``attention_efficiency``'s evidence: the fused attention path (its kernels, calls, time and shares), its
    shapes and dtype, the FLOP rate it reached against the dense matrix peak, what it could attain (and the
    shape factor in that), the time it would take there, and the modelled saving when the timeline capped it."""

    path: str
    label: str
    kernels: list[str]
    calls_per_step: float
    share_of_kernel_time: float
    share_of_step: float
    ns_per_step: int
    shapes: list[dict[str, object]]  # the path's AttentionShape rows, every field
    dtype: str | UnsetType
    achieved_flops_per_s: int
    peak_flops_per_s: int
    peak: str | UnsetType
    pct_of_peak: float
    attainable_fraction_of_peak: float
    shape_factor: float
    expected_ns_per_step: int
    summary: str
    peaks: str | UnsetType
    modelled_saving_ns_per_step: int | UnsetType = UNSET


@rank_rule(saving=Saving.TIME,
           options=("roof_fraction_attention", "kernel_efficiency_share", "attention_efficiency_gap", "min_share"),
           needs=("attention_paths", "kernels", "steps"), ids=("attention_efficiency", "attention_efficiency_unknown"))
def attention_efficiency(ctx: RankContext) -> list[Finding]:
    """A fused attention path (FlashAttention, cuDNN, CK, Triton…) holding ≥ ``kernel_efficiency_share`` of the
    step whose achieved FLOP rate is below ``attention_efficiency_gap`` × the attainable fraction of the peak;
    such a path without FLOPs (no shapes recorded) is said to be unjudged, with why (``attention_efficiency_unknown``)."""
    if not ctx.is_gpu or ctx.kernels.size == 0:
        return []
    from aiprof.roofline.attention import UNFUSED, path_text

    section = ctx.views.attention_paths
    if not section.available:
        return []
    opt = ctx.options
    amd = matrix_units(ctx).vendor == "amd"
    best = opt.roof_fraction_attention * (AMD_ATTAINABLE_COMPUTE if amd else 1.0)
    out: list[Finding] = []
    for p in section.paths:
        if p.path != UNFUSED and p.flops is UNSET and p.shapes_missing is not UNSET \
                and ctx.share(float(p.gpu_ns_per_step)) >= opt.kernel_efficiency_share:
            out.append(_unknown_efficiency(ctx, p, len(section.steps)))
            continue
        if p.path == UNFUSED or p.fraction_of_peak is UNSET or p.achieved_flops_per_s is UNSET:
            continue  # unfused attention is unfused_attention's; without FLOPs there is no rate to judge
        attainable = best * _shapes_factor(p.shapes)
        fraction = float(p.fraction_of_peak)
        per_step = float(p.gpu_ns_per_step)
        if ctx.share(per_step) < opt.kernel_efficiency_share or fraction >= opt.attention_efficiency_gap * attainable:
            continue
        modelled = per_step * (1.0 - fraction / attainable)
        saving, was_capped = capped(ctx, modelled, _attention_rows(ctx, p.path))
        if ctx.share(saving) < opt.min_share:
            continue
        evidence = AttentionEfficiencyEvidence(
            path=p.path,
            label=p.label,
            kernels=p.kernels,
            calls_per_step=round(p.calls / max(len(section.steps), 1), 1),
            share_of_kernel_time=round(p.share, 3),
            share_of_step=round(ctx.share(per_step), 3),
            ns_per_step=int(per_step),
            shapes=[msgspec.structs.asdict(s) for s in p.shapes],
            dtype=p.dtype,
            achieved_flops_per_s=int(float(p.achieved_flops_per_s)),
            peak_flops_per_s=int(float(p.peak_flops_per_s or 0.0)),
            peak=p.peak_key,
            pct_of_peak=round(100.0 * fraction, 1),
            attainable_fraction_of_peak=round(attainable, 3),
            shape_factor=round(attainable / best, 3),
            expected_ns_per_step=int(per_step * fraction / attainable),
            summary=path_text(p, len(section.steps)),
            peaks=section.peaks_note,
        )
        if was_capped:
            evidence.modelled_saving_ns_per_step = int(modelled)
        out.append(ctx.finding(
            "attention_efficiency",
            f"{p.label} takes {ctx.share(per_step):.0%} of the step at {100 * fraction:.0f}% of the "
            f"{float(p.peak_flops_per_s or 0.0) / 1e12:,.0f} TFLOP/s {str(p.peak_key).replace('_', ' ')} peak",
            saving,
            evidence=evidence,
            fix=_FUSED_ATTENTION_FIX,
            formula="t × (1 − fraction / attainable) per steady step, t the path's kernel time per step, fraction its "
            "FLOPs (4·B·H·Sq·Sk·D forward, 2.5× backward, half causal) / t over the dense matrix peak of its dtype, "
            "attainable = roof_fraction_attention (0.5: FlashAttention-2 on A100, FlashAttention-3 ~75 % on H100) × "
            "0.6 on AMD Instinct × the FLOP-weighted shape factor (head_dim 64: 0.8, < 64: 0.6; keys < 2k: 0.85, "
            "< 1k: 0.7, < 512: 0.5); reported when fraction < attention_efficiency_gap × attainable; at most the step "
            "minus the device's other work",
            kind="estimate",
            confidence="medium",
        ))
    return out


def _unknown_efficiency(ctx: RankContext, p: AttentionPath, steps: int) -> Finding:
    """An attention path that holds much of the step but has no FLOPs: its efficiency is not judged, and why."""
    per_step = float(p.gpu_ns_per_step)
    evidence: dict[str, Any] = {
        "path": p.path,
        "label": p.label,
        "kernels": p.kernels,
        "calls_per_step": round(p.calls / max(steps, 1), 1),
        "share_of_kernel_time": round(p.share, 3),
        "share_of_step": round(ctx.share(per_step), 3),
        "ns_per_step": int(per_step),
        "why": p.shapes_missing,
        "grid_shapes": [msgspec.to_builtins(g) for g in p.grid_shapes],  # unset fields left out
    }
    return ctx.finding(
        "attention_efficiency_unknown",
        f"{p.label} takes {ctx.share(per_step):.0%} of the step; how close it runs to the peak cannot be computed: "
        "the trace records no shapes of its calls",
        0.0,
        evidence=evidence,
        fix="Record the input shapes (torch.profiler.profile(record_shapes=True); `aiprof run` records them) and "
        "analyse again: B, H, Sq, Sk and D give the attention FLOPs and so its fraction of the peak.",
        formula="no saving: a trace-quality note; without the key length (and, for some kernels, the head dim) "
        "there are no FLOPs to rate",
        confidence="high",
        severity="info",
    )
