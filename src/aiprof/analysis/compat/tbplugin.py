"""The PyTorch TensorBoard profiler plugin's overview (step-time breakdown, GPU utilization).

The plugin's definitions (learnt from kineto ``tb_plugin/torch_tb_profiler/profiler/trace.py``,
``event_parser.py``, ``overall_parser.py``, ``gpu_metrics_parser.py``, ``data.py``; no code copied):

* **Event types come from the category**, case-insensitively: ``cpu_op``/``operator`` operator,
  ``runtime`` runtime, ``kernel``, ``memcpy``/``gpu_memcpy``, ``memset``/``gpu_memset``, ``python``,
  ``user_annotation`` *and* ``gpu_user_annotation`` user annotation. The plugin knows no ``cuda_runtime``
  category, so modern traces have no runtime rows for it: Runtime is 0 and steps are not stretched.
  ``strict=False`` treats every runtime category (``cuda_runtime``, ``hip_runtime``...) as runtime and
  ignores ``gpu_user_annotation`` rows, which is what the plugin meant on traces newer than it.
* **Steps**: operator/annotation rows named ``ProfilerStep#N``; without any, one step over the host
  operators. A runtime call lying wholly inside a host step (two-pointer walk in start order) makes the
  device rows it launched (same correlation id) belong to that step. When any do, steps are re-timed:
  the first starts no earlier than the end of device work launched outside every step that finished
  before the first step's first device row; each step starts at ``max(previous end, host start)`` and
  ends at ``max(host end, end of its device rows, its start)``. Trailing steps that launched nothing are
  dropped, and so is the last remaining one when it launched < 80 % of the device rows its predecessor
  did (the profiler may have missed its kernels).
* **Breakdown**: role ranges are merged over the whole trace (all devices together) and assigned in the
  order Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CpuOp: each takes what is left of
  the steps' union, and Other is the rest. Communication = kernels whose external id is that of an
  ``nccl:*``/``gloo:*`` collective op, plus those ops' host spans; DataLoader =
  ``enumerate(DataLoader)#*.__next__`` and ``enumerate(DataPipe)#*``; CpuOp = other operator, python and
  annotation spans. Each step's value is the part inside the step; Total = the step's length; the
  average divides by the number of steps.
* **GPU utilization** per device = union of kernel intervals (communication kernels included; memcpy
  and memset not) inside ``[first step start, last step end]`` divided by that span.

All values are µs (floats: aiprof keeps ns).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.analysis import intervals as iv
from aiprof.trace.model import Kind, Trace

I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]

ROLES = ("Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CpuOp")
COLUMNS = (*ROLES, "Other", "Total")

# Plugin event types.
_NONE, _OPERATOR, _RUNTIME, _KERNEL, _MEMCPY, _MEMSET, _PYTHON, _ANNOTATION = range(8)
_CATEGORY_TYPE = {
    "cpu_op": _OPERATOR,
    "operator": _OPERATOR,
    "runtime": _RUNTIME,
    "kernel": _KERNEL,
    "memcpy": _MEMCPY,
    "gpu_memcpy": _MEMCPY,
    "memset": _MEMSET,
    "gpu_memset": _MEMSET,
    "python": _PYTHON,
    "user_annotation": _ANNOTATION,
    "gpu_user_annotation": _ANNOTATION,
}
_COLLECTIVES = {
    f"{lib}:{op}" for lib in ("nccl", "gloo") for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
}
_DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*\.__next__$|^enumerate\(DataPipe\)#")


class TbStep(msgspec.Struct, frozen=True, kw_only=True):
    """One step's breakdown, µs, keyed as in the plugin's overview table (one field per :data:`COLUMNS`)."""

    name: str = msgspec.field(name="step")
    start_us: float
    end_us: float
    kernel: float = msgspec.field(name="Kernel")
    memcpy: float = msgspec.field(name="Memcpy")
    memset: float = msgspec.field(name="Memset")
    communication: float = msgspec.field(name="Communication")
    runtime: float = msgspec.field(name="Runtime")
    dataloader: float = msgspec.field(name="DataLoader")
    cpu_op: float = msgspec.field(name="CpuOp")
    other: float = msgspec.field(name="Other")
    total: float = msgspec.field(name="Total")

    @property
    def costs_us(self) -> dict[str, float]:
        """The step's cost per column, by the plugin's column names (:data:`COLUMNS`)."""
        return dict(zip(COLUMNS, (self.kernel, self.memcpy, self.memset, self.communication, self.runtime,
                                  self.dataloader, self.cpu_op, self.other, self.total)))


class TbOverview(msgspec.Struct, frozen=True, kw_only=True):
    """The plugin's overview (the report's ``ranks[].compat.tbplugin``). ``steps`` empty and zeros when
    undefined (no timed host or device rows)."""

    avg_step_us: dict[str, float]
    gpu_utilization: float | None  # mean over devices with kernels; None without kernels
    gpu_utilization_per_device: dict[str, float] = msgspec.field(default_factory=dict)  # by device index, as text
    steps: list[TbStep]
    defined: bool = True


def _empty() -> TbOverview:
    return TbOverview(steps=[], avg_step_us={k: 0.0 for k in COLUMNS}, gpu_utilization=None, defined=False)


def _string_mask(trace: Trace, predicate: Any) -> Bool:
    return np.fromiter((bool(predicate(s)) for s in trace.strings), dtype=bool, count=len(trace.strings))


def _event_types(trace: Trace, strict: bool) -> npt.NDArray[np.int8]:
    """The plugin's event type of every row (``_NONE`` for rows it ignores)."""
    c = trace.columns
    table = np.array([_CATEGORY_TYPE.get(s.lower(), _NONE) for s in trace.strings], dtype=np.int8)
    types = table[c.cat] if len(table) else np.zeros(len(c), dtype=np.int8)
    types[trace.kind_mask(Kind.MEMORY, Kind.INSTANT)] = _NONE
    if not strict:
        types[c.kind == int(Kind.RUNTIME)] = _RUNTIME
        types[c.kind == int(Kind.GPU_ANNOTATION)] = _NONE
    return types


