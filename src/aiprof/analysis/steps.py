"""Step windows: each ``ProfilerStep#N`` CPU span, stretched to the end of the GPU work it launched.

Windows never overlap: a step starts no earlier than the previous step's (stretched) end, so the steps
partition the time they cover and every nanosecond is accounted once. A trace without ProfilerStep
annotations gets one window over all of its activity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiprof.trace import links
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

STEP_PREFIX = "ProfilerStep#"


@dataclass(frozen=True)
class StepWindow:
    """One step. ``start_ns``/``end_ns`` are the accounting window; ``cpu_*`` the annotation itself."""

    name: str
    number: int  # N of ProfilerStep#N, or -1 for the whole-trace window
    start_ns: int
    end_ns: int
    cpu_start_ns: int
    cpu_end_ns: int
    gpu_end_ns: int  # end of the last GPU activity launched inside the step (-1 when none)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def step_rows(trace: Trace) -> I64:
    """Rows of the ProfilerStep#N annotations, by start time (nested duplicates dropped)."""
    c = trace.columns
    ann = trace.rows_of(Kind.USER_ANNOTATION, Kind.CPU_OP)
    rows: I64 = ann[trace.name_matches(ann, "^" + STEP_PREFIX + r"\d+")]
    if rows.size <= 1:
        return rows
    # Some traces repeat the annotation on several threads; keep the thread with the most steps.
    threads = c.pid[rows] * (1 << 32) + (c.tid[rows] & 0xFFFFFFFF)
    values, counts = np.unique(threads, return_counts=True)
    main = values[np.argmax(counts)]
    kept: I64 = rows[threads == main]
    return kept


def step_windows(trace: Trace) -> list[StepWindow]:
    """The trace's step windows (see module doc)."""
    rows = step_rows(trace)
    if rows.size == 0:
        return [_whole_trace_window(trace)]
    c = trace.columns
    starts = c.ts[rows]
    ends = starts + c.dur[rows]
    gpu_end = _gpu_end_per_step(trace, starts, ends)
    windows: list[StepWindow] = []
    prev_end = np.iinfo(np.int64).min
    for i, row in enumerate(rows.tolist()):
        name = trace.name_of(row)
        start = max(int(starts[i]), prev_end)
        end = max(int(ends[i]), int(gpu_end[i]), start)
        windows.append(
            StepWindow(
                name=name,
                number=_step_number(name),
                start_ns=start,
                end_ns=end,
                cpu_start_ns=int(starts[i]),
                cpu_end_ns=int(ends[i]),
                gpu_end_ns=int(gpu_end[i]),
            )
        )
        prev_end = end
    return windows


def _step_number(name: str) -> int:
    digits = name[len(STEP_PREFIX) :]
    return int(digits) if digits.isdecimal() else -1


def _gpu_end_per_step(trace: Trace, starts: I64, ends: I64) -> I64:
    """Max end of GPU work whose launch call started inside each step's CPU span (-1 when none)."""
    c = trace.columns
    out = np.full(starts.shape, -1, dtype=np.int64)
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    launch = links.launcher(trace)[gpu]
    linked = launch >= 0
    gpu, launch = gpu[linked], launch[linked]
    if gpu.size == 0:
        return out
    launch_ts = c.ts[launch]
    step = np.searchsorted(starts, launch_ts, side="right") - 1
    inside = (step >= 0) & (launch_ts < ends[np.maximum(step, 0)])
    np.maximum.at(out, step[inside], (c.ts[gpu] + c.dur[gpu])[inside])
    return out


def _whole_trace_window(trace: Trace) -> StepWindow:
    c = trace.columns
    spans = ~trace.kind_mask(Kind.SPAN, Kind.INSTANT, Kind.MEMORY)
    if not spans.any():
        start = end = 0
    else:
        start = int(c.ts[spans].min())
        end = int((c.ts[spans] + c.dur[spans]).max())
    return StepWindow("trace", -1, start, end, start, end, -1)
