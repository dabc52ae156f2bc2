"""Which attention path runs, from the kernels' names, and how close it comes to the device's peak.

* **The path** of a kernel is read from its name (:func:`attention_path`): FlashAttention
  (``pytorch_flash::flash_fwd_kernel``, ``flash_bwd_*``, FlashAttention-3's ``flash::``), cuDNN SDPA
  (``cudnn_generated_fort_native_sdpa_*``), memory-efficient (``fmha_cutlassF/B``, xFormers /
  ``PyTorchMemEffAttention``), Composable Kernel FMHA (``fmha_fwd_*`` on ROCm), Triton / AOTriton flash
  kernels (``attn_fwd``, ``bwd_kernel_dk_dv``), FlexAttention (``triton_tem_fused_*flex_attention*``) and
  paged decode kernels (vLLM, SGLang, FlashInfer). Inductor's pointwise fusions that merely name an SDPA op
  (``triton_poi_fused__scaled_dot_product_flash_attention_…``) and KV-cache writes are not attention.
* **Unfused** attention is a softmax kernel between two GEMM kernels on one stream (within
  :data:`UNFUSED_WINDOW` kernels each side; the scale, mask and dropout kernels between them count to the
  chain). When the softmax's op has recorded shapes they must be scores (``[.., Sq, Sk]``, both ≥
  :data:`MIN_SCORE_DIM`); without shapes the names decide.
* **Time** is the sum of the path's kernel durations inside the steps (a kernel belongs to the step whose
  window holds its start); ``share`` is that time over the time of every kernel in the steps.
* **FLOPs** need shapes: a fused kernel's are its SDPA / flash / efficient op's (B, H, Sq, Sk, D from the
  op's inputs; 4·B·H·Sq·Sk·D forward, 2.5× that backward, half for causal Sq = Sk, as the roofline counts
  them), counted once per op call however many kernels it launched; an unfused chain's are its two GEMM
  ops'. ``achieved_flops_per_s`` = FLOPs / the time of the kernels whose op has FLOPs (an unfused chain:
  every kernel of it, softmax and scale included, so fused and unfused rates compare);
  ``fraction_of_peak`` = that over the device's dense matrix peak for the dtype that did most of the FLOPs
  (the roofline's peaks: the spec table for a known GPU).
* **Without shapes** (no ``Input Dims``: ``record_shapes=False``, or a kernel whose op is not in the trace) the
  launch grid of the families whose grid layout is known gives what it encodes (:func:`grid_dims`): the
  FlashAttention-2 forward (``flash_fwd_kernel``, not split-KV) launches (query blocks, B, H), its name gives D,
  the query tile and causal; AOTriton's / ROCm Triton's ``attn_fwd`` launches (query blocks, H, B) when the
  grid has more than one dimension (its causal and persistent launches flatten the tiles into x: nothing to
  read). A grid never gives the key length, so these calls get no FLOPs: ``grid_shapes`` and
  ``shapes_missing`` say what is known and what is not. Where calls of the same kernel do have shapes, the
  grid's B and H must agree with theirs, else the layout is not trusted on that trace.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.roofline.cost import AttentionDims, attention_dims
from aiprof.trace import links
from aiprof.trace.model import I64, Kind, Trace

UNFUSED_WINDOW = 3  # kernels looked at on each side of a softmax for the GEMMs of an unfused attention
MIN_SCORE_DIM = 32  # Sq, Sk below this are not attention scores (the unfused_attention rule's floor)
TOP_KERNELS = 3
NAME_CHARS = 160  # kernel names kept in the report are clipped to this many characters

# (path, label, pattern), tried in order: the first match names the path.
_PATHS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("memory_efficient", "memory-efficient attention (CUTLASS / xFormers)",
     re.compile(r"fmha_cutlass|PyTorchMemEffAttention|efficient_attention|AttentionKernel<|AttentionBackwardKernel<"
                r"|mem_eff", re.I)),
    ("cudnn", "cuDNN SDPA", re.compile(r"cudnn\w*sdpa|sdpa\w*cudnn|fort_native_sdpa|cudnn\w*_fmha|cudnn\w*flash", re.I)),
    ("flash", "FlashAttention",
     re.compile(r"pytorch_flash::|flash_fwd|flash_bwd|\bflash::|FlashAttn|flash_attn|flash_attention_(fwd|bwd)", re.I)),
    ("ck", "Composable Kernel FMHA (ROCm)", re.compile(r"fmha_(fwd|bwd)|Fmha(Fwd|Bwd)|ck_tile::Fmha", re.I)),
    ("flex", "FlexAttention (Triton template)", re.compile(r"triton_tem_\w*flex_attention|flex_attention", re.I)),
    ("triton", "Triton flash attention (AOTriton / Triton)",
     re.compile(r"^_?attn_(fwd|bwd)|^_?attention_(fwd|bwd)|bwd_kernel_dk_dv|bwd_kernel_dq|_attn_bwd", re.I)),
    ("paged", "paged / decode attention (vLLM, SGLang, FlashInfer)",
     re.compile(r"paged_attention|unified_attention|decode_attention|BatchPrefillWith|BatchDecodeWith"
                r"|SinglePrefillWith|SingleDecodeWith|flash_decoding|lean_attention", re.I)),
)
UNFUSED = "unfused"
UNFUSED_LABEL = "unfused attention (GEMM → softmax → GEMM)"
LABELS = {path: label for path, label, _ in _PATHS} | {UNFUSED: UNFUSED_LABEL}
# Kernels that name attention but do none of its work: Inductor's pointwise / reduction fusions around an SDPA
# op, KV-cache writes, and the split-KV combine step of a flash decode is still attention (kept).
_NOT_ATTENTION = re.compile(r"^triton_(poi|per|red)_|reshape_and_cache|kv_cache|cache_kernel|rotary", re.I)
_SOFTMAX = re.compile(r"softmax", re.I)
_GEMM = re.compile(r"gemm|xmma|Cijk_|nvjet|cutlass\w*tensorop|matmul|wgmma|bmm|ampere_\w*_(s|h)\d+", re.I)


def attention_path(kernel_name: str) -> str | None:
    """The fused attention path a kernel name belongs to (``flash``, ``cudnn``…), None for any other kernel
    (unfused attention is found from kernel sequences, not one name)."""
    if _NOT_ATTENTION.search(kernel_name):
        return None
    for path, _, pattern in _PATHS:
        if pattern.search(kernel_name):
            return path
    return None


class AttentionShape(msgspec.Struct, kw_only=True):
    """One shape of attention calls (from the op's inputs) and how many calls had it."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool
    backward: bool
    dtype: str
    calls: int


class GridShape(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the launch grid (and kernel name) of attention calls without shapes says, and how many calls had it.
    0 where a number is not in the grid or name. ``q_len_max`` = query blocks × the query tile: Sq lies in
    (``q_len_max`` − tile, ``q_len_max``]."""

    batch: int
    heads: int
    q_blocks: int
    q_tile: int = 0
    q_len_max: int = 0
    head_dim: int = 0
    causal: bool | UnsetType = UNSET
    dtype: str = ""
    grid: list[int]
    calls: int


class AttentionPath(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One attention path that ran: its kernels' time in the steps, and (with shapes) FLOPs and rate."""

    path: str  # flash, cudnn, memory_efficient, ck, flex, triton, paged, unfused
    label: str
    kernels: list[str]  # the path's kernel names with the most time (clipped to NAME_CHARS)
    kernel_count: int  # kernels of the path in the steps
    calls: int  # attention calls: fused ops (or kernels without an op), unfused chains
    gpu_ns: int  # Σ kernel durations in the steps
    gpu_ns_per_step: int
    share: float  # gpu_ns over every kernel's time in the steps, [0, 1]
    flops: int | UnsetType = UNSET  # the calls with shapes only
    flops_per_step: int | UnsetType = UNSET
    timed_ns: int | UnsetType = UNSET  # kernel time of the calls with FLOPs (the rate's denominator)
    achieved_flops_per_s: float | UnsetType = UNSET
    dtype: str | UnsetType = UNSET
    peak_flops_per_s: float | UnsetType = UNSET
    peak_key: str | UnsetType = UNSET
    fraction_of_peak: float | UnsetType = UNSET
    shapes: list[AttentionShape] = msgspec.field(default_factory=list)
    grid_shapes: list[GridShape] = msgspec.field(default_factory=list)  # calls without shapes: what their grid says
    shapes_missing: str | UnsetType = UNSET  # why there are no FLOPs (no shapes recorded)


class AttentionStep(msgspec.Struct, kw_only=True):
    """One step: every kernel's time, the attention kernels' time by path, and their share."""

    name: str
    kernel_ns: int
    attention_ns: int
    share: float
    by_path: dict[str, int]


class AttentionReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The report's ``attention`` section (``RankReport.attention``). ``available`` is false, with a
    ``reason``, when the trace has no device kernels or none of them is attention."""

    available: bool
    reason: str | UnsetType = UNSET
    kernel_ns: int | UnsetType = UNSET  # every kernel in the steps
    attention_ns: int | UnsetType = UNSET
    share: float | UnsetType = UNSET
    paths: list[AttentionPath] = msgspec.field(default_factory=list)  # most time first
    steps: list[AttentionStep] = msgspec.field(default_factory=list)
    device: str | UnsetType = UNSET
    peaks_note: str | UnsetType = UNSET


@dataclass(frozen=True)
class GridDims:
    """What one attention kernel's launch grid and name encode (0: not encoded)."""

    batch: int
    heads: int
    q_blocks: int
    q_tile: int = 0
    head_dim: int = 0
    causal: bool | None = None
    dtype: str = ""


# (B, H, query blocks, query tile, D, causal (-1 unknown), dtype, grid x, y, z)
GridKey = tuple[int, int, int, int, int, int, str, int, int, int]

# FlashAttention-2's forward: flash_fwd_kernel<Flash_fwd_kernel_traits<D, kBlockM, kBlockN, warps, …, elem>,
# Is_dropout, Is_causal, …> launched on (⌈Sq / kBlockM⌉, B, H) (PyTorch's pytorch_flash:: and flash_attn's flash::).
_FLASH2_FWD = re.compile(r"\bflash_fwd_kernel<\s*(?:\w+::)*Flash_fwd_kernel_traits<\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*,")
_FLASH2_BOOLS = re.compile(r">\s*,\s*(true|false)\s*,\s*(true|false)\s*,")  # after the traits: Is_dropout, Is_causal
_FLASH2_DTYPE = {"bfloat16_t": "bf16", "half_t": "fp16"}
# AOTriton / ROCm Triton FlashAttention forward: attn_fwd on (⌈Sq / BLOCK_M⌉, H, B); the same name launches a
# one-dimensional grid of flattened or persistent tiles for causal calls (xDiT SD-3.5: (24, 1, 1) for B1 H12 S77).
_AOTRITON_FWD = re.compile(r"^attn_fwd$")


def grid_dims(name: str, grid: tuple[int, int, int]) -> GridDims | str | None:
    """What an attention kernel's grid (x, y, z) and name say about its call: :class:`GridDims`; a reason
    when the family's grid is known but this one says nothing; None when aiprof knows no grid layout for
    the kernel's family."""
    gx, gy, gz = grid
    short = short_kernel_name(name)
    flash = _FLASH2_FWD.search(name)
    if flash is not None and "splitkv" not in short.lower():
        if min(grid) <= 0:
            return "the trace records no launch grid for it"
        bools = _FLASH2_BOOLS.search(name, flash.end())
        dtype = next((v for k, v in _FLASH2_DTYPE.items() if k in name[flash.start():]), "")
        return GridDims(batch=gy, heads=gz, q_blocks=gx, q_tile=int(flash.group(2)), head_dim=int(flash.group(1)),
                        causal=bools.group(2) == "true" if bools else None, dtype=dtype)
    if _AOTRITON_FWD.match(short):
        if min(grid) <= 0:
            return "the trace records no launch grid for it"
        if gy == 1 and gz == 1:
            return (f"its grid ({gx}, 1, 1) is one-dimensional: attn_fwd's causal and persistent launches flatten "
                    "the tiles into x, so B and H are not in it")
        return GridDims(batch=gz, heads=gy, q_blocks=gx)
    return None


@dataclass
class _Acc:
    kernel_ns: int = 0
    kernels: int = 0
    calls: int = 0
    flops: int = 0
    timed_ns: int = 0
    names: Counter[str] = field(default_factory=Counter)
    dtypes: Counter[str] = field(default_factory=Counter)
    shapes: Counter[tuple[int, int, int, int, int, int, bool, bool, str]] = field(default_factory=Counter)
    ops_seen: set[int] = field(default_factory=set)
    chains_seen: set[int] = field(default_factory=set)
    scores: Counter[tuple[int, int, int, int, str]] = field(default_factory=Counter)  # unfused: B, H, Sq, Sk, dtype
    no_shape: bool = False
    grids: Counter[GridKey] = field(default_factory=Counter)  # calls without shapes, by what their grid says
    grid_reasons: Counter[str] = field(default_factory=Counter)  # calls without shapes whose grid says nothing: why
    grid_conflict: str = ""  # a call with shapes whose grid disagrees: the layout is not trusted here


def attention_section(trace: Trace) -> AttentionReport:
    """The report's ``attention`` section (see the module doc)."""
    from aiprof.analysis.steps import step_windows
    from aiprof.roofline.analysis import roofline

    c = trace.columns
    kernels = trace.rows_of(Kind.KERNEL)
    if kernels.size == 0:
        return AttentionReport(available=False, reason="no device kernels in the trace")
    windows = step_windows(trace)
    starts = np.array([w.start_ns for w in windows], dtype=np.int64)
    ends = np.array([w.end_ns for w in windows], dtype=np.int64)
    step = np.searchsorted(starts, c.ts[kernels], side="right") - 1
    inside = (step >= 0) & (c.ts[kernels] < ends[np.maximum(step, 0)])
    kernels, step = kernels[inside], step[inside]
    if kernels.size == 0:
        return AttentionReport(available=False, reason="no device kernel inside the steps")
    path_of = _paths(trace, kernels)
    per_step_all = np.bincount(step, weights=c.dur[kernels], minlength=len(windows)).astype(np.int64)
    if not path_of:
        return AttentionReport(available=False, reason="no attention kernel in the steps (by name: FlashAttention, "
                               "cuDNN, memory-efficient, CK, Triton, paged; nor a GEMM → softmax → GEMM chain)")
    result = roofline(trace)
    accs: dict[str, _Acc] = defaultdict(_Acc)
    by_step: list[Counter[str]] = [Counter() for _ in windows]
    for i, (path, chain) in path_of.items():
        row = int(kernels[i])
        acc = accs[path]
        dur = int(c.dur[row])
        acc.kernel_ns += dur
        acc.kernels += 1
        if path != UNFUSED or chain == i:  # an unfused chain is named by its softmax kernel
            acc.names[trace.name_of(row)[:NAME_CHARS]] += dur
        by_step[int(step[i])][path] += dur
        _add_flops(trace, acc, row, dur, path, chain)
        if path == UNFUSED and chain == i:
            _add_scores(trace, acc, row)
    total_kernel = int(per_step_all.sum())
    attention_ns = sum(a.kernel_ns for a in accs.values())
    n = len(windows)
    paths = [_path_report(result, path, acc, n, total_kernel)
             for path, acc in sorted(accs.items(), key=lambda kv: -kv[1].kernel_ns)]
    steps = [AttentionStep(name=w.name, kernel_ns=int(k), attention_ns=sum(s.values()),
                           share=sum(s.values()) / int(k) if k else 0.0, by_path=dict(s.most_common()))
             for w, k, s in zip(windows, per_step_all.tolist(), by_step)]
    return AttentionReport(
        available=True, kernel_ns=total_kernel, attention_ns=attention_ns,
        share=attention_ns / total_kernel if total_kernel else 0.0, paths=paths, steps=steps,
        device=result.peaks.name if result.peaks is not None else result.device_name, peaks_note=result.peaks_note,
    )


def _paths(trace: Trace, kernels: I64) -> dict[int, tuple[str, int]]:
    """Index into ``kernels`` → (path, chain id) of every attention kernel: fused ones by name (chain -1),
    unfused chains by sequence per stream (chain = the softmax kernel's index)."""
    c = trace.columns
    names = trace.strings
    name_ids = c.name[kernels]
    distinct = np.unique(name_ids)
    fused = {int(k): attention_path(names[int(k)]) for k in distinct.tolist()}
    softmax = {int(k) for k in distinct.tolist() if fused[int(k)] is None and _SOFTMAX.search(names[int(k)])}
    gemm = {int(k) for k in distinct.tolist() if fused[int(k)] is None and _GEMM.search(names[int(k)])
            and int(k) not in softmax}
    out: dict[int, tuple[str, int]] = {}
    # numpy picks the attention kernels; Python sees only those (a trace has 10^5-10^6 kernels, few of them attention)
    fused_ids = np.array([k for k, p in fused.items() if p is not None], dtype=name_ids.dtype)
    for i in np.flatnonzero(np.isin(name_ids, fused_ids)).tolist():
        path = fused[int(name_ids[i])]
        assert path is not None
        out[i] = (path, -1)
    if not softmax or not gemm:
        return out
    stream = c.pid[kernels] * (1 << 32) + (c.tid[kernels] & 0xFFFFFFFF)
    order = np.lexsort((c.ts[kernels], stream))
    gpu_op = links.gpu_op(trace)
    ordered_ids = name_ids[order]
    ids = ordered_ids.tolist()
    streams = stream[order].tolist()
    softmax_ids = np.array(sorted(softmax), dtype=name_ids.dtype)
    for j in np.flatnonzero(np.isin(ordered_ids, softmax_ids)).tolist():
        if not _scores(trace, int(gpu_op[int(kernels[order[j]])])):
            continue
        before = _nearest(ids, streams, j, -1, gemm)
        after = _nearest(ids, streams, j, +1, gemm)
        if before is None or after is None:
            continue
        for m in range(before, after + 1):
            i = int(order[m])
            if i not in out:
                out[i] = (UNFUSED, int(order[j]))
    return out


def _nearest(ids: list[int], streams: list[int], j: int, direction: int, gemm: set[int]) -> int | None:
    """Position of the nearest GEMM kernel within UNFUSED_WINDOW of ``j`` on its stream, else None."""
    for step in range(1, UNFUSED_WINDOW + 1):
        m = j + direction * step
        if m < 0 or m >= len(ids) or streams[m] != streams[j]:
            return None
        if ids[m] in gemm:
            return m
    return None


def _scores(trace: Trace, op: int) -> bool:
    """Whether a softmax op works on attention scores: its input is [.., Sq, Sk] with Sq, Sk ≥ MIN_SCORE_DIM;
    true when the op or its shapes are not in the trace (the kernel names decide then)."""
    if op < 0:
        return True
    dims = trace.op_inputs(op).dims
    shape = next((d for d in dims if isinstance(d, list) and d and all(isinstance(v, int) for v in d)), None)
    if shape is None:
        return True
    return len(shape) >= 3 and min(shape[-2:]) >= MIN_SCORE_DIM


def _add_flops(trace: Trace, acc: _Acc, row: int, dur: int, path: str, chain: int) -> None:
    """Count the FLOPs and shape of the kernel's op (once per op) and the kernel's time toward the rate."""
    from aiprof.roofline.analysis import cached_op_cost

    op = int(links.gpu_op(trace)[row])
    if path == UNFUSED:
        if chain not in acc.chains_seen:
            acc.chains_seen.add(chain)
            acc.calls += 1
        acc.timed_ns += dur  # the whole chain's time: the GEMMs, the softmax and what runs between them
        cost = cached_op_cost(trace, op) if op >= 0 else None
        if cost is None or cost.family != "gemm":
            if cost is None and op >= 0 and not trace.op_inputs(op).dims:
                acc.no_shape = True
            return
        if op not in acc.ops_seen:
            acc.ops_seen.add(op)
            acc.flops += cost.flops
            acc.dtypes[cost.dtype] += cost.flops
        return
    found = _attention_op(trace, op)
    c = trace.columns
    grid = (int(c.grid_x[row]), int(c.grid_y[row]), int(c.grid_z[row]))
    if found is None:
        new_call = op < 0 or op not in acc.ops_seen
        acc.calls += 1 if new_call else 0
        if op >= 0:
            acc.ops_seen.add(op)
        acc.no_shape = True
        if new_call:
            _add_grid(acc, trace.name_of(row), grid)
        return
    op, dims = found
    said = grid_dims(trace.name_of(row), grid)
    if isinstance(said, GridDims) and not acc.grid_conflict and (said.batch, said.heads) != (dims.batch, dims.heads):
        acc.grid_conflict = (f"a call with shapes (B{dims.batch} H{dims.heads}) launched grid {list(grid)}, which "
                             f"the layout reads as B{said.batch} H{said.heads}")
    cost = cached_op_cost(trace, op)
    acc.timed_ns += dur if cost is not None else 0
    if op in acc.ops_seen:
        return
    acc.ops_seen.add(op)
    acc.calls += 1
    acc.shapes[(dims.batch, dims.heads, dims.kv_heads, dims.q_len, dims.kv_len, dims.head_dim, dims.causal,
                dims.backward, dims.dtype)] += 1
    if cost is not None:
        acc.flops += cost.flops
        acc.dtypes[cost.dtype] += cost.flops


def _add_grid(acc: _Acc, name: str, grid: tuple[int, int, int]) -> None:
    """Count what the grid of a call without shapes says (or why it says nothing)."""
    said = grid_dims(name, grid)
    if said is None:
        acc.grid_reasons[f"aiprof knows no grid layout for {short_kernel_name(name)[:80]}"] += 1
    elif isinstance(said, str):
        acc.grid_reasons[said] += 1
    else:
        causal = -1 if said.causal is None else int(said.causal)
        acc.grids[(said.batch, said.heads, said.q_blocks, said.q_tile, said.head_dim, causal, said.dtype, *grid)] += 1


def _shapes_missing(acc: _Acc) -> str:
    """Why a path has no FLOPs, and what its calls' grids say instead."""
    text = ("the trace records no input shapes of the attention ops (record_shapes=True gives B, H, S, D and so "
            "the FLOPs)")
    if acc.grid_conflict:
        return text + f"; their launch grids are not read: {acc.grid_conflict}"
    if acc.grids:
        (b, h, blocks, tile, d, _, _, *_), _ = acc.grids.most_common(1)[0]
        seq = f"{blocks} query blocks of {tile} rows (Sq ≤ {blocks * tile})" if tile else f"{blocks} query blocks"
        known = f"B{b} H{h}, {seq}" + (f", D{d}" if d else "")
        text += (f"; the launch grid gives {known}, but not the key length"
                 + ("" if d else " nor the head dim") + " that the FLOPs need")
    elif acc.grid_reasons:
        text += "; " + acc.grid_reasons.most_common(1)[0][0]
    return text


def _add_scores(trace: Trace, acc: _Acc, row: int) -> None:
    """An unfused chain's B, H, Sq, Sk from its softmax op's input ([B, H, Sq, Sk] or [B·H, Sq, Sk])."""
    op = int(links.gpu_op(trace)[row])
    if op < 0:
        return
    inputs = trace.op_inputs(op)
    shape = next((d for d in inputs.dims if isinstance(d, list) and d and all(isinstance(v, int) for v in d)), None)
    if shape is None or len(shape) < 3:
        return
    b, h = (int(np.prod(shape[:-3])), shape[-3]) if len(shape) >= 4 else (1, shape[0])
    dtype = next((t for t in inputs.types if isinstance(t, str) and t), None)
    from aiprof.roofline import dtypes

    acc.scores[(b, h, shape[-2], shape[-1], dtypes.normalise(dtype) or "fp32")] += 1


def _attention_op(trace: Trace, op: int) -> tuple[int, AttentionDims] | None:
    """The innermost attention op (SDPA, flash, efficient, cuDNN) at or around ``op`` with its dims."""
    par = links.parent(trace)
    for _ in range(8):
        if op < 0:
            return None
        inputs = trace.op_inputs(op)
        dims = attention_dims(trace.name_of(op), inputs.dims, inputs.types, inputs.concrete)
        if dims is not None:
            return op, dims
        op = int(par[op])
    return None


def _path_report(result: object, path: str, acc: _Acc, steps: int, total_kernel: int) -> AttentionPath:
    from aiprof.roofline.analysis import RooflineResult

    assert isinstance(result, RooflineResult)
    out = AttentionPath(
        path=path, label=LABELS[path], kernels=[n for n, _ in acc.names.most_common(TOP_KERNELS)],
        kernel_count=acc.kernels, calls=acc.calls, gpu_ns=acc.kernel_ns, gpu_ns_per_step=acc.kernel_ns // max(steps, 1),
        share=acc.kernel_ns / total_kernel if total_kernel else 0.0,
        shapes=[AttentionShape(batch=b, heads=h, kv_heads=hk, q_len=sq, kv_len=sk, head_dim=d, causal=causal,
                               backward=bwd, dtype=dt, calls=n)
                for (b, h, hk, sq, sk, d, causal, bwd, dt), n in acc.shapes.most_common(5)],
    )
    if acc.scores and not acc.shapes:
        pairs = sum(b * h * sq * sk * n for (b, h, sq, sk, _), n in acc.scores.items())
        head_dim = round(acc.flops / (4 * pairs)) if pairs and len(acc.scores) == 1 else 0  # QK^T + PV: 4·pairs·D
        gemm_dtype = acc.dtypes.most_common(1)[0][0] if acc.dtypes else ""
        out.shapes = [AttentionShape(batch=b, heads=h, kv_heads=h, q_len=sq, kv_len=sk, head_dim=head_dim, causal=False,
                                     backward=False, dtype=gemm_dtype or dt, calls=n) for (b, h, sq, sk, dt), n in acc.scores.most_common(5)]
    if not acc.grid_conflict:
        out.grid_shapes = [
            GridShape(batch=b, heads=h, q_blocks=blocks, q_tile=tile, q_len_max=blocks * tile, head_dim=d,
                      causal=UNSET if causal < 0 else bool(causal), dtype=dt, grid=[gx, gy, gz], calls=n)
            for (b, h, blocks, tile, d, causal, dt, gx, gy, gz), n in acc.grids.most_common(5)]
    if acc.flops <= 0:
        if acc.no_shape:
            out.shapes_missing = _shapes_missing(acc)
        return out
    dtype = acc.dtypes.most_common(1)[0][0]
    out.flops, out.flops_per_step, out.timed_ns, out.dtype = acc.flops, acc.flops // max(steps, 1), acc.timed_ns, dtype
    if acc.timed_ns > 0:
        rate = acc.flops / (acc.timed_ns / 1e9)
        out.achieved_flops_per_s = rate
        peak = result.peaks.compute_peak("matrix", dtype) if result.peaks is not None else None
        if peak is not None:
            out.peak_flops_per_s, out.peak_key = peak[0], peak[1]
            out.fraction_of_peak = rate / peak[0]
    return out


def short_kernel_name(name: str) -> str:
    """A kernel's name without its return type, template arguments and parameters
    (``void pytorch_flash::flash_fwd_kernel<…>(…)`` → ``pytorch_flash::flash_fwd_kernel``)."""
    name = (name[5:] if name.startswith("void ") else name).replace("(anonymous namespace)::", "")
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    return name[:cut]


def shape_text(s: AttentionShape) -> str:
    """``B1 H32 S2048 D128 bf16 causal`` (Sq/Sk when they differ; H/Hkv for grouped-query attention)."""
    heads = f"H{s.heads}" + (f"/{s.kv_heads}" if s.kv_heads != s.heads else "")
    seq = f"S{s.q_len}" if s.q_len == s.kv_len else f"Sq{s.q_len} Sk{s.kv_len}"
    return " ".join([f"B{s.batch}", heads, seq, f"D{s.head_dim}", s.dtype] + ["causal"] * s.causal
                    + ["backward"] * s.backward)


def path_text(p: AttentionPath, steps: int = 0) -> str:
    """One sentence per path: what ran, its share of kernel time, shapes, achieved rate vs the peak."""
    kernel = short_kernel_name(p.kernels[0]) if p.kernels else ""
    head = f"{p.label}: {100 * p.share:.1f}% of kernel time ({p.gpu_ns_per_step / 1e6:,.3f} ms per step"
    head += f", {p.calls / steps:,.1f} calls per step)" if steps else ")"
    parts = [head]
    if kernel:
        parts.append(f"kernel {kernel[:80]}")
    if p.shapes:
        parts.append(", ".join(shape_text(s) for s in p.shapes[:2]))
    if p.achieved_flops_per_s is not UNSET:
        rate = float(p.achieved_flops_per_s or 0.0)
        text = f"{rate / 1e12:,.1f} TFLOP/s"
        if p.fraction_of_peak is not UNSET:
            text += (f" = {100 * float(p.fraction_of_peak or 0.0):.1f}% of the "
                     f"{float(p.peak_flops_per_s or 0.0) / 1e12:,.0f} TFLOP/s {str(p.peak_key or '').replace('_', ' ')} peak")
        parts.append(text)
    elif p.shapes_missing is not UNSET:
        parts.append("FLOPs unknown: " + str(p.shapes_missing))
    return "; ".join(parts)
