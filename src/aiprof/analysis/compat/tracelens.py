"""TraceLens's ``gpu_timeline`` (TreePerf ``get_df_gpu_timeline``), reproduced on aiprof's trace model.

TraceLens's definitions (learnt from ``TraceLens/TreePerf/gpu_event_analyser.py`` and ``tree_perf.py``;
no code copied):

* **GPU events** are the events of category ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` (MTIA's
  ``mtia_ccp_events`` are not). By default only *linked* events count: those whose correlation id
  matches a host runtime/driver call (TraceLens PR #110: "profiles sometimes contain kernels from previous
  steps which are not linked to host ops"). A trace with no host runtime calls at all (a GPU-only
  trace) keeps every event.
* **Classes**: memcpy = ``gpu_memcpy``; communication = kernels whose name contains ``nccl`` or
  ``deep_ep``; computation = the other kernels. ``gpu_memset``: current TraceLens leaves memset out of the
  timeline (``include_memset=False``); older releases counted it as computation (``include_memset=True``
  reproduces the CSVs those releases wrote, e.g. the ``h100/*`` reports).
* **Window** (``total_time``): first GPU event start to last GPU event end. ``step_window=True`` instead
  clips to the GPU-side ``ProfilerStep#`` annotations (first start to last end) when there are any.
* busy = union of all; computation = union of computation; exposed_comm = comm - computation;
  exposed_memcpy = memcpy - computation - comm; idle = total - busy; total_comm / total_memcpy = unions.

Times are reported in ms, as TraceLens's ``time ms`` column.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.analysis import intervals as iv
from aiprof.trace.model import Kind, Trace

Bool = npt.NDArray[np.bool_]

_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_COMM_MARKERS = ("nccl", "deep_ep")


class TraceLensTimeline(msgspec.Struct, frozen=True):
    """TraceLens's GPU timeline rows, in ms. All zeros (``defined=False``) without GPU events."""

    computation_ms: float
    exposed_comm_ms: float
    exposed_memcpy_ms: float
    busy_ms: float
    idle_ms: float
    total_ms: float
    total_comm_ms: float
    total_memcpy_ms: float
    events: int  # GPU events counted
    defined: bool

    def percent(self, field: str) -> float:
        """A row's ``percent`` column: share of ``total_ms``."""
        value = float(getattr(self, field))
        return 100.0 * value / self.total_ms if self.total_ms > 0 else 0.0


def _empty() -> TraceLensTimeline:
    return TraceLensTimeline(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, False)


def _string_mask(trace: Trace, predicate: Any) -> Bool:
    return np.fromiter((bool(predicate(s)) for s in trace.strings), dtype=bool, count=len(trace.strings))


def _linked(trace: Trace, rows: npt.NDArray[np.int64]) -> Bool:
    """Rows whose correlation id a host runtime/driver call carries (all rows on a GPU-only trace)."""
    c = trace.columns
    host = trace.kind_mask(Kind.RUNTIME, Kind.DRIVER)
    if not host.any():
        return np.ones(rows.size, dtype=bool)
    launch_corr = unique(c.correlation[host])
    corr = c.correlation[rows]
    return (corr >= 0) & arrays.isin(corr, launch_corr)


def _ms(ns: int) -> float:
    return ns / 1e6


def tracelens_gpu_timeline(
    trace: Trace, *, include_memset: bool = False, linked_only: bool = True, step_window: bool = False
) -> TraceLensTimeline:
    """TraceLens's GPU timeline breakdown of one rank (see the module docstring for the options)."""
    c = trace.columns
    if len(c) == 0 or not trace.strings:
        return _empty()
    cats = _GPU_CATEGORIES if include_memset else _GPU_CATEGORIES[:2]
    cat_ok = _string_mask(trace, lambda s: s.lower() in cats)
    rows = np.flatnonzero(cat_ok[c.cat])
    if linked_only and rows.size:
        rows = rows[_linked(trace, rows)]
    if rows.size == 0:
        return _empty()
    starts, ends = c.ts[rows], c.ts[rows] + c.dur[rows]
    if step_window:
        steps = np.flatnonzero(
            (c.kind == int(Kind.GPU_ANNOTATION)) & _string_mask(trace, lambda s: s.startswith("ProfilerStep#"))[c.name]
        )
        if steps.size:
            lo, hi = int(c.ts[steps].min()), int((c.ts[steps] + c.dur[steps]).max())
            starts, ends = np.maximum(starts, lo), np.minimum(ends, hi)
            keep = ends > starts
            rows, starts, ends = rows[keep], starts[keep], ends[keep]
            if rows.size == 0:
                return _empty()
    memcpy_cat = _string_mask(trace, lambda s: s.lower() == "gpu_memcpy")
    is_memcpy = memcpy_cat[c.cat[rows]]
    is_comm = ~is_memcpy & _string_mask(trace, lambda s: any(m in s for m in _COMM_MARKERS))[c.name[rows]]
    is_comp = ~is_memcpy & ~is_comm
    every = iv.merge(starts, ends)
    comp = iv.merge(starts[is_comp], ends[is_comp])
    comm = iv.merge(starts[is_comm], ends[is_comm])
    memcpy = iv.merge(starts[is_memcpy], ends[is_memcpy])
    total = int(ends.max() - starts.min())
    busy = iv.total(every)
    return TraceLensTimeline(
        computation_ms=_ms(iv.total(comp)),
        exposed_comm_ms=_ms(iv.total(iv.subtract(comm, comp))),
        exposed_memcpy_ms=_ms(iv.total(iv.subtract(iv.subtract(memcpy, comp), comm))),
        busy_ms=_ms(busy),
        idle_ms=_ms(total - busy),
        total_ms=_ms(total),
        total_comm_ms=_ms(iv.total(comm)),
        total_memcpy_ms=_ms(iv.total(memcpy)),
        events=int(rows.size),
        defined=True,
    )
