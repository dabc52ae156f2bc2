"""Shared GPU-kernel helpers and the ``fp32_matrix_calls`` view: what the device's matrix units support,
the kernels an op issued, the timeline's bound on a kernel-time saving (:func:`removable_ns`, :func:`capped`),
a GEMM's M/N/K, a kernel's time alone on the device. Read by ``precision``, ``tensor_core_alignment``,
``launch_config`` (:mod:`aiprof.rules.gpu_kernels`), ``kernel_efficiency`` and the fusion rules.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from aiprof import arrays
from aiprof.trace.model import I64, Kind

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext

def _compute_capability(ctx: RankContext) -> float:
    info = ctx.trace.device_info(ctx.device.device_index)
    try:
        return float(info.compute_capability) if info.compute_capability else _cc_from_name(info.name)
    except ValueError:
        return 0.0


def _cc_from_name(name: str) -> float:
    table = (("V100", 7.0), ("TITAN V", 7.0), ("T4", 7.5), ("RTX 20", 7.5), ("Quadro RTX", 7.5), ("A100", 8.0),
             ("A800", 8.0), ("A30", 8.0), ("A10", 8.6), ("A40", 8.6), ("RTX A", 8.6), ("RTX 30", 8.6),
             ("RTX 40", 8.9), ("L4", 8.9), ("L40", 8.9), ("H100", 9.0), ("H200", 9.0), ("H800", 9.0), ("H20", 9.0),
             ("B100", 10.0), ("B200", 10.0), ("B300", 10.0), ("P100", 6.0), ("MI1", 9.0), ("MI2", 9.0), ("MI3", 9.4))
    for key, cc in table:
        if key in name:
            return cc  # AMD CDNA matrix cores: treated as tensor-core capable
    return 0.0


# ---------------------------------------------------------------------------------------------------
# What the device's matrix units support (the precision advice follows the hardware)
# ---------------------------------------------------------------------------------------------------
_AMD = re.compile(r"(?i)\bamd\b|instinct|radeon|\bmi\d{3}|gfx9")


@dataclass(frozen=True)
class MatrixUnits:
    """Reduced-precision matrix math a GPU offers, from its name and compute capability.

    NVIDIA: FP16 tensor cores from Volta (sm70) and Turing (sm75); BF16 and TF32 from Ampere (sm80);
    FP8 from Ada (sm89) and Hopper (sm90). AMD CDNA (MI100/MI200/MI300): FP16 and BF16 matrix cores,
    FP8 on MI300 (gfx942)."""

    vendor: str  # "nvidia" or "amd"
    compute_capability: float
    fp16: bool
    bf16: bool
    tf32: bool
    fp8: bool

    @property
    def any(self) -> bool:
        return self.fp16 or self.bf16


def matrix_units(ctx: RankContext) -> MatrixUnits:
    """The primary device's :class:`MatrixUnits`."""
    info = ctx.trace.device_info(ctx.device.device_index)
    cc = _compute_capability(ctx)
    if _AMD.search(info.name):
        cdna = cc >= 9.0 or bool(re.search(r"(?i)mi\d{3}", info.name))
        fp8 = cc >= 9.4 or bool(re.search(r"(?i)mi3\d\d", info.name))
        return MatrixUnits("amd", cc, cdna, cdna, False, cdna and fp8)
    return MatrixUnits("nvidia", cc, cc >= 7.0, cc >= 8.0, cc >= 8.0, cc >= 8.9)


def precision_fix(units: MatrixUnits, *, conv: bool, fp64: bool) -> str:
    """The precision advice this hardware supports: bf16 autocast where BF16 tensor/matrix cores exist
    (Ampere+, AMD CDNA), fp16 autocast with a GradScaler where only FP16 ones do (Volta, Turing)."""
    if units.bf16:
        text = ("Run the matrix work on tensor cores: with torch.autocast('cuda', dtype=torch.bfloat16): around the "
                "forward pass (no GradScaler needed), or model.to(torch.bfloat16) for inference")
        if units.tf32:
            text += ("; at least enable TF32: torch.backends.cuda.matmul.allow_tf32 = True "
                     "(torch.set_float32_matmul_precision('high'))")
        if units.fp8:
            text += "; for large GEMMs FP8 is a further step (Transformer Engine or torchao.float8)"
    else:
        label = "Volta" if units.compute_capability < 7.5 else "Turing"
        text = (f"Run the matrix work on tensor cores: this {label} GPU has FP16 tensor cores but no BF16 or TF32 "
                "ones: with torch.autocast('cuda', dtype=torch.float16): around the forward pass and "
                "scaler = torch.amp.GradScaler('cuda') for the backward (scaler.scale(loss).backward(); "
                "scaler.step(optimizer); scaler.update()), or model.half() for inference")
    if conv:
        text += "; prefer channels_last for convolutions (model.to(memory_format=torch.channels_last))"
    if fp64:
        text += "; FP64 ops: use float32 or lower unless double precision is needed"
    return text + "."


