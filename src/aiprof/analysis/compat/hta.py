"""Holistic Trace Analysis (HTA 0.5.0) temporal breakdown, reproduced on aiprof's trace model.

HTA's definitions (learnt from ``hta/analyzers/breakdown_analysis.py``, ``hta/common/trace.py``,
``hta/common/trace_parser.py`` and ``hta/utils/utils.py``; no code copied):

* **Timestamps** of traces written with fractional µs are rounded *inwards* to whole µs before anything
  else: start ``ceil(ts)``, end ``floor(ts + dur)``. A sub-µs event can so end before it starts.
* **Device rows** are those with an ``args.stream`` (``stream != -1``); ``gpu_user_annotation`` rows carry
  no stream and are never counted; ``cuda_sync`` rows carry the stream they wait on and *are* counted
  (so a stream synchronisation counts as busy, and ``Stream Wait Event`` even counts as compute).
* **Last step dropped** (default ``include_last_profiler_step=False``): when the trace names more than one
  ``ProfilerStep``, only host rows that start before the last ``ProfilerStep`` start are kept, and a
  device row with a correlation id is kept only when a kept host row has that correlation id. Device
  rows without a correlation id (MTIA's ``dma_request``) are filtered like host rows, by their own start.
* **Span** = last merged end - first merged start of the kept device rows; **idle** = span - union of
  them; **compute** = union of the *computation* kernels; **non-compute** = the rest. Classes by name:
  ``^nccl.*Kernel`` communication, then ``^(Memcpy|Memset|dma)`` memory, then computation for every
  other name that neither starts with ``Memset`` nor contains ``Memcpy`` or ``Sync`` (else "other"). Comm or
  memcpy hidden under compute therefore counts as compute.
* **Merging** groups rows sorted by start where a start is beyond every earlier end; a group counts
  ``max end - min start`` even when that is negative (a lone sub-µs event after rounding), as in HTA.
* Percentages are ``round(100 * part / span, 2)``.

Known deviation: aiprof's loader does not keep whether ``args.stream`` was present, so a device row that
lacks it (137 MTIA ``dma_request`` rows on tid 801) counts here and not in HTA; see
docs/peer-conventions.md for the measured effect.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.trace.model import Kind, Trace

I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]

_COMPUTE_EXCLUDED = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_DEVICE_SYNC_NAMES = ("Event Sync", "Context Sync")
_STREAM_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)
_DROPPED_KINDS = (Kind.MEMORY, Kind.INSTANT)


class HtaBreakdown(msgspec.Struct, frozen=True):
    """HTA's temporal breakdown of one rank. All zeros (and ``defined=False``) without device rows."""

    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    idle_us: int
    compute_us: int
    non_compute_us: int
    total_us: int  # HTA's "kernel_time(us)": first kept device start to last kept device end
    last_step_dropped: bool  # whether HTA's last-ProfilerStep filter applied
    defined: bool


def _empty(dropped: bool = False) -> HtaBreakdown:
    return HtaBreakdown(0.0, 0.0, 0.0, 0, 0, 0, 0, dropped, False)


def _name_mask(trace: Trace, predicate: Any) -> Bool:
    """Per string id, whether ``predicate(name)`` holds (evaluated once per distinct string)."""
    return np.fromiter((bool(predicate(s)) for s in trace.strings), dtype=bool, count=len(trace.strings))


def _rounded_us(ts_ns: I64, dur_ns: I64) -> tuple[I64, I64]:
    """HTA's inward rounding to whole µs, done in float64 like pandas does on the parsed JSON.

    ``whole + frac`` rebuilds exactly the float64 the JSON parser produced for ``ts`` (absolute µs
    timestamps ~1.7e15 keep only 1/4 µs there), and ``ts + dur`` is rounded to float64 before the
    floor, so ends land on the same µs as in HTA.
    """
    whole = (ts_ns // 1000).astype(np.float64)
    ts_f = whole + (ts_ns % 1000).astype(np.float64) / 1000.0
    end_f = ts_f + dur_ns.astype(np.float64) / 1000.0
    return np.ceil(ts_f).astype(np.int64), np.floor(end_f).astype(np.int64)


def _is_computation(name: str) -> bool:
    """HTA's kernel class COMPUTATION: tested after COMMUNICATION and MEMORY, in that order."""
    return _COMM.match(name) is None and _MEMORY.match(name) is None and _COMPUTE_EXCLUDED.match(name) is None


def _hta_union(starts: I64, ends: I64) -> tuple[int, int, int]:
    """HTA's merge: (covered length, first group start, last group end); groups may be negative."""
    if starts.size == 0:
        return 0, 0, 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    new_group = np.ones(s.size, dtype=bool)
    new_group[1:] = s[1:] > np.maximum.accumulate(e)[:-1]
    first = np.flatnonzero(new_group)
    group_start = s[first]
    group_end = np.maximum.reduceat(e, first)
    return int((group_end - group_start).sum()), int(group_start[0]), int(group_end[-1])


def hta_temporal_breakdown(trace: Trace) -> HtaBreakdown:
    """HTA 0.5.0 ``get_temporal_breakdown`` for this rank (defaults: last ProfilerStep excluded)."""
    c = trace.columns
    if len(c) == 0:
        return _empty()
    kind = c.kind
    usable = ~np.isin(kind, np.array([int(k) for k in _DROPPED_KINDS], dtype=np.int8))
    # HTA drops cat == "Trace" exactly (profiler bookkeeping spans).
    trace_cat = _name_mask(trace, lambda s: s == "Trace")
    if len(trace_cat):
        usable &= ~trace_cat[c.cat]
    rows = np.flatnonzero(usable)
    k = kind[rows]
    start, end = _rounded_us(c.ts[rows], c.dur[rows])
    stream = np.where(np.isin(k, np.array([int(x) for x in _STREAM_KINDS], dtype=np.int8)), c.tid[rows], -1)
    corr = c.correlation[rows]
    names = c.name[rows]
    sync_ids = [trace.string_id(n) for n in _DEVICE_SYNC_NAMES]
    is_gpu = ((stream >= 0) & (corr >= 0)) | np.isin(names, np.array([i for i in sync_ids if i >= 0], dtype=np.int32))

    step_name = _name_mask(trace, lambda s: "ProfilerStep" in s)
    distinct_steps = int(step_name[unique(names)].sum()) if len(step_name) else 0
    filtered = distinct_steps > 1
    if filtered:
        host_steps = ~is_gpu & step_name[names]
        if not host_steps.any():
            return _empty(True)
        last_start = int(start[host_steps].max())
        keep_host = ~is_gpu & (start < last_start)
        kept_corr = unique(corr[keep_host])
        keep = keep_host | (is_gpu & arrays.isin(corr, kept_corr))
    else:
        keep = np.ones(rows.size, dtype=bool)
    device = keep & (stream != -1)
    if not device.any():
        return _empty(filtered)
    busy, first, last = _hta_union(start[device], end[device])
    compute_name = _name_mask(trace, _is_computation)
    comp = device & compute_name[names]
    compute, _, _ = _hta_union(start[comp], end[comp])
    total = last - first
    if total <= 0:
        return _empty(filtered)
    idle = total - busy
    non_compute = total - compute - idle
    return HtaBreakdown(
        idle_pct=round(100.0 * idle / total, 2),
        compute_pct=round(100.0 * compute / total, 2),
        non_compute_pct=round(100.0 * non_compute / total, 2),
        idle_us=idle,
        compute_us=compute,
        non_compute_us=non_compute,
        total_us=total,
        last_step_dropped=filtered,
        defined=True,
    )
