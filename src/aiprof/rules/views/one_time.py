"""One-time start-up costs of a trace (CUDA context creation, lazy module loading, library initialisation,
cuDNN autotuning, first compilations), found by their structure: what ``RankContext.one_time_costs`` holds.
``RankContext.steps`` leaves them out of the steady state; the ``cold_start`` rule reports them
(:mod:`aiprof.rules.coldstart`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aiprof import arrays
from aiprof.analysis import intervals as iv
from aiprof.analysis.compile import compile_events
from aiprof.analysis.steps import StepWindow
from aiprof.rules.views.graphs import GRAPH_LAUNCH
from aiprof.trace import links
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

STALL_MIN_NS = 10_000_000  # a runtime call shorter than this is not worth calling a stall
OP_STALL_MIN_NS = 50_000_000  # a first op this long with the device idle is initialisation, not a big input
FAMILY_MIN_NS = 1_000_000  # module loading / context calls: one-time by nature, reported from 1 ms
OUTLIER_RATIO = 20.0  # a stall takes this many times the median call of its name (or of all calls)
MAX_BUSY_SHARE = 0.5  # the device did nothing during most of the stall
MAX_LEADING = 3  # one window: at most this many long calls of a name may be its "first calls"
AUTOTUNE_MIN_EVENTS = 24  # event records / synchronisations inside one convolution: cudnn.benchmark trying algorithms
# (cuDNN itself records a few events in some algorithms: ~10 per call on every pass, not a burst)

_MODULE_LOADING = r"^(cuModuleLoad|cuLibraryLoad|cuLibraryGetKernel|cuModuleGetFunction|cudaFuncGetAttributes|hipModuleLoad|hipFuncGetAttributes)"
_CONTEXT = (
    r"^(cuInit|cuCtxCreate|cuDevicePrimaryCtxRetain|cudaGetDeviceCount|cudaSetDevice|cudaGetDeviceProperties"
    r"|cudaDeviceGetStreamPriorityRange|cudaStreamCreate|cudaFree$|cudaMalloc|cudaHostAlloc|cudaMallocHost"
    r"|hipInit|hipGetDeviceCount|hipSetDevice|hipGetDeviceProperties|hipStreamCreate|hipFree$|hipMalloc"
    r"|hipDeviceGetStreamPriorityRange|cudaDriverGetVersion|cudaRuntimeGetVersion)"
)
_CONTEXT_ONLY = (
    r"^(cuInit|cuCtxCreate|cuDevicePrimaryCtxRetain|cudaGetDeviceCount|cudaSetDevice|cudaDeviceGetStreamPriorityRange"
    r"|hipInit|hipGetDeviceCount|hipSetDevice|hipDeviceGetStreamPriorityRange)"
)
_LAUNCH = r"Launch"
_WAITS = r"(Synchronize|Memcpy|StreamWait|EventQuery|Wait)"
_CONV = r"^(aten::)?(cudnn_convolution|miopen_convolution|cudnn_convolution_transpose|miopen_convolution_transpose|convolution_backward)$"
_EVENT_CALL = r"^(cudaEventSynchronize|cudaEventRecord|cudaEventQuery|cudaEventElapsedTime|hipEventSynchronize|hipEventRecord|hipEventQuery|hipEventElapsedTime|cuEventSynchronize|cuEventRecord)"


@dataclass(frozen=True)
class OneTimeCost:
    """One stall paid once: a runtime call (``row``) or an autotuned convolution op."""

    row: int
    name: str
    kind: str  # "context creation" | "module loading" | "library initialisation" | "cudnn autotuning" | "compilation"
    start_ns: int
    end_ns: int
    median_ns: int  # median duration of calls of the same name (autotuning: of the event calls inside)
    calls: int = 1  # event calls inside an autotuned convolution

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def one_time_costs(trace: Trace, windows: list[StepWindow]) -> list[OneTimeCost]:
    """The trace's one-time costs, by start time (cached on the trace). With several step windows only
    those that begin before the first step ends count: later steps are steady state by definition."""
    key = "coldstart.one_time_costs"
    cached: list[OneTimeCost] | None = trace.cache.get(key)
    if cached is None:
        calls = _stalled_calls(trace, windows) + _autotuned_convs(trace, windows) + _first_compiles(trace)
        cached = sorted(calls + _first_op_stalls(trace, windows, calls), key=lambda c: c.start_ns)
        trace.cache[key] = cached
    return cached


# ---------------------------------------------------------------------------------------------------
# Stalled runtime calls
# ---------------------------------------------------------------------------------------------------
def _stalled_calls(trace: Trace, windows: list[StepWindow]) -> list[OneTimeCost]:
    """Runtime/driver calls that are long, an extreme outlier for their name, leave the device idle, and
    are one-time by position: in the first of several steps, or (one window) the first calls of their
    name on their thread, the first launch of a kernel, or a module-loading call."""
    c = trace.columns
    rt = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    if rt.size == 0:
        return []
    family = trace.name_matches(rt, _MODULE_LOADING) | trace.name_matches(rt, _CONTEXT)
    cand = rt[(c.dur[rt] >= STALL_MIN_NS) | (family & (c.dur[rt] >= FAMILY_MIN_NS))]
    if cand.size == 0 or cand.size > 1000:  # a thousand long calls are the steady state, not a start
        return []
    cand = cand[_device_idle_during(trace, cand) & ~_waits_for_device(trace, rt, cand)]
    overall = float(arrays.median(c.dur[rt]))
    medians = _median_per_name(trace, rt, cand)
    multi = len(windows) > 1
    first_end = windows[0].end_ns if windows else 0
    first_launch = _first_kernel_launch(trace, cand)
    groups = _same_name_groups(trace, rt, cand)
    out: list[OneTimeCost] = []
    for i, row in enumerate(cand.tolist()):
        long_calls, median = medians[int(c.name[row])]
        baseline = overall if median < 0 else median
        if c.dur[row] < OUTLIER_RATIO * max(baseline, 1.0):
            continue
        if multi:  # in the first step, and never again: a copy as long in every step is the step's own
            one_time = int(c.ts[row]) < first_end and not _comes_back(trace, groups(row), row, first_end)
        else:
            one_time = bool(first_launch[i]) or bool(trace.name_matches(np.array([row]), _MODULE_LOADING)[0]) or (
                long_calls <= MAX_LEADING and _leading(trace, groups(row), row, cand))
        if one_time:
            out.append(OneTimeCost(row, trace.name_of(row), _kind_of(trace, rt, row, bool(first_launch[i])),
                                   int(c.ts[row]), int(c.ts[row] + c.dur[row]), int(median)))
    return out


def _waits_for_device(trace: Trace, rt: I64, cand: I64) -> np.ndarray:
    """Copies and synchronising calls wait for device work, which the trace may not show (graph replays
    without per-kernel activity): they count only as their process's first runtime call, where the
    context is created, and never in a trace that replays graphs."""
    c = trace.columns
    waits = trace.name_matches(cand, _WAITS)
    if not waits.any():
        return waits
    if trace.name_matches(rt, GRAPH_LAUNCH).any():
        return waits
    pids, first_of_pid = np.unique(c.pid[rt], return_index=True)  # rt is time-ordered: each process's first call
    first = rt[first_of_pid[np.searchsorted(pids, c.pid[cand])]]
    result: np.ndarray = waits & (first != cand)
    return result


def _device_idle_during(trace: Trace, rows: I64) -> np.ndarray:
    """Whether the device (all of them) was busy for at most MAX_BUSY_SHARE of each call: a sync waiting
    for kernels is not a stall, a call that holds the device idle is."""
    c = trace.columns
    busy: iv.IntervalSet | None = trace.cache.get("coldstart.device_busy")
    if busy is None:
        gpu = trace.rows_of(*GPU_WORK_KINDS)
        busy = trace.cache["coldstart.device_busy"] = iv.merge(c.ts[gpu], c.ts[gpu] + c.dur[gpu])
    covered = iv.overlap_per_window(busy, c.ts[rows], c.ts[rows] + c.dur[rows])
    result: np.ndarray = covered <= MAX_BUSY_SHARE * c.dur[rows]
    return result


def _median_per_name(trace: Trace, rows: I64, cand: I64) -> dict[int, tuple[int, float]]:
    """For each candidate's name: (its long calls, the median duration of its other calls, -1 when all of
    them are long). The long calls are left out of the median: three calls of which two are the stalls
    (cuBLAS initialising in two cudaFree) must not make the stalls look typical."""
    c = trace.columns
    out: dict[int, tuple[int, float]] = {}
    names = arrays.unique(c.name[cand])
    rows = rows[arrays.isin(c.name[rows], names)]  # one pass over the calls, then only the candidates' names
    for name in names.tolist():
        same = rows[c.name[rows] == name]
        short = same[~arrays.isin(same, cand)]
        long_calls = int(same.size - short.size)
        out[int(name)] = (long_calls, float(arrays.median(c.dur[short])) if short.size else -1.0)
    return out


def _comes_back(trace: Trace, same: I64, row: int, after: int) -> bool:
    """A call of the same name on the same thread (``same``) starting after ``row`` and at or after
    ``after`` (the first step's end; one window: ``row`` itself) takes a quarter of this one or more."""
    c = trace.columns
    later = same[(c.ts[same] > c.ts[row]) & (c.ts[same] >= after)]
    return bool((c.dur[later] * 4 >= c.dur[row]).any())


def _leading(trace: Trace, same: I64, row: int, cand: I64) -> bool:
    """Every earlier call of the same name on the same thread (``same``, time-ordered) is a long call
    too: the name's first calls (context creation, library initialisation), not a stall in a loop."""
    earlier = same[trace.columns.ts[same] < trace.columns.ts[row]]
    return bool(arrays.isin(earlier, cand).all())


def _first_kernel_launch(trace: Trace, calls: I64) -> np.ndarray:
    """For each call: whether it is a launch of a kernel name seen for the first time (lazy loading)."""
    c = trace.columns
    out = np.zeros(calls.size, dtype=bool)
    launches = trace.name_matches(calls, _LAUNCH)
    if not launches.any():
        return out
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    launcher = links.launcher(trace)[gpu]
    _, first = np.unique(c.name[gpu], return_index=True)  # rows are in time order: first of each name
    firsts = launcher[first]
    out[launches] = arrays.isin(calls[launches], firsts[firsts >= 0])
    return out


def _kind_of(trace: Trace, rt: I64, row: int, first_launch: bool) -> str:
    """The process's first runtime call creates the context, whatever it is; a kernel's first launch
    loads its module; other first calls initialise a library (cuBLAS/cuDNN handles, streams, pools)."""
    c = trace.columns
    one = np.array([row])
    if trace.name_matches(one, _WAITS)[0]:
        return "first copy/sync"  # a blocking first call (staging buffers, a context created lazily)
    same_process = rt[c.pid[rt] == c.pid[row]]
    if int(same_process[0]) == row or trace.name_matches(one, _CONTEXT_ONLY)[0]:
        return "context creation"
    if trace.name_matches(one, _MODULE_LOADING)[0] or first_launch:
        return "module loading"
    return "library initialisation"


def _first_compiles(trace: Trace) -> list[OneTimeCost]:
    """torch.compile's first compile of each frame (compile id F/0), paid once per process; a compile the
    trace names no id for counts when it is the first on its thread. Recompiles are ``recompilation``'s."""
    out: list[OneTimeCost] = []
    seen: set[tuple[int, int]] = set()
    for e in compile_events(trace):
        first_on_thread = (e.pid, e.tid) not in seen
        seen.add((e.pid, e.tid))
        if e.attempt == 0 or (e.attempt is None and first_on_thread):
            out.append(OneTimeCost(e.row, trace.name_of(e.row), "compilation", e.start_ns, e.end_ns, 0))
    return out


# ---------------------------------------------------------------------------------------------------
# First calls of an op that initialise a library
# ---------------------------------------------------------------------------------------------------
def _first_op_stalls(trace: Trace, windows: list[StepWindow], found: list[OneTimeCost]) -> list[OneTimeCost]:
    """The first call of an op name that takes ≥ OUTLIER_RATIO × the median of its later calls with the
    device idle (cuDNN/cuBLAS loading and creating handles inside the first convolution or GEMM), when
    the runtime stalls already found do not explain most of it. Outermost such ops only."""
    c = trace.columns
    ops = trace.rows_of(Kind.CPU_OP)
    long_ops = ops[c.dur[ops] >= OP_STALL_MIN_NS]
    rt = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    if long_ops.size == 0 or long_ops.size > 1000 or trace.name_matches(rt, GRAPH_LAUNCH).any():
        return []  # graph replays hide kernels: an op waiting for them would look like a stall
    if len(windows) > 1:
        long_ops = long_ops[c.ts[long_ops] < windows[0].end_ns]
    long_ops = long_ops[_device_idle_during(trace, long_ops)]
    waits = rt[trace.name_matches(rt, _WAITS)]
    in_waits = iv.overlap_per_window(iv.merge(c.ts[waits], c.ts[waits] + c.dur[waits]), c.ts[long_ops],
                                     c.ts[long_ops] + c.dur[long_ops])
    long_ops = long_ops[in_waits < 0.5 * c.dur[long_ops]]  # a blocking copy waits for the device: not a start-up cost
    groups = _same_name_groups(trace, ops, long_ops)
    after = windows[0].end_ns if len(windows) > 1 else np.iinfo(np.int64).min
    flagged: list[int] = []
    medians: dict[int, float] = {}
    for row in long_ops.tolist():
        same = groups(row)  # this op's name on its thread, in time order
        if same.size < 2 or int(same[0]) != row:
            continue
        medians[row] = float(arrays.median(c.dur[same[1:]]))
        if c.dur[row] >= OUTLIER_RATIO * max(medians[row], 1.0) and not _comes_back(trace, same, row, after):
            flagged.append(row)
    rows = _outermost(trace, np.asarray(flagged, dtype=np.int64))
    known = iv.merge(np.array([f.start_ns for f in found], dtype=np.int64), np.array([f.end_ns for f in found], dtype=np.int64))
    explained = iv.overlap_per_window(known, c.ts[rows], c.ts[rows] + c.dur[rows])
    return [
        OneTimeCost(row, trace.name_of(row), "library initialisation", int(c.ts[row]), int(c.ts[row] + c.dur[row]),
                    int(medians[row]))
        for row, covered in zip(rows.tolist(), explained.tolist())
        if covered < 0.5 * c.dur[row]
    ]


def _same_name_groups(trace: Trace, rows: I64, queries: I64) -> Callable[[int], I64]:
    """A lookup: row (one of ``queries``) → the rows (of ``rows``, time-ordered) with its name on its
    thread. Only the rows with a query's name are kept (one vectorised pass), then one sort, then a binary
    search per query."""
    c = trace.columns
    rows = rows[arrays.isin(c.name[rows], c.name[queries])]
    _, thread = np.unique((c.pid[rows] << 32) ^ (c.tid[rows] & 0xFFFFFFFF), return_inverse=True)
    keys = c.name[rows].astype(np.int64) * (int(thread.max()) + 1 if rows.size else 1) + thread.reshape(-1)
    order = np.argsort(keys, kind="stable")  # stable: time order kept within a key
    sorted_keys, sorted_rows = keys[order], rows[order]
    key_of = dict(zip(rows.tolist(), keys.tolist()))

    def lookup(row: int) -> I64:
        key = key_of[row]
        lo, hi = np.searchsorted(sorted_keys, [key, key + 1])
        found: I64 = sorted_rows[lo:hi]
        return found

    return lookup


# ---------------------------------------------------------------------------------------------------
# cudnn.benchmark autotuning
# ---------------------------------------------------------------------------------------------------
def _autotuned_convs(trace: Trace, windows: list[StepWindow]) -> list[OneTimeCost]:
    """Outermost convolution ops holding a burst of event records/synchronisations (cuDNN/MIOpen trying
    each algorithm); with several steps, only those in the first one."""
    c = trace.columns
    ops = trace.rows_of(Kind.CPU_OP)
    convs = ops[trace.name_matches(ops, _CONV)]
    rt = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    events = rt[trace.name_matches(rt, _EVENT_CALL)]
    if convs.size == 0 or events.size < AUTOTUNE_MIN_EVENTS:
        return []
    if len(windows) > 1:
        convs = convs[c.ts[convs] < windows[0].end_ns]
    convs = _outermost(trace, convs)
    counts = _calls_inside(trace, convs, events)
    out: list[OneTimeCost] = []
    for row, n in zip(convs.tolist(), counts.tolist()):
        if n >= AUTOTUNE_MIN_EVENTS:
            end = max(int(c.ts[row] + c.dur[row]), _gpu_end_inside(trace, row))
            out.append(OneTimeCost(row, trace.name_of(row), "cudnn autotuning", int(c.ts[row]), end,
                                   int(arrays.median(c.dur[events])), int(n)))
    return out


def _outermost(trace: Trace, rows: I64) -> I64:
    """Rows not nested in another of the set (aten::convolution_backward around aten::cudnn_...)."""
    par = links.parent(trace)
    inside = np.zeros(rows.size, dtype=bool)
    members = set(rows.tolist())
    for i, row in enumerate(rows.tolist()):
        p = int(par[row])
        while p >= 0 and not inside[i]:
            inside[i] = p in members
            p = int(par[p])
    kept: I64 = rows[~inside]
    return kept


def _calls_inside(trace: Trace, spans: I64, calls: I64) -> I64:
    """For each span, the calls on its thread that start inside it."""
    c = trace.columns
    out = np.zeros(spans.size, dtype=np.int64)
    keys = (c.pid[calls] << 32) ^ (c.tid[calls] & 0xFFFFFFFF)
    span_keys = (c.pid[spans] << 32) ^ (c.tid[spans] & 0xFFFFFFFF)
    for key in arrays.unique(span_keys).tolist():
        ts = np.sort(c.ts[calls[keys == key]])
        mine = np.flatnonzero(span_keys == key)
        lo, hi = c.ts[spans[mine]], c.ts[spans[mine]] + c.dur[spans[mine]]
        out[mine] = np.searchsorted(ts, hi, side="left") - np.searchsorted(ts, lo, side="left")
    return out


def _gpu_end_inside(trace: Trace, row: int) -> int:
    """End of the GPU work launched while the span ran (on its thread), or -1."""
    c = trace.columns
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    launch = links.launcher(trace)[gpu]
    ok = launch >= 0
    gpu, launch = gpu[ok], launch[ok]
    lo, hi = int(c.ts[row]), int(c.ts[row] + c.dur[row])
    inside = (c.ts[launch] >= lo) & (c.ts[launch] < hi) & (c.tid[launch] == c.tid[row]) & (c.pid[launch] == c.pid[row])
    return int((c.ts[gpu] + c.dur[gpu])[inside].max()) if inside.any() else -1


__all__ = ["OneTimeCost", "one_time_costs"]
