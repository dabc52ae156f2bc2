"""Timeline accounting: every nanosecond of every step window, per device, in exactly one bucket.

Buckets, by priority (a nanosecond covered by several kinds of work goes to the first):
``compute`` (non-communication kernels), ``communication`` (collective kernels not hidden by compute),
``memcpy`` and ``memset`` (not hidden by kernels), ``compile`` (nothing runs on the device while the host
compiles: torch.compile's Dynamo/AOTAutograd/Inductor work, see :mod:`aiprof.analysis.compile`), ``idle``
(nothing running). Intervals are merged per
device across streams, never summed, so the buckets add up to the window exactly.

Idle time is split by what the host threads that feed the device were doing, again by priority:
``launch``        a launch call was issued and its GPU work had not started yet, in a SHORT gap (launch
                  latency; at most ``launch_stall_ns``: 50 µs or 10x the median launch call or launch gap).
                  A longer gap with a launch pending is a stall, not launch overhead: it takes the cause below
                  that the host shows (a blocking copy or event wait → ``sync``; a slow runtime call such as a
                  600 ms first ``cudaLaunchKernel`` → ``host``), else ``unknown`` (the device held queued work
                  and the trace does not show why: a stream/event dependency, another process, lost events);
``data_loading``  the host was inside a DataLoader ``__next__``;
``sync``          the host was blocked in a synchronising call (cudaDeviceSynchronize, cudaStreamSynchronize,
                  cudaEventSynchronize, blocking cudaMemcpy, cudaFree, …) or had returned from one and not
                  yet launched again — the device drained because of the sync;
``collective_wait`` the host was inside a CPU-side collective or wait (c10d / gloo / nccl ops);
``host``          the host was running CPU ops, Python or runtime calls inside the step, with nothing queued;
``unknown``       none of the above can be seen in the trace (e.g. no CPU side).
Causes add up to idle exactly. CPU-only traces use the same accounting with the CPU as the device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated

import msgspec
import numpy as np

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.analysis import intervals as iv
from aiprof.analysis.comm import is_comm_kernel
from aiprof.analysis.compile import compile_set
from aiprof.analysis.steps import StepWindow, step_windows
from aiprof.trace import links, suspect
from aiprof.trace.model import I64, Kind, Trace

BUCKETS = ("compute", "communication", "memcpy", "memset", "compile", "idle")
IDLE_CAUSES = ("data_loading", "host", "sync", "launch", "collective_wait", "unknown")

# Calls that block the host until device work finishes: every *Synchronize (runtime, driver, HIP), and
# the implicitly synchronising blocking copies and frees.
SYNC_CALL = re.compile(
    r"(Synchronize|^cudaMemcpy$|^cudaMemcpy2D$|^cudaMemcpyFromSymbol$|^cudaMemcpyToSymbol$|^cudaFree$"
    r"|^cudaFreeHost$|^hipMemcpy$|^hipFree$|^hipFreeHost$|^cuMemFree)"
)
# Host-side collectives and waits: c10d ops, functional collectives (and their wait_tensor), the backends'
# own ranges (gloo:all_reduce on a gloo worker thread, nccl:*, mpi:*, ucc:*), symmetric memory.
COLLECTIVE_OP = re.compile(
    r"^(c10d::|c10d_functional::|_c10d_functional::|aten::wait|gloo:|nccl:|rccl:|hccl:|mpi:|ucc:|symm_mem::"
    r"|record_param_comms|ProcessGroup|torch.distributed|wait_tensor)"
)
_DATALOADER = re.compile(r"^enumerate\(DataLoader\)")
# A launch-pending idle gap longer than this floor and LAUNCH_STALL_FACTOR x the median launch call / launch
# gap is a stall, not launch latency (launch latency is a few µs per kernel; a 600 ms first launch is not).
LAUNCH_STALL_MIN_NS = 50_000
LAUNCH_STALL_FACTOR = 10
_STEP = re.compile(r"^ProfilerStep#")


@dataclass(frozen=True)
class StepAccount:
    """One step on one device: the window and where each of its nanoseconds went."""

    name: str
    number: int
    start_ns: int
    duration_ns: int
    breakdown_ns: dict[str, int]
    idle_causes_ns: dict[str, int]


NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class Totals(msgspec.Struct, kw_only=True):
    """Sums over a device's steps; ``gpu_utilization`` is (compute + communication) / window in [0, 1]. The
    report's ``devices[].totals`` and ``ranks[].totals`` as they are."""

    steps: NonNegative
    duration_ns: NonNegative
    mean_step_ns: NonNegative
    median_step_ns: NonNegative
    breakdown_ns: dict[str, int]  # compute, communication, memcpy, memset, compile, idle
    idle_causes_ns: dict[str, int]  # data_loading, host, sync, launch, collective_wait, unknown
    gpu_utilization: float