# ---------------------------------------------------------------------------------------------------
# The timeline's bound on a kernel-time saving, and what a kernel row belongs to
# ---------------------------------------------------------------------------------------------------
def removable_ns(ctx: RankContext, rows: I64) -> float:
    """The most that speeding up the GPU rows ``rows`` can take off a steady step, per step: the step
    minus the union of the device's *other* work (kernels, copies, memsets) inside it, i.e. the step's
    idle time plus the exclusive time of ``rows``. A finding's saving on kernel time never exceeds it."""
    from aiprof.analysis import intervals as iv
    from aiprof.trace.model import GPU_WORK_KINDS

    if not ctx.steps:
        return 0.0
    c = ctx.trace.columns
    work = ctx.trace.rows_of(*GPU_WORK_KINDS)
    work = work[c.device[work] == ctx.device.device_index]
    others = work[~arrays.isin(work, rows)] if rows.size else work
    busy = iv.merge(c.ts[others], c.ts[others] + c.dur[others])
    starts = np.array([s.start_ns for s in ctx.steps], dtype=np.int64)
    ends = starts + np.array([s.duration_ns for s in ctx.steps], dtype=np.int64)
    covered = iv.overlap_per_window(busy, starts, ends)
    return float(np.maximum(ends - starts - covered, 0).sum()) / ctx.step_count


def kernels_of_ops(ctx: RankContext, ops: I64) -> I64:
    """Kernel rows of the steady steps (primary device) issued by one of ``ops`` or by an op inside one."""
    from aiprof.trace import links

    k = ctx.kernels
    if ops.size == 0 or k.size == 0:
        return k[:0]
    target = np.zeros(len(ctx.trace.columns), dtype=bool)
    target[ops] = True
    cur = ctx.issuing_op[k].copy()
    par = links.parent(ctx.trace)
    for _ in range(128):
        moving = (cur >= 0) & ~target[np.maximum(cur, 0)]
        if not moving.any():
            break
        cur[moving] = par[cur[moving]]
    hit: I64 = k[(cur >= 0) & target[np.maximum(cur, 0)]]
    return hit


def capped(ctx: RankContext, saving_ns: float, rows: I64) -> tuple[float, bool]:
    """``saving_ns`` (per step) capped by :func:`removable_ns` of ``rows``; and whether the cap applied."""
    cap = removable_ns(ctx, rows)
    return (cap, True) if saving_ns > cap else (saving_ns, False)


# ---------------------------------------------------------------------------------------------------
# The fp32_matrix_calls view: precision's, left to it by the other rules
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fp32Facts:
    """What :func:`fp32_matrix_calls` knows about the FP32/FP64 matrix calls it returns (and the others)."""

    tf32_tensor_core_ns: int = 0  # time of the FP32 calls whose kernels already run on tensor cores (TF32)
    fp32_kernels: Counter[str] = field(default_factory=Counter)  # FP32-unit kernel time by name, kept calls
    kernels: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # kernel rows of the kept calls
    # per kept call: an FP32 convolution the roofline measured against the TF32 roof, whose kernels do not use it
    conv_on_fp32_units: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))


def fp32_matrix_calls(ctx: RankContext) -> tuple[I64, Fp32Facts]:
    """Roofline call indices of the steady steps' FP32/FP64 GEMM, conv and attention ops that do not
    already run on tensor cores, and facts about the others (what ``precision`` covers, so other rules
    can leave these calls to it).

    A call whose kernels are all tensor-core kernels (TF32 enabled, :func:`~aiprof.analysis.kernels.math_class`)
    is left out; one with FP32 kernels (``sgemm``, ``xmma…ffma``, ``scudnn``) is in, even a convolution on
    Ampere+; one whose kernels do not say is in, except FP32 convolutions where TF32 exists (cuDNN runs them
    as TF32 by default) and calls whose dtype the trace did not record (the roofline assumed it)."""
    return ctx.views.fp32_matrix_calls  # precision and kernel_efficiency both ask: one pass per rank


