"""Which steps the device record covers: the device side of a partial trace.

Kineto writes a trace's CPU events first and the device activity it collected (CUPTI's runtime calls,
kernels, copies) after them. A trace cut off mid-write, or one whose device buffers were dropped, keeps
the CPU side of its late steps without their device side. Accounted as they are, those steps read as
~100 % idle and drive confident findings about time nobody measured. ``device_coverage`` finds them, so
the accounting, and the rules that read it, use only the steps the device record covers; the steps left
out are listed with the reason (docs/numbers.md, "Incomplete steps").

A step is **incomplete** when no device activity was recorded for it (none overlaps its window and none
of its launch calls is linked to any) and either

* its window starts at or after the end of the last device activity in the trace (the record stops
  before it) and its CPU side ran ops or issued launch calls (work whose device side is missing), or
* its CPU side issued launch calls (kernels, copies, memsets) whose device activity is absent.

When such steps follow the last recorded step, the last recorded step is incomplete too if the device
record ends inside its CPU span and it has fewer recorded launches than the other steps (under 90 % of
their median): the cut fell in that step. A trace whose only window is the whole trace has its window
clipped to the end of the device record instead, when launches (or, in a cut-off file, CPU ops) come
after that end.
Launch calls recorded into a CUDA/HIP graph under stream capture are not expected to have device activity
and are not counted; a trace that is a capture phase (:mod:`aiprof.analysis.graphs`) is never partial unless
its file is cut off. Nothing is ever left out when it would leave no step at all. A step that issued no launch calls and ran
between recorded steps stays complete: the device really was idle then; so does a step after the
device record that ran no CPU op and issued no launch (the record of that step is whole: nothing ran).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aiprof.analysis import graphs
from aiprof.analysis import intervals as iv
from aiprof.analysis.steps import StepWindow
from aiprof.trace import links
from aiprof.trace.kineto.loader import is_cut_off
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

AFTER_RECORD = "after_device_record"
UNRECORDED = "launches_unrecorded"
RECORD_ENDS = "device_record_ends_inside"


@dataclass(frozen=True)
class IncompleteStep:
    """A step whose device side the trace does not hold; it is left out of the accounting."""

    name: str
    number: int
    start_ns: int
    end_ns: int
    reason: str  # AFTER_RECORD, UNRECORDED or RECORD_ENDS
    launches: int  # launch calls its CPU side issued
    launches_recorded: int  # of those, how many have device activity in the trace
    cpu_ops: int  # CPU ops its CPU side ran

    @property
    def detail(self) -> str:
        """Why, in words."""
        if self.reason == RECORD_ENDS:
            return "the device record ends inside it"
        if self.reason == AFTER_RECORD:
            return (
                f"it starts after the last recorded device activity; its CPU side ran {self.cpu_ops:,} op(s) "
                f"and issued {self.launches:,} launch call(s)"
            )
        return f"none of its {self.launches:,} launch call(s) has device activity in the trace"


@dataclass(frozen=True)
class Coverage:
    """The steps the device record covers (``complete``, what the accounting uses) and those it does not."""

    complete: list[StepWindow]
    incomplete: list[IncompleteStep] = field(default_factory=list)
    device_start_ns: int = -1  # first and last ns of recorded device work; -1 when there is none
    device_end_ns: int = -1
    clipped_ns: int = 0  # a whole-trace window's tail past the device record, left out
    cut_off: bool = False  # the file was cut off mid-write and salvaged

    @property
    def partial(self) -> bool:
        """Whether work the trace's CPU side shows is missing from its device record, or the file is cut off."""
        return bool(self.incomplete) or self.clipped_ns > 0 or self.cut_off

    def warning(self, label: str) -> str | None:
        """One line for the user: which steps are left out and why (None when nothing is)."""
        if not self.incomplete and not self.clipped_ns:
            return None
        names = ", ".join(s.name for s in self.incomplete[:6]) + (" …" if len(self.incomplete) > 6 else "")
        why = "the file is cut off mid-write" if self.cut_off else "the trace lacks the device side of work its CPU side issued"
        if self.clipped_ns:
            return (
                f"{label}: partial trace ({why}): the last {self.clipped_ns / 1e6:.1f} ms of CPU activity come after "
                "the last recorded device activity; the accounting stops where the device record ends"
            )
        total = len(self.complete) + len(self.incomplete)
        first = self.incomplete[0]
        return (
            f"{label}: partial trace ({why}): {len(self.incomplete)} of {total} steps are incomplete ({names}; "
            f"{first.name}: {first.detail}); they are left out of the step times, the breakdown and the findings"
        )


