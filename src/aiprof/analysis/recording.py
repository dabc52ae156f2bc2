"""Profiler cycles inside one trace: the recording windows, and the unrecorded time between them.

``torch.profiler``'s schedule with ``repeat`` records several cycles of one process (steps 7-10, then
17-20 …); ``aiprof run`` combines them into one file per rank and a folder of cycle files is merged into
one rank (``trace.cycles``). Between two cycles nothing was recorded: the steps the schedule skipped, the
trace export. That time is not idle and not step time, so no number may count it: the timeline strip
joins the cycles, the profiler's share of host time is over the recorded time, and the report names the
cycles (the health item ``profiler_cycles``).

A cycle boundary is found where two recorded ``ProfilerStep#N`` windows in a row are not consecutive in
N and do not touch in time, or from the spans of the merged cycle files (``metadata["profiler_cycle_spans"]``).
The gap itself is the longest stretch between the two steps that no event of the trace covers (the
export's own events before it belong to the first cycle, the next cycle's start-up to the second).
"""

from __future__ import annotations

import msgspec
import numpy as np

from aiprof.analysis import intervals as iv
from aiprof.analysis.steps import StepWindow, step_windows
from aiprof.trace.model import Trace

_CACHE_KEY = "recording.cycles"


class ProfilerCycle(msgspec.Struct, kw_only=True):
    """One recording window of the trace: its span (trace clock, ns) and the recorded steps in it."""

    index: int  # 1-based
    start_ns: int
    end_ns: int
    steps: int = 0
    first_step: int = -1  # N of its first ProfilerStep#N (-1: none)
    last_step: int = -1

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def profiler_cycles(trace: Trace) -> list[ProfilerCycle]:
    """The trace's profiler cycles, in time order, when it holds two or more; else empty."""
    cached = trace.cache.get(_CACHE_KEY)
    if isinstance(cached, list):
        return cached
    windows = [w for w in step_windows(trace) if w.source == "ProfilerStep" and w.number >= 0]
    spans = _file_spans(trace) or _step_spans(trace, windows)
    cycles = [_cycle(i + 1, lo, hi, windows) for i, (lo, hi) in enumerate(spans)] if len(spans) > 1 else []
    trace.cache[_CACHE_KEY] = cycles
    return cycles


def recorded_set(cycles: list[ProfilerCycle]) -> iv.IntervalSet:
    """The cycles' spans as an interval set (what was recorded)."""
    return iv.as_set([c.start_ns for c in cycles], [c.end_ns for c in cycles])


def gaps_ns(cycles: list[ProfilerCycle]) -> list[int]:
    """The unrecorded time between consecutive cycles."""
    return [max(b.start_ns - a.end_ns, 0) for a, b in zip(cycles, cycles[1:])]


def _cycle(index: int, lo: int, hi: int, windows: list[StepWindow]) -> ProfilerCycle:
    inside = [w.number for w in windows if lo <= w.start_ns < hi]
    return ProfilerCycle(index=index, start_ns=lo, end_ns=hi, steps=len(inside),
                         first_step=min(inside, default=-1), last_step=max(inside, default=-1))


def _file_spans(trace: Trace) -> list[tuple[int, int]]:
    """The spans of merged cycle files (``trace.cycles.merge_cycles``), when the trace is one."""
    raw = trace.metadata.get("profiler_cycle_spans")
    if not isinstance(raw, list):
        return []
    out = [(int(s[0]), int(s[1])) for s in raw if isinstance(s, (list, tuple)) and len(s) == 2]
    return out if len(out) == len(raw) else []


def _step_spans(trace: Trace, windows: list[StepWindow]) -> list[tuple[int, int]]:
    """Cycle spans from jumps in the step numbers: each boundary at the longest event-free stretch between
    the last step of one cycle and the first of the next."""
    if len(windows) < 2:
        return []
    ws = sorted(windows, key=lambda w: w.start_ns)
    cuts = [k for k in range(len(ws) - 1)
            if ws[k + 1].number > ws[k].number + 1 and ws[k + 1].start_ns > ws[k].end_ns]
    if not cuts:
        return []
    c = trace.columns
    covered = iv.merge(c.ts, c.ts + np.maximum(c.dur, 0))
    lo_all, hi_all = trace.time_range_ns
    spans: list[tuple[int, int]] = []
    start = lo_all
    for k in cuts:
        hole_lo, hole_hi = _longest_hole(covered, ws[k].end_ns, ws[k + 1].start_ns)
        spans.append((start, hole_lo))
        start = hole_hi
    spans.append((start, hi_all))
    return spans


def _longest_hole(covered: iv.IntervalSet, lo: int, hi: int) -> tuple[int, int]:
    """The longest stretch of [lo, hi) that no event covers (the whole of it when events cover none of it)."""
    holes = iv.gaps(covered, lo, hi)
    if holes[0].size == 0:
        return lo, lo  # events cover it all: no unrecorded time to take out
    k = int(np.argmax(holes[1] - holes[0]))
    return int(holes[0][k]), int(holes[1][k])


__all__ = ["ProfilerCycle", "gaps_ns", "profiler_cycles", "recorded_set"]