def find_fp32_matrix_calls(ctx: RankContext) -> tuple[I64, Fp32Facts]:
    """What :func:`fp32_matrix_calls` returns, computed."""
    from aiprof.analysis.kernels import MATH_FP32, MATH_TENSOR_CORE, math_class_codes

    units = matrix_units(ctx)
    result = ctx.views.roofline
    calls = result.calls
    lo, hi = ctx.window
    idx = result.calls_in(lo, hi, ("gemm", "conv", "attention"))
    wide = np.array([c.dtype in ("fp32", "fp64") for c in calls.costs] + [False], dtype=bool)
    idx = idx[wide[calls.cost_id[idx]]]
    if not idx.size:
        return idx, Fp32Facts()
    kernels = kernels_of_ops(ctx, calls.op[idx])
    owner = owning_call(ctx, calls.op[idx], kernels)
    math = math_class_codes(ctx.trace, kernels)
    dur = ctx.trace.columns.dur[kernels].astype(np.float64)
    tc = np.bincount(owner, weights=np.where(math == MATH_TENSOR_CORE, dur, 0.0), minlength=idx.size)
    fp32 = np.bincount(owner, weights=np.where(math == MATH_FP32, dur, 0.0), minlength=idx.size)
    # per distinct cost, then per call (a cost id of -1 reads the trailing False)
    fp32_conv = np.array([c.family == "conv" and c.dtype == "fp32" for c in calls.costs] + [False], dtype=bool)
    conv_tf32 = fp32_conv[calls.cost_id[idx]] & bool(units.tf32)
    # A dtype the trace did not record (assumed by the roofline) is trusted only when the kernels confirm FP32
    assumed = np.array([c.assumed_dtype for c in calls.costs] + [False], dtype=bool)[calls.cost_id[idx]]
    on_tensor_cores = (tc > 0) & (fp32 == 0)
    keep = (fp32 > 0) | (~on_tensor_cores & ~conv_tf32 & ~assumed)
    kept_calls = np.flatnonzero(keep)
    by_name: Counter[str] = Counter()
    _add_by_name(ctx, by_name, kernels[arrays.isin(owner, kept_calls) & (math == MATH_FP32)])
    facts = Fp32Facts(
        tf32_tensor_core_ns=int(calls.time_ns[idx[on_tensor_cores]].sum()),
        fp32_kernels=by_name,
        kernels=kernels[arrays.isin(owner, kept_calls)],
        conv_on_fp32_units=(conv_tf32 & (fp32 > 0))[keep],
    )
    kept: I64 = idx[keep]
    return kept, facts


def _add_by_name(ctx: RankContext, totals: Counter[str], rows: I64) -> None:
    """``totals[name] += duration`` for each row, one addition per distinct name, names in the order they
    first appear (as a loop over the rows would add them)."""
    if rows.size == 0:
        return
    c = ctx.trace.columns
    names = c.name[rows]
    order = np.argsort(names, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(names[order]) != 0])
    sums = np.add.reduceat(c.dur[rows][order], starts)
    first = order[starts]
    for k in np.argsort(first, kind="stable").tolist():
        totals[ctx.trace.strings[int(names[first[k]])]] += int(sums[k])


def owning_call(ctx: RankContext, ops: I64, kernels: I64) -> I64:
    """For each kernel of :func:`kernels_of_ops`, the index into ``ops`` of the op it belongs to."""
    from aiprof.trace import links

    is_op = np.full(len(ctx.trace.columns), -1, dtype=np.int64)
    is_op[ops] = np.arange(ops.size)
    cur = ctx.issuing_op[kernels].copy()
    par = links.parent(ctx.trace)
    for _ in range(128):
        moving = (cur >= 0) & (is_op[np.maximum(cur, 0)] < 0)
        if not moving.any():
            break
        cur[moving] = par[cur[moving]]
    out: I64 = np.where(cur >= 0, is_op[np.maximum(cur, 0)], -1)
    return out


def gemm_mnk(name: str, dims: list[Any]) -> tuple[int, int, int, int] | None:
    """(M, N, K, batch) of a GEMM op from its input shapes."""
    shapes = [d for d in dims if isinstance(d, list) and d and all(isinstance(v, int) for v in d)]
    if name in ("aten::addmm", "aten::baddbmm") and len(shapes) >= 3:
        shapes = shapes[1:]
    if len(shapes) < 2:
        return None
    a, b = shapes[0], shapes[1]
    if name == "aten::linear":
        if len(b) != 2 or a[-1] != b[1]:
            return None
        return int(np.prod(a[:-1])), b[0], a[-1], 1
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
    return a[-2], b[-1], a[-1], batch


def alone_ns(ctx: RankContext, rows: I64) -> Any:
    """For each kernel row, the part of its time when no other kernel of the device runs (any stream,
    communication kernels included: some designs reserve SMs for them on purpose)."""
    from aiprof.analysis.kernels import exclusive_ns

    c = ctx.trace.columns
    every = ctx.trace.rows_of(Kind.KERNEL)
    every = every[c.device[every] == ctx.device.device_index]
    alone = np.zeros(len(c), dtype=np.float64)
    alone[every] = exclusive_ns(c.ts[every], c.ts[every] + c.dur[every])
    return alone[rows]


__all__ = ["Fp32Facts", "MatrixUnits", "alone_ns", "capped", "find_fp32_matrix_calls", "fp32_matrix_calls",
           "gemm_mnk", "kernels_of_ops", "matrix_units", "owning_call", "precision_fix", "removable_ns"]