def _device_steps(
    steps: tuple[I64, I64], rt_start: I64, rt_end: I64, rt_corr: I64, dev_corr: I64, dev_start: I64, dev_end: I64
) -> tuple[I64, Bool]:
    """For each device row, the step whose runtime launched it (-1 if none), and which rows matched."""
    step_s, step_e = steps
    n_steps = step_s.size
    order = np.argsort(rt_start, kind="stable")
    rs, re_, rc = rt_start[order], rt_end[order], rt_corr[order]
    # Two-pointer walk: a runtime is checked against the first step whose end lies beyond its start.
    pointer = np.searchsorted(np.maximum.accumulate(step_e), rs, side="right")
    valid = pointer < n_steps
    p = np.minimum(pointer, n_steps - 1)
    inside = valid & (rs >= step_s[p]) & (re_ <= step_e[p])
    rt_step = np.where(inside, p, -1)
    # Device rows join the runtime with their correlation id.
    dev_step = np.full(dev_corr.size, -1, dtype=np.int64)
    if rc.size and dev_corr.size:
        corr_order = np.argsort(rc, kind="stable")
        sorted_corr = rc[corr_order]
        idx = np.searchsorted(sorted_corr, dev_corr)
        idx_c = np.minimum(idx, sorted_corr.size - 1)
        hit = (idx < sorted_corr.size) & (sorted_corr[idx_c] == dev_corr) & (dev_corr >= 0)
        dev_step[hit] = rt_step[corr_order[idx_c[hit]]]
    return dev_step, dev_step >= 0


def _retime_steps(
    host: tuple[I64, I64], dev_step: I64, matched: Bool, dev_start: I64, dev_end: I64
) -> tuple[I64, I64, I64]:
    """Steps stretched to the device work they launched; returns (starts, ends, matched rows per step)."""
    host_s, host_e = host
    n = host_s.size
    counts = np.bincount(dev_step[matched], minlength=n).astype(np.int64)
    if not matched.any():
        return host_s.copy(), host_e.copy(), counts
    big = np.iinfo(np.int64).max
    dev_min = np.full(n, big, dtype=np.int64)
    dev_max = np.full(n, -big, dtype=np.int64)
    np.minimum.at(dev_min, dev_step[matched], dev_start[matched])
    np.maximum.at(dev_max, dev_step[matched], dev_end[matched])
    prev = int(host_s[0])
    if counts[0] > 0:
        early = ~matched & (dev_end < dev_min[0])
        if early.any():
            prev = max(prev, int(dev_end[early].max()))
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    for i in range(n):  # a few steps: the recurrence is sequential
        start = max(prev, int(host_s[i]))
        end = max(int(host_e[i]), start) if counts[i] == 0 else max(int(host_e[i]), int(dev_max[i]), start)
        starts[i], ends[i] = start, end
        prev = end
    return starts, ends, counts


def _keep_steps(counts: I64) -> int:
    """How many leading steps the plugin keeps (trailing steps without device work are dropped)."""
    n = counts.size
    launched = np.flatnonzero(counts > 0)
    if n <= 1 or launched.size == 0:
        return n
    last = int(launched[-1])
    keep = last + 1
    if last > 0 and counts[last - 1] * 0.8 > counts[last]:
        keep = last
    return keep


def _role_costs(steps: tuple[I64, I64], roles: list[iv.IntervalSet]) -> npt.NDArray[np.float64]:
    """Per step (rows) and role (columns, Other last): ns assigned by the plugin's subtraction order."""
    slots: iv.IntervalSet = iv.EMPTY
    assigned: list[iv.IntervalSet] = []
    merged_steps = iv.merge(*steps)
    for role in roles:
        if slots[0].size:
            taken = iv.intersect(slots, role)
        else:  # the plugin (re)starts from the steps' union whenever nothing is left
            taken = role
            slots = merged_steps
        assigned.append(taken)
        slots = iv.subtract(slots, taken)
    assigned.append(slots)
    out = np.empty((steps[0].size, len(assigned)), dtype=np.float64)
    for j, ranges in enumerate(assigned):
        out[:, j] = iv.overlap_per_window(ranges, steps[0], steps[1])
    return out


