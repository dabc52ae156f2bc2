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
"""

from __future__ import annotations

from collections import defaultdict

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.analysis.steps import StepWindow, step_windows
from aiprof.trace.model import Trace


class MfuStep(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One step's matrix FLOPs, duration and (with a peak) MFU."""

    name: str
    flops: int
    duration_ns: int
    mfu: float | UnsetType = UNSET


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


def mfu_section(trace: Trace, windows: list[StepWindow] | None = None) -> MfuReport:
    """The report's ``mfu`` section (``available: false`` and a ``reason`` when it cannot be computed)."""
    from aiprof.roofline.analysis import roofline  # the report imports MfuReport: keep that import light

    windows = windows if windows is not None else step_windows(trace)
    result = roofline(trace)
    calls = result.calls
    if not windows or len(calls) == 0:
        return MfuReport(available=False, reason="no step or no op with recorded shapes")
    cost_ids = calls.cost_id
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
    )
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
    return out


def mfu_text(sec: MfuReport) -> str:
    """One line for the reports: ``MFU 12.3 % (bf16 dense peak 989 TFLOP/s, NVIDIA H100 SXM: spec)``."""
    if not sec.available:
        return ""
    rate = float(sec.peak_flops_per_s or 0)
    unit, scale = ("TFLOP/s", 1e12) if rate >= 1e12 else ("GFLOP/s", 1e9)
    return (f"MFU {100 * float(sec.mfu or 0.0):.1f}% ({(sec.flops_per_step or 0) / 1e9:,.1f} GFLOP per step of matrix work; "
            f"peak {rate / scale:,.0f} {unit} dense {sec.peak_key or ''}, {sec.device or 'device'})")