@dataclass(frozen=True)
class DeviceAccount:
    """All steps of one device (``cuda:0``, ``cpu``…), with totals over the steps."""

    device: str
    device_index: int  # -1 for the CPU
    kind: str  # "gpu" or "cpu"
    name: str
    steps: list[StepAccount]
    totals: Totals = field(default_factory=lambda: totals_of([]))


def account(trace: Trace, windows: list[StepWindow] | None = None) -> list[DeviceAccount]:
    """Account every step window on every device of the trace (the CPU when it has no device work)."""
    windows = windows if windows is not None else step_windows(trace)
    devices = trace.device_ids
    if not devices:
        return [_account_cpu(trace, windows)]
    return [_account_gpu(trace, windows, d) for d in devices]


# ---------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------
def _span_set(trace: Trace, rows: I64) -> iv.IntervalSet:
    c = trace.columns
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def _account_gpu(trace: Trace, windows: list[StepWindow], device: int) -> DeviceAccount:
    c = trace.columns
    on_device = (c.device == device) & ~suspect.mask(trace)  # clock glitches: see aiprof.trace.suspect
    kernels = np.flatnonzero(on_device & (c.kind == int(Kind.KERNEL)))
    comm = is_comm_kernel(trace)[kernels]
    compute_set = _span_set(trace, kernels[~comm])
    comm_set = _span_set(trace, kernels[comm])
    memcpy_set = _span_set(trace, np.flatnonzero(on_device & (c.kind == int(Kind.MEMCPY))))
    memset_set = _span_set(trace, np.flatnonzero(on_device & (c.kind == int(Kind.MEMSET))))
    layers = _cumulative((compute_set, comm_set, memcpy_set, memset_set, compile_set(trace)))
    causes = _idle_cause_sets(trace, windows, device, layers[-1])
    trace.cache[_causes_key(device)] = (_windows_key(windows), causes)  # the rules read them again
    info = trace.device_info(device)
    steps = _step_accounts(windows, layers, causes)
    return DeviceAccount(
        device=f"gpu:{device}",
        device_index=device,
        kind="gpu",
        name=info.name,
        steps=steps,
        totals=totals_of(steps),
    )


def _cumulative(sets: tuple[iv.IntervalSet, ...]) -> list[iv.IntervalSet]:
    """U1 = A, U2 = A∪B, …: bucket k is the part of U_k not in U_{k-1}."""
    out: list[iv.IntervalSet] = []
    acc = iv.EMPTY
    for s in sets:
        acc = iv.union(acc, s)
        out.append(acc)
    return out


def _step_accounts(
    windows: list[StepWindow], layers: list[iv.IntervalSet], causes: dict[str, iv.IntervalSet]
) -> list[StepAccount]:
    ws = np.array([w.start_ns for w in windows], dtype=np.int64)
    we = np.array([w.end_ns for w in windows], dtype=np.int64)
    covered = [iv.overlap_per_window(layer, ws, we) for layer in layers]
    lengths = we - ws
    per_bucket = [covered[0]] + [covered[k] - covered[k - 1] for k in range(1, len(covered))]
    per_bucket.append(lengths - covered[-1])
    per_cause = {name: iv.overlap_per_window(s, ws, we) for name, s in causes.items()}
    steps: list[StepAccount] = []
    for i, w in enumerate(windows):
        steps.append(
            StepAccount(
                name=w.name,
                number=w.number,
                start_ns=w.start_ns,
                duration_ns=w.duration_ns,
                breakdown_ns={b: int(per_bucket[k][i]) for k, b in enumerate(BUCKETS)},
                idle_causes_ns={name: int(per_cause[name][i]) for name in IDLE_CAUSES},
            )
        )
    return steps


def totals_of(steps: list[StepAccount]) -> Totals:
    """Sums over steps, plus ``gpu_utilization``: (compute + communication) / window, in [0, 1]."""
    duration = sum(s.duration_ns for s in steps)
    breakdown = {b: sum(s.breakdown_ns[b] for s in steps) for b in BUCKETS}
    causes = {k: sum(s.idle_causes_ns[k] for s in steps) for k in IDLE_CAUSES}
    busy = breakdown["compute"] + breakdown["communication"]
    return Totals(
        steps=len(steps),
        duration_ns=duration,
        mean_step_ns=duration // len(steps) if steps else 0,
        median_step_ns=int(arrays.median([s.duration_ns for s in steps])) if steps else 0,
        breakdown_ns=breakdown,
        idle_causes_ns=causes,
        gpu_utilization=busy / duration if duration else 0.0,
    )


