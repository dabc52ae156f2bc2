"""Model FLOPs utilisation (MFU): the matrix FLOPs the model's ops did per step, over what the device's
dense matrix peak could do in the step's time.

* **FLOPs** are the roofline's per-call FLOPs from the recorded shapes (:mod:`aiprof.roofline.cost`: GEMM
  2·M·N·K, convolutions, attention 4·B·H·Sq·Sk·D forward, …) of the ops whose work runs on the matrix units
  (``unit == "matrix"``), counted in the step whose window holds the op's start. Vector work (elementwise,
  norms, reductions) is left out, as MFU conventionally is (PaLM's definition counts the matmuls).
* **The peak** is the device's dense matrix peak for the dtype that did most of those FLOPs (``bf16``,
  ``fp16``, ``tf32``/``fp32``, ``fp8``…; dense, no sparsity), from the roofline's peaks: the spec table for a
  known GPU, ``aiprof peaks`` measurements for a CPU. ``peak_key`` says which rate was used.
* ``mfu = flops / (step duration × peak)`` per step; the report's number is the mean over the steps'
  total: Σ FLOPs / (Σ durations × peak). ``by_class``: FLOPs per op family (``gemm``, ``conv``,
  ``attention``…) and each one's share of the MFU.
* ``by_op_class``: the FLOPs per op class, ``matmul`` (GEMMs, linear, bmm), ``conv``, ``attention`` and
  ``elementwise`` (every vector op with FLOPs: pointwise, norms, softmax, reductions, fused Inductor
  pointwise kernels), each over the steps' time against the same dense matrix peak, so the classes' ``mfu``
  add up (``elementwise`` says what the vector work would be worth on the matrix units: not part of ``mfu``).
* ``by_module``: the matrix FLOPs per ``nn.Module`` (children included; backward ops count in their forward
  op's module, as in the module view), when the trace recorded modules (``with_stack``): ``mfu`` is the
  module's share of the step MFU (Σ FLOPs / (Σ step durations × peak)), ``busy_mfu`` its FLOPs over the
  module's own time (device time of its forward and backward work on a GPU trace, its CPU wall time
  forward + backward on a CPU trace) × peak: how well the module uses the device while it runs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.analysis.steps import StepWindow, step_windows
from aiprof.trace.model import Trace

if TYPE_CHECKING:
    from aiprof.roofline.peaks import DevicePeaks


class MfuStep(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One step's matrix FLOPs, duration and (with a peak) MFU."""

    name: str
    flops: int
    duration_ns: int
    mfu: float | UnsetType = UNSET


OP_CLASSES = ("matmul", "conv", "attention", "elementwise")
_CLASS_OF_FAMILY = {"gemm": "matmul", "conv": "conv", "attention": "attention"}
MAX_MODULES = 50


def op_class(family: str, unit: str) -> str:
    """The MFU op class of a roofline cost family: matrix families by name, all vector work ``elementwise``."""
    if unit != "matrix":
        return "elementwise"
    return _CLASS_OF_FAMILY.get(family, "matmul")