def device_coverage(trace: Trace, windows: list[StepWindow]) -> Coverage:
    """Split ``windows`` into the steps the device record covers and the incomplete ones (module doc)."""
    cut_off = is_cut_off(trace.warnings)
    if not trace.device_ids or not windows:
        return Coverage(list(windows), cut_off=cut_off)
    c = trace.columns
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    gpu_end = c.ts[gpu] + c.dur[gpu]
    dev_start, dev_end = int(c.ts[gpu].min()), int(gpu_end.max())
    base = Coverage(list(windows), device_start_ns=dev_start, device_end_ns=dev_end, cut_off=cut_off)
    if graphs.graph_capture_info(trace).is_capture_trace:
        return base  # a capture phase: the device runs almost nothing by design, nothing is missing
    launches = _launch_rows(trace)
    if len(windows) == 1:
        return _clip_single(trace, base, launches)
    counts = _per_step_counts(trace, windows, launches, gpu)
    busy = iv.merge(c.ts[gpu], gpu_end)
    ws = np.array([w.start_ns for w in windows], dtype=np.int64)
    we = np.array([w.end_ns for w in windows], dtype=np.int64)
    cpu_end = np.array([w.cpu_end_ns for w in windows], dtype=np.int64)
    n_launch, n_recorded, n_ops = counts
    recorded = (iv.overlap_per_window(busy, ws, we) > 0) | (n_recorded > 0)
    reason = np.full(len(windows), "", dtype=object)
    reason[~recorded & (n_launch > 0)] = UNRECORDED
    reason[~recorded & (ws >= dev_end) & ((n_launch > 0) | (n_ops > 0))] = AFTER_RECORD
    if recorded.any():
        last = int(np.flatnonzero(recorded)[-1])
        tail = np.arange(len(windows)) > last
        lost = tail & (reason != "")
        if lost.any() and cpu_end[last] > dev_end and _short_record(n_recorded, recorded, last):
            reason[last] = RECORD_ENDS
    flagged = reason != ""
    if flagged.all() or not flagged.any():
        return base
    incomplete = [
        IncompleteStep(w.name, w.number, w.start_ns, w.end_ns, str(reason[i]), int(n_launch[i]), int(n_recorded[i]), int(n_ops[i]))
        for i, w in enumerate(windows)
        if flagged[i]
    ]
    complete = [w for i, w in enumerate(windows) if not flagged[i]]
    return dataclasses.replace(base, complete=complete, incomplete=incomplete)


def _short_record(n_recorded: I64, recorded: np.ndarray[Any, Any], last: int) -> bool:
    """Whether the last recorded step has fewer recorded launches than the other recorded steps (the
    cut fell inside it). Without launch links to compare, assume it does: a step too few costs less
    than a half-recorded step read as idle."""
    others = n_recorded[recorded & (np.arange(n_recorded.size) != last)]
    if others.size == 0 or not others.any():
        return True
    return bool(n_recorded[last] < 0.9 * float(np.median(others)))


def _launch_rows(trace: Trace) -> I64:
    """Runtime/driver calls that put work on a device, in time order, less those recorded into a CUDA/HIP
    graph under stream capture (no device activity is expected from them: :mod:`aiprof.analysis.graphs`)."""
    rows = graphs.launch_rows(trace)
    kept: I64 = rows[~graphs.captured_mask(trace, rows)]
    return kept


def _per_step_counts(trace: Trace, windows: list[StepWindow], launches: I64, gpu: I64) -> tuple[I64, I64, I64]:
    """Per window: launch calls in its CPU span, those with device activity, CPU ops in its CPU span."""
    c = trace.columns
    has_device = _launched_device_work(trace, gpu)
    cpu_start = np.array([w.cpu_start_ns for w in windows], dtype=np.int64)
    cpu_end = np.array([w.cpu_end_ns for w in windows], dtype=np.int64)

    def count(rows: I64, weight: np.ndarray[Any, Any] | None = None) -> I64:
        ts = c.ts[rows]  # rows_of gives time order
        cum = np.concatenate(([0], np.cumsum(np.ones(rows.size, dtype=np.int64) if weight is None else weight)))
        lo = np.searchsorted(ts, cpu_start, side="left")
        hi = np.searchsorted(ts, cpu_end, side="left")
        out: I64 = (cum[hi] - cum[lo]).astype(np.int64)
        return out

    recorded = has_device[launches].astype(np.int64)
    return count(launches), count(launches, recorded), count(trace.rows_of(Kind.CPU_OP))


def _launched_device_work(trace: Trace, gpu: I64) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per row: whether it is a launch call some recorded device activity is linked to."""
    launcher = links.launcher(trace)[gpu]
    out = np.zeros(len(trace.columns), dtype=bool)
    out[launcher[launcher >= 0]] = True
    return out


def _clip_single(trace: Trace, base: Coverage, launches: I64) -> Coverage:
    """One window (the whole trace): stop it at the end of the device record when work after that end
    was lost (launch calls after it without device activity, or CPU ops after it in a cut-off file)."""
    window = base.complete[0]
    dev_end = base.device_end_ns
    if window.end_ns <= dev_end or window.start_ns >= dev_end:
        return base
    c = trace.columns
    unrecorded = launches[~_launched_device_work(trace, trace.rows_of(*GPU_WORK_KINDS))[launches]]
    late_launch = bool((c.ts[unrecorded] >= dev_end).any())
    ops = trace.rows_of(Kind.CPU_OP)
    late_ops = base.cut_off and bool((c.ts[ops] >= dev_end).any())
    if not (late_launch or late_ops):
        return base
    clipped = dataclasses.replace(window, end_ns=dev_end, cpu_end_ns=min(window.cpu_end_ns, dev_end))
    return dataclasses.replace(base, complete=[clipped], clipped_ns=window.end_ns - dev_end)
