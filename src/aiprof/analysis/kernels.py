"""Kernel statistics per device and per kernel name, and how much of the GPU the kernels really used.

Per (device, kernel name): count, total / mean / p50 / p95 / min / max duration, share of the device's
kernel time, tiny kernels (shorter than :data:`TINY_KERNEL_NS`), and two launch-based estimates that tell
"85 % busy" apart from "85 % doing useful work":

- **SM efficiency** of one kernel = ``min(blocks_per_SM, 1)`` with ``blocks_per_SM = grid blocks / SMs``
  (the TensorBoard plugin's definition; Kineto writes ``blocks per SM`` itself). A 1-block kernel on an
  80-SM V100 keeps the GPU "busy" while using 1/80 of it.
- **Achieved occupancy** = Kineto's ``est. achieved occupancy %`` (resident warps / max warps per SM,
  from the occupancy calculator; not a measured counter).

Per name both are weighted by kernel duration. Per device we also compute the plugin's window-level
numbers: *est. SM efficiency* = ∫ min(Σ blocks_per_SM of the kernels running at t, 1) dt / window, and
*est. achieved occupancy* = Σ occupancy·dur / Σ dur over kernels clipped to the window; the window is the
plugin's step span (see :func:`tb_plugin_window`). Per-name numbers cover every kernel in the trace.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aiprof import arrays
from aiprof.arrays import unique, setdiff
from aiprof.analysis import intervals as iv
from aiprof.analysis.comm import is_comm_kernel
from aiprof.trace import links
from aiprof.trace.model import GPU_WORK_KINDS, I64, Bool, Kind, Trace

F64 = np.ndarray[Any, np.dtype[np.float64]]

TINY_KERNEL_NS = 10_000
"""Kernels shorter than 10 µs are *tiny*: at that length launch overhead (~3-5 µs per launch on the host)
and the GPU's own ramp-up are comparable to the work, so many tiny kernels mean a latency-bound run
(fuse them, use CUDA graphs or torch.compile)."""

# SM (NVIDIA) / CU (AMD) counts of common accelerators, for traces without deviceProperties. Matched as
# case-insensitive substrings of the device name, first hit wins (so more specific names come first).
# Sources: NVIDIA architecture whitepapers / product briefs, AMD Instinct data sheets.
KNOWN_SM_COUNTS: tuple[tuple[str, int], ...] = (
    ("H100 PCIe", 114),
    ("H100", 132),
    ("H200", 132),
    ("H800", 132),
    ("GH200", 132),
    ("B200", 148),
    ("A100", 108),
    ("A800", 108),
    ("A10G", 80),
    ("A10", 72),
    ("A30", 56),
    ("A40", 84),
    ("L40S", 142),
    ("L4", 58),
    ("T4", 40),
    ("V100", 80),
    ("P100", 56),
    ("RTX 2080 Ti", 68),
    ("RTX 3090", 82),
    ("RTX 4090", 128),
    ("RTX A6000", 84),
    ("MI300X", 304),
    ("MI300A", 228),
    ("MI250X", 110),
    ("MI250", 104),
    ("MI210", 104),
    ("MI100", 120),
)


def known_sm_count(device_name: str) -> int | None:
    """SMs of a device from :data:`KNOWN_SM_COUNTS`, by name; None when the name is not in the table."""
    lowered = device_name.lower()
    for key, count in KNOWN_SM_COUNTS:
        if key.lower() in lowered:
            return count
    return None


# ---------------------------------------------------------------------------------------------------
# Result types
# ---------------------------------------------------------------------------------------------------
class KernelNameStats(msgspec.Struct, frozen=True, kw_only=True):
    """One kernel name on one device. Durations in ns; ``*_pct`` are percentages (0-100)."""

    name: str
    count: int
    total_ns: int
    mean_ns: float
    p50_ns: float
    p95_ns: float
    min_ns: int
    max_ns: int
    kernel_time_share_pct: float  # of the device's summed kernel time
    tiny_count: int
    tiny_total_ns: int
    tiny_time_share_pct: float  # of this name's time
    is_comm: bool
    sm_efficiency_pct: float | None  # duration-weighted mean of min(blocks per SM, 1)
    achieved_occupancy_pct: float | None  # duration-weighted mean of Kineto's estimate


class DeviceKernelStats(msgspec.Struct, frozen=True, kw_only=True):
    """All kernels of one device. ``kernels`` is sorted by total time, longest first (the report's
    ``ranks[].kernels`` keeps the longest :data:`aiprof.analysis.run.TOP_N`; ``kernel_names`` counts them all)."""

    device: int
    device_name: str
    num_sms: int | None
    num_sms_source: str  # "deviceProperties", "known-GPU table", "inferred from Kineto blocks per SM", "unknown"
    kernel_count: int
    kernel_total_ns: int  # sum of durations (overlapping streams counted twice)
    kernel_busy_ns: int  # union of kernel intervals
    comm_kernel_total_ns: int
    tiny_threshold_ns: int
    tiny_count: int
    tiny_total_ns: int
    tiny_count_pct: float
    tiny_time_share_pct: float
    sm_efficiency_pct: float | None  # duration-weighted over all kernels: "how much of the GPU while running"
    achieved_occupancy_pct: float | None  # duration-weighted over all kernels
    window_start_ns: int
    window_end_ns: int
    window_source: str  # "ProfilerStep (TensorBoard plugin rule)", "device activity", "caller"
    gpu_utilization_pct: float | None  # union of kernels inside the window / window (plugin's)
    est_sm_efficiency_pct: float | None  # plugin's: ∫ min(Σ blocks/SM, 1) dt / window
    est_achieved_occupancy_pct: float | None  # plugin's: Σ occ·dur / Σ dur, kernels clipped to window
    sm_efficiency_note: str  # why SM efficiency is None, or where the SM count came from
    kernels: tuple[KernelNameStats, ...] = ()
    kernel_names: int = 0  # distinct kernel names on the device (the length of ``kernels`` before any cut)


class KernelStats(msgspec.Struct, frozen=True, kw_only=True):
    """Kernel statistics of one trace, one entry per device with kernels (the report's ``ranks[].kernels``)."""

    tiny_threshold_ns: int = TINY_KERNEL_NS
    devices: tuple[DeviceKernelStats, ...]

    def device(self, index: int) -> DeviceKernelStats:
        for dev in self.devices:
            if dev.device == index:
                return dev
        raise KeyError(index)


# ---------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------
def kernel_stats(
    trace: Trace, tiny_threshold_ns: int = TINY_KERNEL_NS, window_ns: tuple[int, int] | None = None
) -> KernelStats:
    """Kernel statistics per device. ``window_ns`` overrides the window of the plugin-style numbers."""
    c = trace.columns
    rows = np.flatnonzero(c.kind == int(Kind.KERNEL))
    if rows.size == 0:
        return KernelStats(devices=(), tiny_threshold_ns=tiny_threshold_ns)
    comm = is_comm_kernel(trace)
    window: tuple[int, int] | None = window_ns
    source = "caller"
    if window is None:
        window = tb_plugin_window(trace)
        source = "ProfilerStep (TensorBoard plugin rule)" if window else "device activity"
    devices = []
    for dev in unique(c.device[rows]).tolist():
        dev_rows = rows[c.device[rows] == dev]
        devices.append(_device_stats(trace, int(dev), dev_rows, comm, tiny_threshold_ns, window, source))
    return KernelStats(devices=tuple(devices), tiny_threshold_ns=tiny_threshold_ns)


# ---------------------------------------------------------------------------------------------------
# Per device
# ---------------------------------------------------------------------------------------------------
def _device_stats(
    trace: Trace,
    dev: int,
    rows: I64,
    comm: Bool,
    tiny_ns: int,
    window: tuple[int, int] | None,
    window_source: str,
) -> DeviceKernelStats:
    c = trace.columns
    ts, dur = c.ts[rows], c.dur[rows]
    num_sms, sms_source = _num_sms(trace, dev, rows)
    eff = _sm_efficiency_per_kernel(trace, rows, num_sms)
    occ = c.occupancy_pct[rows].astype(np.float64)
    occ[occ < 0] = np.nan
    tiny = dur < tiny_ns
    total = int(dur.sum())
    if window is None:
        window = (int(ts.min()), int((ts + dur).max()))
    busy = iv.merge(ts, ts + dur)
    note = _sm_note(sms_source, num_sms, eff)
    per_name = _per_name(trace, rows, comm, eff, occ, tiny_ns, total)
    return DeviceKernelStats(
        device=dev,
        device_name=trace.device_info(dev).name,
        num_sms=num_sms,
        num_sms_source=sms_source,
        kernel_count=int(rows.size),
        kernel_total_ns=total,
        kernel_busy_ns=iv.total(busy),
        comm_kernel_total_ns=int(dur[comm[rows]].sum()),
        tiny_threshold_ns=tiny_ns,
        tiny_count=int(tiny.sum()),
        tiny_total_ns=int(dur[tiny].sum()),
        tiny_count_pct=_pct(int(tiny.sum()), int(rows.size)),
        tiny_time_share_pct=_pct(int(dur[tiny].sum()), total),
        sm_efficiency_pct=_weighted_pct(eff * 100.0, dur),
        achieved_occupancy_pct=_weighted_pct(occ, dur),
        window_start_ns=int(window[0]),
        window_end_ns=int(window[1]),
        window_source=window_source,
        gpu_utilization_pct=_pct(iv.total(iv.clip(busy, window[0], window[1])), window[1] - window[0]),
        est_sm_efficiency_pct=_window_sm_efficiency(ts, dur, eff, window),
        est_achieved_occupancy_pct=_window_occupancy(ts, dur, occ, window),
        sm_efficiency_note=note,
        kernels=per_name,
        kernel_names=len(per_name),
    )


def _num_sms(trace: Trace, dev: int, rows: I64) -> tuple[int | None, str]:
    """SMs of a device: deviceProperties, else the known-GPU table, else inferred from Kineto's args."""
    info = trace.device_info(dev)
    if info.num_sms > 0:
        return info.num_sms, "deviceProperties"
    known = known_sm_count(info.name) if info.name else None
    if known is not None:
        return known, "known-GPU table"
    c = trace.columns
    bps, grid = c.blocks_per_sm[rows].astype(np.float64), c.grid[rows]
    ok = np.isfinite(bps) & (bps > 0) & (grid > 0)
    if ok.any():
        return int(round(float(arrays.median(grid[ok] / bps[ok])))), "inferred from Kineto blocks per SM"
    return None, "unknown"


def _sm_efficiency_per_kernel(trace: Trace, rows: I64, num_sms: int | None) -> F64:
    """min(blocks per SM, 1) per kernel (NaN when unknown). Kineto's own ``blocks per SM`` comes first
    (it used the real SM count); grid / num_sms fills kernels without it."""
    c = trace.columns
    bps = c.blocks_per_sm[rows].astype(np.float64)
    missing = ~np.isfinite(bps) | (bps <= 0)
    if num_sms:
        grid = c.grid[rows].astype(np.float64)
        fill = missing & (grid > 0)
        bps[fill] = grid[fill] / num_sms
        missing &= ~fill
    bps[missing] = np.nan
    return np.minimum(bps, 1.0)


def _sm_note(source: str, num_sms: int | None, eff: F64) -> str:
    if np.isfinite(eff).any():
        return f"{num_sms} SMs ({source})" if num_sms else "from Kineto's blocks per SM"
    if num_sms is None:
        return "unknown: no deviceProperties, unknown device name, and no blocks per SM / grid in the kernels"
    return "unknown: the kernels carry neither blocks per SM nor grid sizes"


def _window_sm_efficiency(ts: I64, dur: I64, eff_capped: F64, window: tuple[int, int]) -> float | None:
    """The plugin's est. SM efficiency: sweep over kernel start/end points, the level between two points is
    min(Σ blocks per SM of the running kernels, 1), integrated over the window and divided by its length.

    The sum uses *uncapped* blocks per SM per kernel in the plugin; a capped value ≥ 1 gives the same level
    because the level is capped at 1 anyway, and values < 1 are unchanged."""
    ok = np.isfinite(eff_capped) & (eff_capped > 0) & (dur > 0)
    lo, hi = window
    if not ok.any() or hi <= lo:
        return None
    starts, ends, value = ts[ok], ts[ok] + dur[ok], eff_capped[ok]
    times = np.concatenate((starts, ends))
    delta = np.concatenate((value, -value))
    is_end = np.concatenate((np.zeros(starts.size, np.int8), np.ones(ends.size, np.int8)))
    order = np.lexsort((is_end, times))
    times, level = times[order], np.cumsum(delta[order])
    level = np.where(level > 1e-9, np.minimum(level, 1.0), 0.0)
    seg_s = np.clip(times[:-1], lo, hi)
    seg_e = np.clip(times[1:], lo, hi)
    area = float((level[:-1] * (seg_e - seg_s)).sum())
    return 100.0 * area / (hi - lo)


def _window_occupancy(ts: I64, dur: I64, occ: F64, window: tuple[int, int]) -> float | None:
    """The plugin's est. achieved occupancy: occupancy weighted by each kernel's time inside the window."""
    inside = np.clip(ts + dur, window[0], window[1]) - np.clip(ts, window[0], window[1])
    return _weighted_pct(occ, inside)


# ---------------------------------------------------------------------------------------------------
# Per kernel name (vectorised over groups)
# ---------------------------------------------------------------------------------------------------
def _per_name(
    trace: Trace, rows: I64, comm: Bool, eff: F64, occ: F64, tiny_ns: int, device_total: int
) -> tuple[KernelNameStats, ...]:
    c = trace.columns
    names, dur = c.name[rows], c.dur[rows]
    order = np.lexsort((dur, names))
    names, dur = names[order], dur[order]
    eff, occ, is_comm = eff[order], occ[order], comm[rows][order]
    starts = np.flatnonzero(np.concatenate(([True], names[1:] != names[:-1])))
    counts = np.diff(np.append(starts, names.size))
    totals = np.add.reduceat(dur, starts)
    tiny = dur < tiny_ns
    tiny_counts = np.add.reduceat(tiny.astype(np.int64), starts)
    tiny_totals = np.add.reduceat(np.where(tiny, dur, 0), starts)
    p50, p95 = _group_quantile(dur, starts, counts, 0.5), _group_quantile(dur, starts, counts, 0.95)
    eff_pct, occ_pct = _group_weighted(eff * 100.0, dur, starts), _group_weighted(occ, dur, starts)
    comm_any = np.logical_or.reduceat(is_comm, starts)
    out = []
    for g, s in enumerate(starts.tolist()):
        n, total = int(counts[g]), int(totals[g])
        out.append(
            KernelNameStats(
                name=trace.strings[int(names[s])],
                count=n,
                total_ns=total,
                mean_ns=total / n,
                p50_ns=float(p50[g]),
                p95_ns=float(p95[g]),
                min_ns=int(dur[s]),
                max_ns=int(dur[s + n - 1]),
                kernel_time_share_pct=_pct(total, device_total),
                tiny_count=int(tiny_counts[g]),
                tiny_total_ns=int(tiny_totals[g]),
                tiny_time_share_pct=_pct(int(tiny_totals[g]), total),
                is_comm=bool(comm_any[g]),
                sm_efficiency_pct=_opt(eff_pct[g]),
                achieved_occupancy_pct=_opt(occ_pct[g]),
            )
        )
    out.sort(key=lambda k: (-k.total_ns, k.name))
    return tuple(out)


def _group_quantile(sorted_values: I64, starts: I64, counts: I64, q: float) -> F64:
    """Quantile per group of an array sorted within groups (linear interpolation, numpy's default)."""
    pos = (counts - 1) * q
    lower = np.floor(pos).astype(np.int64)
    upper = np.minimum(lower + 1, counts - 1)
    frac = pos - lower
    lo_v = sorted_values[starts + lower].astype(np.float64)
    hi_v = sorted_values[starts + upper].astype(np.float64)
    out: F64 = lo_v + (hi_v - lo_v) * frac
    return out


def _group_weighted(values: F64, weights: I64, starts: I64) -> F64:
    """Weighted mean per group over entries with a finite value; NaN for groups without any."""
    ok = np.isfinite(values)
    w = np.where(ok, weights, 0).astype(np.float64)
    num = np.add.reduceat(np.where(ok, values, 0.0) * w, starts)
    den = np.add.reduceat(w, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


# ---------------------------------------------------------------------------------------------------
# The TensorBoard plugin's step window
# ---------------------------------------------------------------------------------------------------
def tb_plugin_window(trace: Trace) -> tuple[int, int] | None:
    """Start of the first ``ProfilerStep#`` to the end of the last kept one, the plugin's way.

    Each step ends at max(its CPU end, the end of the GPU work launched by runtime calls lying wholly
    inside it). Trailing steps that launched nothing are dropped, and so is the last step when it launched
    fewer than 80 % of the device activities of the one before (the profiler probably missed its kernels).
    The first step starts later when GPU work launched before it is still running (plugin rule). None
    when the trace has no ProfilerStep or no GPU work was launched inside any.
    """
    steps = _profiler_steps(trace)
    if steps.size == 0:
        return None
    c = trace.columns
    s_start, s_end = c.ts[steps], c.ts[steps] + c.dur[steps]
    gpu = np.flatnonzero(trace.kind_mask(*GPU_WORK_KINDS))
    launch = links.launcher(trace)[gpu]
    gpu, launch = gpu[launch >= 0], launch[launch >= 0]
    step_of = _step_of_launch(c.ts[launch], c.ts[launch] + c.dur[launch], s_start, s_end)
    matched = step_of >= 0
    if not matched.any():
        return None
    n = steps.size
    count = np.bincount(step_of[matched], minlength=n)
    dev_end = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(dev_end, step_of[matched], c.ts[gpu[matched]] + c.dur[gpu[matched]])
    first = _first_step_start(trace, gpu, matched, step_of, int(s_start[0]))
    last = int(np.flatnonzero(count > 0)[-1])
    if last > 0 and count[last - 1] * 0.8 > count[last]:
        last -= 1
    end = max(int(s_end[last]), int(dev_end[last]))
    return first, max(end, first)


def _profiler_steps(trace: Trace) -> I64:
    c = trace.columns
    ann = np.flatnonzero(trace.kind_mask(Kind.USER_ANNOTATION, Kind.CPU_OP))
    is_step = np.array([s.startswith("ProfilerStep#") for s in trace.strings], dtype=bool)
    if is_step.size == 0:
        return ann[:0]
    steps: I64 = ann[is_step[c.name[ann]]]
    return steps[np.argsort(c.ts[steps], kind="stable")]


def _step_of_launch(l_start: I64, l_end: I64, s_start: I64, s_end: I64) -> I64:
    """Index of the step whose span wholly contains each launch call, else -1 (steps do not overlap)."""
    idx = np.searchsorted(s_start, l_start, side="right") - 1
    ok = (idx >= 0) & (l_end <= s_end[np.maximum(idx, 0)])
    return np.where(ok, idx, -1)


def _first_step_start(trace: Trace, gpu: I64, matched: Bool, step_of: I64, host_start: int) -> int:
    """Host start of step 0, pushed later by GPU work launched outside any step that ends before step 0's
    first GPU activity (the plugin's rule, so the first step does not absorb the previous one's tail)."""
    c = trace.columns
    in0 = gpu[matched & (step_of == 0)]
    if in0.size == 0:
        return host_start
    first_dev = int(c.ts[in0].min())
    all_gpu = np.flatnonzero(trace.kind_mask(*GPU_WORK_KINDS))
    outside = setdiff(all_gpu, gpu[matched])
    ends = c.ts[outside] + c.dur[outside]
    before = ends[ends < first_dev]
    return max(host_start, int(before.max())) if before.size else host_start


# ---------------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------------
def _pct(part: int | float, whole: int | float) -> float:
    return 100.0 * float(part) / float(whole) if whole else 0.0


def _weighted_pct(values: F64, weights: I64) -> float | None:
    ok = np.isfinite(values) & (weights > 0)
    if not ok.any():
        return None
    w = weights[ok].astype(np.float64)
    return float((values[ok] * w).sum() / w.sum())


def _opt(value: float) -> float | None:
    return None if not np.isfinite(value) else float(value)


# ---------------------------------------------------------------------------------------------------
# Which math unit a kernel uses, from its name
# ---------------------------------------------------------------------------------------------------
MATH_UNKNOWN, MATH_TENSOR_CORE, MATH_FP32 = 0, 1, 2
"""Codes of :func:`math_class_codes`: ``MATH_TENSOR_CORE`` = reduced-precision matrix units (NVIDIA tensor
cores running FP16 / BF16 / TF32 / FP8 / INT8, AMD matrix cores on 16/8-bit data); ``MATH_FP32`` = full
precision math without them (CUDA-core FFMA SGEMMs, cuDNN's ``scudnn`` / ``implicit_convolve_sgemm``
kernels, cuBLAS ``xmma ... ffma``, CUTLASS ``simt``, AMD Tensile FP32/FP64 GEMMs); ``MATH_UNKNOWN`` =
anything else (elementwise kernels, Triton, names that do not say)."""

# TF32 is a tensor-core format: the strongest marker, checked first (``sm80_xmma_gemm_tf32f32...``,
# ``cutlass_tensorop_s1688fprop_optimized_tf32``).
_TF32 = re.compile(r"(?i)tf32")
_FP32_MATH = re.compile(
    r"(?i)(sgemm|dgemm|cgemm|zgemm|gcgemm|ffma|simt|scudnn|dcudnn|f32f32_f32f32|f64f64_f64f64|OpClassSimt"
    r"|_engine<(float|double)|winograd\w*<float|fft2d_\w+<float|convolve_sgemm"
    r"|Cijk_A[a-z]+_B[a-z]+_(S|SB|D|DB|C|CB|Z|ZB)_|igemm_\w+_fp32)"
)
_TENSOR_CORE = re.compile(
    r"(?i)(h884|h1688|h16816|s884|s1688|s16816|s161616|i8816|i16832|hmma|imma|qmma|tensorop|wmma|gmma|nvjet"
    r"|tensor\d+x\d+x\d+|xdl|mfma|OpClassTensorOp|flash_fwd|flash_bwd|flash_attn|fmha"
    r"|xmma\w*(bf16|f16|e4m3|e5m2|i8)|Cijk_A[a-z]+_B[a-z]+_(H|B|I8|F8|B8|4xi8)[A-Z0-9]*_|igemm_\w+_(bf16|fp16))"
)


def math_class(name: str) -> int:
    """:data:`MATH_TENSOR_CORE`, :data:`MATH_FP32` or :data:`MATH_UNKNOWN` for one kernel name.

    FP32 ``xmma ... ffma`` / ``*_sgemm_*`` / ``gemm..._f32f32_f32f32..._ffma`` GEMMs run on the CUDA cores
    (no tensor cores) even though their names look like the tensor-core ``xmma`` family; TF32 kernels
    (``*_tf32*``, ``s1688gemm``, ``cutlass_80_tensorop_s1688``) do use tensor cores."""
    if _TF32.search(name):
        return MATH_TENSOR_CORE
    if _FP32_MATH.search(name):
        return MATH_FP32
    if _TENSOR_CORE.search(name):
        return MATH_TENSOR_CORE
    return MATH_UNKNOWN


def math_class_codes(trace: Trace, rows: I64) -> npt.NDArray[np.int8]:
    """:func:`math_class` of each row's name (one regex test per distinct name, cached on the trace)."""
    memo: dict[int, int] = trace.cache.setdefault("kernels.math_class", {})
    names = trace.columns.name[rows]
    out = np.zeros(rows.shape, dtype=np.int8)
    for n in unique(names).tolist():
        code = memo.get(n)
        if code is None:
            code = memo[n] = math_class(trace.strings[n])
        if code:
            out[names == n] = code
    return out


def exclusive_ns(starts: I64, ends: I64) -> I64:
    """For each interval, the time no *other* interval of the set covers (its exclusive time).

    A sweep over all start/end points gives the number of intervals running at each instant; the
    segments where exactly one runs belong to that one interval, and each interval's exclusive time is
    the length of those segments inside it (a difference of the set's cumulative length)."""
    if starts.size == 0:
        return np.zeros(0, dtype=np.int64)
    times = np.concatenate((starts, ends))
    delta = np.concatenate((np.ones(starts.size, np.int64), -np.ones(ends.size, np.int64)))
    order = np.lexsort((delta, times))  # at equal times, ends (-1) before starts: touching is not overlap
    times, level = times[order], np.cumsum(delta[order])
    solo = (level[:-1] == 1) & (times[1:] > times[:-1])
    alone = iv.merge(times[:-1][solo], times[1:][solo])
    out: I64 = iv.covered_before(alone, ends) - iv.covered_before(alone, starts)
    return out