def tbplugin_overview(trace: Trace, *, strict: bool = True) -> TbOverview:
    """The plugin's overview of one trace (``strict=False``: see the module docstring)."""
    c = trace.columns
    if len(c) == 0 or not trace.strings:
        return _empty()
    types = _event_types(trace, strict)
    start, end = c.ts, c.ts + c.dur
    names = c.name
    is_step_name = _string_mask(trace, lambda s: s.startswith("ProfilerStep#"))[names]
    hostish = (types == _OPERATOR) | (types == _ANNOTATION)
    is_step = hostish & is_step_name
    collective = _string_mask(trace, lambda s: s in _COLLECTIVES)[names]
    comm_ops = (hostish | (types == _PYTHON)) & collective & ~is_step
    dataloader = hostish & ~is_step & _string_mask(trace, lambda s: _DATALOADER.search(s) is not None)[names]
    cpu_op = (hostish | (types == _PYTHON)) & ~is_step & ~dataloader & ~comm_ops
    comm_ext = unique(c.external_id[comm_ops & (c.external_id >= 0)])
    kernel = types == _KERNEL
    comm_kernel = kernel & arrays.isin(c.external_id, comm_ext) & (c.external_id >= 0)

    if is_step.any():
        step_rows = np.flatnonzero(is_step)
        host = (start[step_rows], end[step_rows])
        step_names = [trace.strings[int(i)].split("#", 1)[1] for i in names[step_rows]]
        step_names = [str(int(s)) if s.strip().isdecimal() else s for s in step_names]
    else:
        bounds = (types == _OPERATOR) | (types == _PYTHON)
        if not bounds.any():
            return _empty()
        host = (np.array([start[bounds].min()]), np.array([end[bounds].max()]))
        step_names = ["0"]

    device = np.isin(types, np.array([_KERNEL, _MEMCPY, _MEMSET], dtype=np.int8))
    dev_rows = np.flatnonzero(device)
    rt_rows = np.flatnonzero(types == _RUNTIME)
    dev_step, matched = _device_steps(
        host, start[rt_rows], end[rt_rows], c.correlation[rt_rows], c.correlation[dev_rows], start[dev_rows], end[dev_rows]
    )
    step_s, step_e, counts = _retime_steps(host, dev_step, matched, start[dev_rows], end[dev_rows])
    if matched.any():
        keep = _keep_steps(counts)
        step_s, step_e, step_names = step_s[:keep], step_e[:keep], step_names[:keep]

    def ranges(mask: Bool) -> iv.IntervalSet:
        return iv.merge(start[mask], end[mask])

    roles = [
        ranges(kernel & ~comm_kernel),
        ranges(types == _MEMCPY),
        ranges(types == _MEMSET),
        ranges(comm_kernel | comm_ops),
        ranges(types == _RUNTIME),
        ranges(dataloader),
        ranges(cpu_op),
    ]
    costs = (_role_costs((step_s, step_e), roles) / 1000.0).tolist()  # Python floats, µs
    totals = ((step_e - step_s) / 1000.0).tolist()
    starts_us, ends_us = (step_s / 1000.0).tolist(), (step_e / 1000.0).tolist()
    steps = [
        TbStep(
            name=step_names[i],
            start_us=starts_us[i],
            end_us=ends_us[i],
            kernel=costs[i][0],
            memcpy=costs[i][1],
            memset=costs[i][2],
            communication=costs[i][3],
            runtime=costs[i][4],
            dataloader=costs[i][5],
            cpu_op=costs[i][6],
            other=costs[i][7],
            total=totals[i],
        )
        for i in range(step_s.size)
    ]
    avg = {k: float(np.mean([s.costs_us[k] for s in steps])) if steps else 0.0 for k in COLUMNS}
    per_device = _gpu_utilization(trace, kernel, int(step_s[0]), int(step_e[-1])) if steps else {}
    util = float(np.mean(list(per_device.values()))) if per_device else None
    return TbOverview(steps=steps, avg_step_us=avg, gpu_utilization=util,
                      gpu_utilization_per_device={str(k): v for k, v in per_device.items()},
                      defined=bool(steps))


def _gpu_utilization(trace: Trace, kernel: Bool, lo: int, hi: int) -> dict[int, float]:
    """Per device: union of kernel intervals inside [lo, hi] over hi - lo."""
    if hi <= lo:
        return {}
    c = trace.columns
    out: dict[int, float] = {}
    for dev in unique(c.device[kernel]):
        rows = kernel & (c.device == dev)
        busy = iv.clip(iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows]), lo, hi)
        out[int(dev)] = iv.total(busy) / (hi - lo)
    return out