def _feeding_threads(trace: Trace, device: int) -> I64:
    """Host threads (pid<<32 | tid keys) that launched work onto ``device``."""
    c = trace.columns
    launch = links.launcher(trace)
    gpu = np.flatnonzero((c.device == device) & (launch >= 0))
    rows = launch[gpu]
    return unique(_thread_key(c.pid[rows], c.tid[rows]))


def _thread_key(pid: I64, tid: I64) -> I64:
    return (pid.astype(np.int64) << 32) ^ (tid.astype(np.int64) & 0xFFFFFFFF)


def _rows_on_threads(trace: Trace, kinds: tuple[Kind, ...], threads: I64) -> I64:
    c = trace.columns
    rows = np.flatnonzero(trace.kind_mask(*kinds))
    return rows[arrays.isin(_thread_key(c.pid[rows], c.tid[rows]), threads)]


def _idle_cause_sets(
    trace: Trace, windows: list[StepWindow], device: int, busy: iv.IntervalSet
) -> dict[str, iv.IntervalSet]:
    c = trace.columns
    window_set = iv.merge(
        np.array([w.start_ns for w in windows], dtype=np.int64), np.array([w.end_ns for w in windows], dtype=np.int64)
    )
    idle = iv.subtract(window_set, busy)
    launch = links.launcher(trace)
    gpu = np.flatnonzero((c.device == device) & (launch >= 0) & trace.kind_mask(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
    pending = iv.merge(c.ts[launch[gpu]], c.ts[gpu])
    threads = _feeding_threads(trace, device)
    host_rows = _rows_on_threads(trace, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME, Kind.DRIVER), threads)
    # The process(es) that feed the device: DataLoader annotations may sit on any of their threads.
    procs = unique(c.pid[launch[gpu]]) if gpu.size else np.zeros(0, dtype=np.int64)
    ann = np.flatnonzero((c.kind == int(Kind.USER_ANNOTATION)) & np.isin(c.pid, procs))
    data_loading = _span_set(trace, ann[trace.name_matches(ann, _DATALOADER.pattern)])
    sync = _sync_set(trace, host_rows, launch)
    collective = _span_set(trace, host_rows[trace.name_matches(host_rows, COLLECTIVE_OP.pattern)])
    steps = _span_set(trace, host_rows[trace.name_matches(host_rows, _STEP.pattern)])
    host = iv.union(_span_set(trace, host_rows), steps)
    runtime = host_rows[np.isin(c.kind[host_rows], [int(Kind.RUNTIME), int(Kind.DRIVER)])]
    launch_idle = iv.intersect(idle, pending)
    stalls = launch_stalls(launch_idle, launch_stall_ns(trace, launch[gpu], launch_idle))
    # A stall is host time only where the host sat in a runtime call (a slow launch, a slow copy call).
    host = iv.subtract(host, iv.subtract(stalls, _span_set(trace, runtime)))
    out = _peel(idle, [("launch", iv.subtract(pending, stalls)), ("data_loading", data_loading), ("sync", sync),
                       ("collective_wait", collective), ("host", host)])
    out["launch_stall"] = stalls  # not a cause: the idle gaps that left ``launch`` (for the rules' evidence)
    return out


def idle_cause_sets(trace: Trace, windows: list[StepWindow], device: int) -> dict[str, iv.IntervalSet]:
    """The interval set of each idle cause of ``device`` over ``windows`` (what the step accounts sum), plus
    ``launch_stall``: the launch-pending gaps too long to be launch latency, wherever they were attributed.
    The accounting of the same device and windows already built them: they are reused (read-only)."""
    cached: tuple[tuple[tuple[int, int], ...], dict[str, iv.IntervalSet]] | None = trace.cache.get(_causes_key(device))
    if cached is not None and cached[0] == _windows_key(windows):
        return dict(cached[1])
    c = trace.columns
    on_device = (c.device == device) & trace.kind_mask(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
    return _idle_cause_sets(trace, windows, device, _span_set(trace, np.flatnonzero(on_device)))


def _causes_key(device: int) -> str:
    return f"timeline.idle_cause_sets:{device}"


def _windows_key(windows: list[StepWindow]) -> tuple[tuple[int, int], ...]:
    return tuple((w.start_ns, w.end_ns) for w in windows)


def launch_stall_ns(trace: Trace, launch_rows: I64, launch_idle: iv.IntervalSet) -> int:
    """The longest launch-pending idle gap that is still launch latency: LAUNCH_STALL_FACTOR x the median
    launch call and the median launch-idle gap, at least LAUNCH_STALL_MIN_NS."""
    calls = trace.columns.dur[unique(launch_rows)] if launch_rows.size else np.zeros(0, dtype=np.int64)
    typical = max(float(arrays.median(calls)) if calls.size else 0.0,
                  float(arrays.median(launch_idle[1] - launch_idle[0])) if launch_idle[0].size else 0.0)
    return max(LAUNCH_STALL_MIN_NS, int(LAUNCH_STALL_FACTOR * typical))


def launch_stalls(launch_idle: iv.IntervalSet, limit_ns: int) -> iv.IntervalSet:
    """The gaps of ``launch_idle`` longer than ``limit_ns``."""
    long = (launch_idle[1] - launch_idle[0]) > limit_ns
    return launch_idle[0][long], launch_idle[1][long]


def _peel(idle: iv.IntervalSet, ordered: list[tuple[str, iv.IntervalSet]]) -> dict[str, iv.IntervalSet]:
    """Split ``idle`` by the first matching cause; what is left is ``unknown``."""
    out: dict[str, iv.IntervalSet] = {}
    rest = idle
    for name, cover in ordered:
        out[name] = iv.intersect(rest, cover)
        rest = iv.subtract(rest, cover)
    out["unknown"] = rest
    return out


def _sync_set(trace: Trace, host_rows: I64, launch: I64) -> iv.IntervalSet:
    """Time inside synchronising calls, plus the time from their return to the thread's next launch."""
    c = trace.columns
    runtime = host_rows[np.isin(c.kind[host_rows], [int(Kind.RUNTIME), int(Kind.DRIVER)])]
    syncs = runtime[trace.name_matches(runtime, SYNC_CALL.pattern)]
    if syncs.size == 0:
        return iv.EMPTY
    sync_end = c.ts[syncs] + c.dur[syncs]
    launchers = unique(launch[launch >= 0])
    launch_key = _thread_key(c.pid[launchers], c.tid[launchers])
    order = np.lexsort((c.ts[launchers], launch_key))
    keys, times = launch_key[order], c.ts[launchers][order]
    sync_key = _thread_key(c.pid[syncs], c.tid[syncs])
    # For each sync: the first launch on its thread at or after it returned.
    pos = _next_on_thread(keys, times, sync_key, sync_end)
    next_launch = np.where(pos >= 0, times[np.maximum(pos, 0)], sync_end)
    return iv.union(iv.merge(c.ts[syncs], sync_end), iv.merge(sync_end, next_launch))


def _next_on_thread(keys: I64, times: I64, query_keys: I64, query_times: I64) -> I64:
    """Index into (keys, times) — sorted by key then time — of the first entry with the same key and
    time >= query time, else -1. Vectorised: keys are made dense and folded into one sortable int."""
    if keys.size == 0:
        return np.full(query_keys.shape, -1, dtype=np.int64)
    uniq, dense = np.unique(np.concatenate((keys, query_keys)), return_inverse=True)
    dense_keys, dense_query = dense[: keys.size], dense[keys.size :]
    base = int(min(times.min(), query_times.min()))
    span = int(max(times.max(), query_times.max())) - base + 1
    if span * (uniq.size + 1) >= 2**62:  # absurd ranges: fall back to per-query searches
        return _next_on_thread_slow(keys, times, query_keys, query_times)
    combined = dense_keys * span + (times - base)
    query = dense_query * span + (query_times - base)
    pos = np.searchsorted(combined, query, side="left")
    found = pos < keys.size
    found[found] = dense_keys[pos[found]] == dense_query[found]
    return np.where(found, pos, -1).astype(np.int64)


def _next_on_thread_slow(keys: I64, times: I64, query_keys: I64, query_times: I64) -> I64:
    lo = np.searchsorted(keys, query_keys, side="left")
    hi = np.searchsorted(keys, query_keys, side="right")
    out = np.full(query_keys.shape, -1, dtype=np.int64)
    for i in np.flatnonzero(hi > lo).tolist():
        j = lo[i] + int(np.searchsorted(times[lo[i] : hi[i]], query_times[i], side="left"))
        if j < hi[i]:
            out[i] = j
    return out


# ---------------------------------------------------------------------------------------------------
# CPU-only traces
# ---------------------------------------------------------------------------------------------------
def _account_cpu(trace: Trace, windows: list[StepWindow]) -> DeviceAccount:
    """The CPU as the device: ops are compute, collectives communication, the rest idle by cause.

    Collectives (``gloo:all_reduce`` on a gloo worker thread, ``c10d::allreduce_`` and waits on the main
    thread) are the ``communication`` bucket; like kernels on a GPU, communication is *hidden* where some
    thread computes meanwhile. Compute is counted per thread: an op's time while its own thread is inside
    a collective (a DDP hook or ``backward`` enclosing a blocking all-reduce) is waiting, not compute, but a
    background all-reduce under another thread's ops is overlapped. Data-loading waits are not compute."""
    c = trace.columns
    ann = np.flatnonzero(c.kind == int(Kind.USER_ANNOTATION))
    compute_set, comm_set, data_loading = cpu_work(trace)
    layers = _cumulative((compute_set, comm_set, iv.EMPTY, iv.EMPTY, compile_set(trace)))
    window_set = iv.merge(
        np.array([w.start_ns for w in windows], dtype=np.int64), np.array([w.end_ns for w in windows], dtype=np.int64)
    )
    idle = iv.subtract(window_set, layers[-1])
    python = _span_set(trace, np.flatnonzero(c.kind == int(Kind.PYTHON)))
    steps = _span_set(trace, ann[trace.name_matches(ann, _STEP.pattern)])
    host = iv.union(python, steps, _span_set(trace, ann))
    causes = _peel(
        idle,
        [("launch", iv.EMPTY), ("data_loading", data_loading), ("sync", iv.EMPTY), ("collective_wait", iv.EMPTY), ("host", host)],
    )
    step_accounts = _step_accounts(windows, layers, causes)
    return DeviceAccount("cpu", -1, "cpu", "CPU", step_accounts, totals_of(step_accounts))


def cpu_work(trace: Trace) -> tuple[iv.IntervalSet, iv.IntervalSet, iv.IntervalSet]:
    """A CPU-only trace's work as interval sets: (compute, communication, data-loading waits). Compute is
    the CPU ops per thread minus that thread's own collective spans and the data-loading waits;
    communication is every host-side collective (``c10d::*`` ops, a backend's own ranges such as
    ``gloo:all_reduce`` on its worker thread, ``record_param_comms``). Time inside torch.compile's
    compilation (:func:`aiprof.analysis.compile.compile_set`) is neither: it is the ``compile`` bucket, even
    where the compiler runs aten ops (fake tensors, constant folding). The step accounting and the timeline
    overview both read this, so a gloo all-reduce is communication in both, never idle."""
    c = trace.columns
    ops = np.flatnonzero(c.kind == int(Kind.CPU_OP))
    ann = np.flatnonzero(c.kind == int(Kind.USER_ANNOTATION))
    data_loading = _span_set(trace, ann[trace.name_matches(ann, _DATALOADER.pattern)])
    coll_rows = collective_rows(trace)
    compiling = compile_set(trace)
    comm_set = iv.subtract(_span_set(trace, coll_rows), compiling)
    compute_set = iv.subtract(_compute_per_thread(trace, ops, coll_rows), iv.union(data_loading, compiling))
    return compute_set, comm_set, data_loading


def collective_rows(trace: Trace) -> I64:
    """The host-side collective rows of a CPU-only trace (CPU ops and annotations: ``c10d::*``, a backend's
    own ranges such as ``gloo:all_reduce``, ``record_param_comms``, waits): its ``communication`` bucket."""
    c = trace.columns
    rows = np.concatenate((np.flatnonzero(c.kind == int(Kind.CPU_OP)), np.flatnonzero(c.kind == int(Kind.USER_ANNOTATION))))
    return rows[trace.name_matches(rows, COLLECTIVE_OP.pattern)]


def _compute_per_thread(trace: Trace, ops: I64, coll_rows: I64) -> iv.IntervalSet:
    """Union over threads of (the thread's CPU ops − the thread's own collective spans)."""
    c = trace.columns
    op_key = _thread_key(c.pid[ops], c.tid[ops])
    coll_key = _thread_key(c.pid[coll_rows], c.tid[coll_rows])
    if not np.isin(op_key, coll_key).any():
        return _span_set(trace, ops)  # no thread computes and waits: one merge
    parts = []
    for key in unique(op_key).tolist():
        mine = _span_set(trace, ops[op_key == key])
        waits = coll_rows[coll_key == key]
        parts.append(iv.subtract(mine, _span_set(trace, waits)) if waits.size else mine)
    return iv.union(*parts)