class MfuOpClass(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One op class's FLOPs over the steps (``MfuReport.by_op_class``)."""

    op_class: str  # matmul, conv, attention, elementwise
    flops: int  # summed over the steps
    flops_per_step: int
    dtype: str  # the dtype of most of this class's FLOPs
    mfu: float | UnsetType = UNSET  # flops / (Σ step durations × the report's peak)


class MfuModule(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One ``nn.Module``'s matrix FLOPs over the steps (``MfuReport.by_module``), children included."""

    path: str  # as in the module view: Net_0/Block_0/Linear_0
    flops: int  # summed over the steps
    flops_per_step: int
    time_ns: int  # the module's own time (device forward + backward on a GPU trace, CPU wall on a CPU one)
    mfu: float | UnsetType = UNSET  # share of the step MFU: flops / (Σ step durations × peak)
    busy_mfu: float | UnsetType = UNSET  # flops / (time_ns × peak)


class MfuReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The report's ``mfu`` section (``RankReport.mfu``). ``available`` is false, with a ``reason``, when
    there is no step or matrix op with shapes (nothing else set) or no dense peak for the dtype (the FLOPs
    set, no peak); when it is true ``reason`` is absent and the peak and MFU fields are set."""

    available: bool
    dtype: str | UnsetType = UNSET  # the dtype that did most of the matrix FLOPs
    flops_by_dtype: dict[str, int] | UnsetType = UNSET
    flops_per_step: int | UnsetType = UNSET
    steps: list[MfuStep] | UnsetType = UNSET
    by_class: dict[str, int] | UnsetType = UNSET  # FLOPs per op family (gemm, conv, attention…)
    device: str | UnsetType = UNSET
    peaks_note: str | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    peak_flops_per_s: int | UnsetType = UNSET
    peak_key: str | UnsetType = UNSET  # which peak: "bf16", "tf32"…
    peak_source: str | UnsetType = UNSET
    mfu: float | UnsetType = UNSET
    by_class_mfu: dict[str, float] | UnsetType = UNSET
    by_op_class: list[MfuOpClass] | UnsetType = UNSET  # matmul, conv, attention, elementwise
    by_module: list[MfuModule] | UnsetType = UNSET  # when modules were recorded; the most FLOPs first


def mfu_section(trace: Trace, windows: list[StepWindow] | None = None, peaks: DevicePeaks | None = None) -> MfuReport:
    """The report's ``mfu`` section (``available: false`` and a ``reason`` when it cannot be computed).
    ``peaks`` overrides the device's peaks (default: the roofline's choice from the trace's device)."""
    from aiprof.roofline.analysis import roofline  # the report imports MfuReport: keep that import light

    windows = windows if windows is not None else step_windows(trace)
    result = roofline(trace, peaks)
    calls = result.calls
    if not windows or len(calls) == 0:
        return MfuReport(available=False, reason="no step or no op with recorded shapes")
    cost_ids = calls.cost_id
    costed = cost_ids >= 0
    matrix = [k for k, cost in enumerate(calls.costs) if cost.unit == "matrix" and cost.flops > 0]
    if not matrix:
        return MfuReport(available=False, reason="no matrix op (GEMM, convolution, attention) with recorded shapes")
    is_matrix = np.isin(cost_ids, np.array(matrix, dtype=np.int64))
    starts = np.array([w.start_ns for w in windows], dtype=np.int64)
    ends = np.array([w.end_ns for w in windows], dtype=np.int64)
    step = np.searchsorted(starts, calls.ts_ns, side="right") - 1
    inside = is_matrix & (step >= 0) & (calls.ts_ns < ends[np.maximum(step, 0)])
    flops_by_dtype: dict[str, int] = defaultdict(int)
    by_class: dict[str, int] = defaultdict(int)
    per_step = np.zeros(len(windows), dtype=np.int64)
    for i in np.flatnonzero(inside).tolist():
        cost = calls.costs[int(cost_ids[i])]
        per_step[int(step[i])] += cost.flops
        flops_by_dtype[cost.dtype] += cost.flops
        by_class[cost.family] += cost.flops
    if not flops_by_dtype:
        return MfuReport(available=False, reason="no matrix op inside the steps")
    in_steps = costed & (step >= 0) & (calls.ts_ns < ends[np.maximum(step, 0)])
    op_classes = _op_classes(calls, np.flatnonzero(in_steps), len(windows))
    modules = _modules(trace, windows, calls, np.flatnonzero(inside & (calls.op >= 0)), len(windows))
    dtype = max(flops_by_dtype, key=lambda d: flops_by_dtype[d])
    peak = result.peaks.compute_peak("matrix", dtype) if result.peaks is not None else None
    durations = ends - starts
    steps = [MfuStep(name=w.name, flops=int(f), duration_ns=int(d)) for w, f, d in zip(windows, per_step, durations)]
    classes = dict(sorted(by_class.items(), key=lambda kv: -kv[1]))
    out = MfuReport(
        available=peak is not None,
        dtype=dtype,
        flops_by_dtype=dict(sorted(flops_by_dtype.items(), key=lambda kv: -kv[1])),
        flops_per_step=int(per_step.sum() // len(windows)),
        steps=steps,
        by_class=classes,
        device=result.peaks.name if result.peaks is not None else result.device_name,
        peaks_note=result.peaks_note,
        by_op_class=op_classes,
    )
    if modules:
        out.by_module = modules
    if peak is None:
        out.reason = result.peaks_note or f"no dense matrix peak for {dtype} on this device"
        return out
    rate, key = peak
    total_s = float(durations.sum()) / 1e9
    out.peak_flops_per_s = int(rate)
    out.peak_key = key
    out.peak_source = result.peaks.source if result.peaks is not None else ""
    out.mfu = float(per_step.sum()) / (total_s * rate) if total_s > 0 else 0.0
    for s in steps:
        s.mfu = s.flops / (s.duration_ns / 1e9 * rate) if s.duration_ns else 0.0
    out.by_class_mfu = {k: v / (total_s * rate) for k, v in classes.items()} if total_s > 0 else {}
    for c in op_classes:
        c.mfu = c.flops / (total_s * rate) if total_s > 0 else 0.0
    for m in modules:
        m.mfu = m.flops / (total_s * rate) if total_s > 0 else 0.0
        m.busy_mfu = m.flops / (m.time_ns / 1e9 * rate) if m.time_ns > 0 else 0.0
    return out


def _op_classes(calls: Any, rows: Any, steps: int) -> list[MfuOpClass]:
    """FLOPs per op class (and the dtype of most of each class's FLOPs) over the given call rows."""
    flops: dict[str, int] = defaultdict(int)
    dtypes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    ids, counts = np.unique(calls.cost_id[rows], return_counts=True)
    for k, n in zip(ids.tolist(), counts.tolist()):
        cost = calls.costs[int(k)]
        if cost.flops <= 0:
            continue
        cls = op_class(cost.family, cost.unit)
        flops[cls] += cost.flops * int(n)
        dtypes[cls][cost.dtype] += cost.flops * int(n)
    return [MfuOpClass(op_class=c, flops=flops[c], flops_per_step=flops[c] // max(steps, 1),
                       dtype=max(dtypes[c], key=lambda d: dtypes[c][d]))
            for c in OP_CLASSES if flops.get(c)]


def _modules(trace: Trace, windows: list[StepWindow], calls: Any, rows: Any, steps: int) -> list[MfuModule]:
    """Matrix FLOPs per module path (the most first, at most ``MAX_MODULES``), with each module's time."""
    from aiprof.analysis.modules import module_profile, module_sums

    if rows.size == 0:
        return []
    per_call = np.array([calls.costs[int(k)].flops for k in calls.cost_id[rows].tolist()], dtype=np.float64)
    sums = module_sums(trace, windows, calls.op[rows], per_call)
    if not sums:
        return []
    profile = module_profile(trace, windows)
    device = profile.has_device
    times = {m.path: (m.device_forward_ns + m.device_backward_ns) if device else (m.forward_ns + m.backward_ns)
             for m in profile.modules}
    top = sorted(sums.items(), key=lambda kv: -kv[1])[:MAX_MODULES]
    return [MfuModule(path=p, flops=int(f), flops_per_step=int(f) // max(steps, 1), time_ns=int(times.get(p, 0)))
            for p, f in top]


def mfu_text(sec: MfuReport) -> str:
    """One line for the reports: ``MFU 12.3 % (bf16 dense peak 989 TFLOP/s, NVIDIA H100 SXM: spec)``."""
    if not sec.available:
        return ""
    rate = float(sec.peak_flops_per_s or 0)
    unit, scale = ("TFLOP/s", 1e12) if rate >= 1e12 else ("GFLOP/s", 1e9)
    return (f"MFU {100 * float(sec.mfu or 0.0):.1f}% ({(sec.flops_per_step or 0) / 1e9:,.1f} GFLOP per step of matrix work; "
            f"peak {rate / scale:,.0f} {unit} dense {sec.peak_key or ''}, {sec.device or 'device'})")


TOP_MODULES = 5


def mfu_detail_lines(sec: MfuReport) -> list[str]:
    """The op classes' and the top modules' MFU, one line each (against the peak ``mfu_text`` names)."""
    if not sec.available:
        return []
    out: list[str] = []
    for c in sec.by_op_class or []:
        note = " (vector work, not in MFU)" if c.op_class == "elementwise" else ""
        out.append(f"{c.op_class}: {100 * float(c.mfu or 0.0):.2f}% of peak, {c.flops_per_step / 1e9:,.3f} "
                   f"GFLOP per step ({c.dtype}){note}")
    for m in (sec.by_module or [])[:TOP_MODULES]:
        out.append(f"module {m.path}: {100 * float(m.mfu or 0.0):.2f}% of the step's peak, "
                   f"{100 * float(m.busy_mfu or 0.0):.2f}% while it runs, {m.flops_per_step / 1e9:,.3f} GFLOP per step")
    return out
