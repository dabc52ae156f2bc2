"""Device events whose times cannot be right: far outside the host activity that launched them.

CUPTI clock glitches happen: one kernel with an 11-day duration, or one timestamp far in the future.
Left in, such an event stretches a step window over everything (every later step then has no time of
its own: "median step 0.0 µs") and fills the time accounting with a kernel that never ran then.

A device event (kernel, memcpy, memset) is *suspect* when it starts before the host activity's start,
or ends after its end, by more than ``SUSPECT_SPAN_FACTOR`` times the host activity's own length and at
least ``SUSPECT_MARGIN_MIN_NS`` (a minute). Real device work trails the host by far less: the profiler
records only work that finished before it stopped, and a device queue holds a few steps at most (on
the shared traces device work ends at most 11 host-spans, and well under a second, after the host's). Suspect events stay in the
trace (the kernel tables show them) but step windows and the time accounting leave them out, and the
trace carries a warning saying how many and how far (:func:`warning`). A trace without host activity
has no reference and no suspects.
"""

from __future__ import annotations

import numpy as np

from aiprof.trace.model import GPU_WORK_KINDS, I64, Bool, Kind, Trace

SUSPECT_MARGIN_MIN_NS = 60_000_000_000  # 1 minute
SUSPECT_SPAN_FACTOR = 100
_HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.DRIVER)
_KEY = "suspect.mask"


def host_extent(trace: Trace) -> tuple[int, int] | None:
    """First start and last end of the trace's host activity (CPU ops, annotations, runtime and driver
    calls), or None without any."""
    c = trace.columns
    host = trace.rows_of(*_HOST_KINDS)
    if host.size == 0:
        return None
    return int(c.ts[host].min()), int((c.ts[host] + c.dur[host]).max())


def margin_ns(extent: tuple[int, int]) -> int:
    """How far outside the host activity device work may lie before it is suspect."""
    return max(SUSPECT_MARGIN_MIN_NS, SUSPECT_SPAN_FACTOR * (extent[1] - extent[0]))


def mask(trace: Trace) -> Bool:
    """Per row: a suspect device event (see module doc). Cached on the trace."""
    found = trace.cache.get(_KEY)
    if found is None:
        found = trace.cache[_KEY] = _mask(trace)
    result: Bool = found
    return result


def _mask(trace: Trace) -> Bool:
    c = trace.columns
    out = np.zeros(len(c), dtype=bool)
    extent = host_extent(trace)
    if extent is None:
        return out
    margin = margin_ns(extent)
    device = trace.kind_mask(*GPU_WORK_KINDS)
    early = c.ts < extent[0] - margin
    late = c.ts + c.dur > extent[1] + margin
    out[:] = device & (early | late)
    return out


def rows(trace: Trace) -> I64:
    """Rows of the suspect device events."""
    found: I64 = np.flatnonzero(mask(trace))
    return found


def warning(trace: Trace) -> str | None:
    """The note a trace with suspect device events carries: how many, and how far outside."""
    bad = rows(trace)
    extent = host_extent(trace)
    if bad.size == 0 or extent is None:
        return None
    c = trace.columns
    before = int(max(0, extent[0] - int(c.ts[bad].min())))
    after = int(max(0, int((c.ts[bad] + c.dur[bad]).max()) - extent[1]))
    far = max(before, after)
    where = "after the host activity ends" if after >= before else "before the host activity starts"
    return (
        f"{trace.path.name}: {bad.size:,} device event(s) lie far outside the host activity (up to "
        f"{_human(far)} {where}): a profiler clock glitch; they are left out of step windows and time accounting"
    )


def _human(ns: int) -> str:
    seconds = ns / 1e9
    if seconds >= 86_400:
        return f"{seconds / 86_400:,.1f} days"
    if seconds >= 3_600:
        return f"{seconds / 3_600:,.1f} h"
    return f"{seconds:,.1f} s"


__all__ = ["SUSPECT_MARGIN_MIN_NS", "SUSPECT_SPAN_FACTOR", "host_extent", "margin_ns", "mask", "rows", "warning"]
