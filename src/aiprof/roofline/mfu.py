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
from typing import Any

import numpy as np

from aiprof.analysis.steps import StepWindow, step_windows
from aiprof.roofline.analysis import roofline
from aiprof.trace.model import Trace


def mfu_section(trace: Trace, windows: list[StepWindow] | None = None) -> dict[str, Any]:
    """The report's ``mfu`` section (``{"available": false, "reason": …}`` when it cannot be computed)."""
    windows = windows if windows is not None else step_windows(trace)
    result = roofline(trace)
    calls = result.calls
    if not windows or len(calls) == 0:
        return {"available": False, "reason": "no step or no op with recorded shapes"}
    cost_ids = calls.cost_id
    matrix = [k for k, cost in enumerate(calls.costs) if cost.unit == "matrix" and cost.flops > 0]
    if not matrix:
        return {"available": False, "reason": "no matrix op (GEMM, convolution, attention) with recorded shapes"}
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
        return {"available": False, "reason": "no matrix op inside the steps"}
    dtype = max(flops_by_dtype, key=lambda d: flops_by_dtype[d])
    peak = result.peaks.compute_peak("matrix", dtype) if result.peaks is not None else None
    durations = ends - starts
    out: dict[str, Any] = {
        "available": peak is not None,
        "dtype": dtype,
        "flops_by_dtype": dict(sorted(flops_by_dtype.items(), key=lambda kv: -kv[1])),
        "flops_per_step": int(per_step.sum() // len(windows)),
        "steps": [{"name": w.name, "flops": int(f), "duration_ns": int(d)} for w, f, d in zip(windows, per_step, durations)],
        "by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
        "device": result.peaks.name if result.peaks is not None else result.device_name,
        "peaks_note": result.peaks_note,
    }
    if peak is None:
        out["reason"] = result.peaks_note or f"no dense matrix peak for {dtype} on this device"
        return out
    rate, key = peak
    total_s = float(durations.sum()) / 1e9
    out.update({
        "peak_flops_per_s": int(rate),
        "peak_key": key,
        "peak_source": result.peaks.source if result.peaks is not None else "",
        "mfu": float(per_step.sum()) / (total_s * rate) if total_s > 0 else 0.0,
    })
    for s in out["steps"]:
        s["mfu"] = s["flops"] / (s["duration_ns"] / 1e9 * rate) if s["duration_ns"] else 0.0
    out["by_class_mfu"] = {k: v / (total_s * rate) for k, v in out["by_class"].items()} if total_s > 0 else {}
    return out


def mfu_text(sec: dict[str, Any]) -> str:
    """One line for the reports: ``MFU 12.3 % (bf16 dense peak 989 TFLOP/s, NVIDIA H100 SXM: spec)``."""
    if not sec.get("available"):
        return ""
    rate = float(sec["peak_flops_per_s"])
    unit, scale = ("TFLOP/s", 1e12) if rate >= 1e12 else ("GFLOP/s", 1e9)
    return (f"MFU {100 * float(sec['mfu']):.1f}% ({sec['flops_per_step'] / 1e9:,.1f} GFLOP per step of matrix work; "
            f"peak {rate / scale:,.0f} {unit} dense {sec['peak_key']}, {sec.get('device') or 'device'})")
