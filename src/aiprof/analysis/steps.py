"""Step windows: the trace's iterations, each stretched to the end of the GPU work it launched.

Where the iterations come from (``StepWindow.source``), by priority:

1. ``ProfilerStep``: each ``ProfilerStep#N`` CPU span (torch.profiler's own step annotation).
2. ``Optimizer.step``: the optimizer's ``Optimizer.step#<Name>.step`` annotation ends an iteration; iteration
   *i* runs from the end of the previous optimizer step (for the first one: the first host activity on
   that thread) to the end of its own.
3. ``DataLoader``: each ``enumerate(DataLoader)#...__next__`` call starts an iteration, which runs to the
   next call; the last call's iteration has no known end and is left out.
4. ``module forward <name>``: the outermost ``nn.Module: <name>`` span (``with_modules``) starts an
   iteration, which runs to the next one (the last one is left out, as above).
5. ``annotation <name>``: a top-level user annotation (NVTX-style ``record_function``) that repeats; names
   that differ only in a trailing number (``step_3``) are one marker. When its spans cover most of the
   time between two of them (``train_step``), each span is a step, like ProfilerStep; otherwise it starts
   an iteration, like a DataLoader call.
6. ``whole trace``: none of the above repeats with a plausible regularity: one window over all activity.

A marker is used only when it occurs at least ``MIN_MARKERS`` times on one thread at a plausibly regular
pace (``_regular``) and its iterations cover a fair part of the trace. Windows never overlap: a step starts
no earlier than the previous step's (stretched) end, so the steps partition the time they cover and every
nanosecond is accounted once; a step left with no time of its own (empty, or wholly inside the previous
step's stretch) is dropped rather than shown as a 0 µs step. Device events a clock glitch put far outside
the host activity (:mod:`aiprof.trace.suspect`) stretch no window.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from aiprof import arrays
from aiprof.trace import links, suspect
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

STEP_PREFIX = "ProfilerStep#"
WHOLE_TRACE = "whole trace"
MIN_MARKERS = 3  # occurrences a marker needs on one thread before it defines iterations
_MIN_COVERAGE = 0.3  # share of the trace's host activity its iterations must span
_OPTIMIZER = r"^Optimizer\.step#"
_DATALOADER = r"^enumerate\(DataLoader\)#.*__next__"
_MODULE = r"^nn\.Module: "
# Annotations that are not iterations: the step/loader/optimizer/module markers above, profiler and
# communication bookkeeping.
_NOT_ITERATION = re.compile(
    r"^(ProfilerStep#|enumerate\(DataLoader\)|Optimizer\.|nn\.Module: |PyTorch Profiler|record_param_comms"
    r"|nccl:|gloo:|c10d|## )"
)
_ITERATION_WORD = re.compile(r"step|iter|batch|train|loop|epoch|forward|fwd|infer|decode|prefill|request", re.I)


@dataclass(frozen=True)
class StepWindow:
    """One step. ``start_ns``/``end_ns`` are the accounting window; ``cpu_*`` the host span that defines it
    (the annotation itself, or the span between two iteration markers); ``source`` the marker used."""

    name: str
    number: int  # N of ProfilerStep#N, the iteration's index for other markers, -1 for the whole trace
    start_ns: int
    end_ns: int
    cpu_start_ns: int
    cpu_end_ns: int
    gpu_end_ns: int  # end of the last GPU activity launched inside the step (-1 when none)
    source: str = "ProfilerStep"

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def step_source(windows: list[StepWindow]) -> str:
    """Which marker the windows come from (``"whole trace"`` for none)."""
    return windows[0].source if windows else WHOLE_TRACE


def step_rows(trace: Trace) -> I64:
    """Rows of the ProfilerStep#N annotations, by start time (nested duplicates dropped)."""
    ann = trace.rows_of(Kind.USER_ANNOTATION, Kind.CPU_OP)
    rows: I64 = ann[trace.name_matches(ann, "^" + STEP_PREFIX + r"\d+")]
    if rows.size <= 1:
        return rows
    return _main_thread(trace, rows)  # some traces repeat the annotation on several threads


def _main_thread(trace: Trace, rows: I64) -> I64:
    """The rows on the thread that holds most of them."""
    c = trace.columns
    threads = c.pid[rows] * (1 << 32) + (c.tid[rows] & 0xFFFFFFFF)
    values, counts = np.unique(threads, return_counts=True)
    kept: I64 = rows[threads == values[np.argmax(counts)]]
    return kept


_ANALYSED = "steps.analysed_windows"


def set_analysed_windows(trace: Trace, windows: list[StepWindow]) -> None:
    """Record the step windows the rank's numbers cover (``analyze_trace``: the steps the device record
    covers), for the sections computed from the trace alone."""
    trace.cache[_ANALYSED] = tuple(windows)


def analysed_windows(trace: Trace) -> list[StepWindow]:
    """The step windows the rank's numbers cover: those :func:`set_analysed_windows` recorded, else all of
    :func:`step_windows`."""
    found = trace.cache.get(_ANALYSED)
    return list(found) if found is not None else step_windows(trace)


def step_windows(trace: Trace) -> list[StepWindow]:
    """The trace's step windows (see module doc)."""
    rows = step_rows(trace)
    if rows.size:
        c = trace.columns
        names = [trace.name_of(r) for r in rows.tolist()]
        numbers = [_step_number(n) for n in names]
        return _windows(trace, names, numbers, c.ts[rows], c.ts[rows] + c.dur[rows], "ProfilerStep")
    marked = iteration_markers(trace)
    if marked is None:
        return [_whole_trace_window(trace)]
    source, starts, ends = marked
    names = [f"Iteration#{i}" for i in range(starts.size)]
    return _windows(trace, names, list(range(starts.size)), starts, ends, source)


def _windows(trace: Trace, names: list[str], numbers: list[int], starts: I64, ends: I64, source: str) -> list[StepWindow]:
    """Host spans → accounting windows: stretched to their GPU work's end, clipped so none overlaps."""
    gpu_end = _gpu_end_per_step(trace, starts, ends)
    windows: list[StepWindow] = []
    prev_end = np.iinfo(np.int64).min
    for i, name in enumerate(names):
        start = max(int(starts[i]), prev_end)
        end = max(int(ends[i]), int(gpu_end[i]), start)
        if end > start:  # a step swallowed by the previous one's stretch holds no time of its own
            windows.append(
                StepWindow(name, numbers[i], start, end, int(starts[i]), int(ends[i]), int(gpu_end[i]), source)
            )
        prev_end = max(prev_end, end)
    return windows or [_whole_trace_window(trace)]


def _step_number(name: str) -> int:
    digits = name[len(STEP_PREFIX) :]
    return int(digits) if digits.isdecimal() else -1


# ---------------------------------------------------------------------------------------------------
# Iteration markers other than ProfilerStep
# ---------------------------------------------------------------------------------------------------
def iteration_markers(trace: Trace) -> tuple[str, I64, I64] | None:
    """The first marker (by priority, see module doc) that repeats regularly: its source label and the
    host spans (starts, ends, ascending) of the iterations it delimits; None when there is none."""
    for source, rows, mode in _candidates(trace):
        spans = _iteration_spans(trace, rows, mode)
        if spans is not None and _plausible(trace, rows, spans):
            return (source, *spans)
    return None


def _candidates(trace: Trace) -> Iterator[tuple[str, I64, str]]:
    """(label, marker rows on their main thread, how they delimit iterations), by priority, each computed
    only when the ones before it were rejected."""
    ops = trace.rows_of(Kind.USER_ANNOTATION, Kind.CPU_OP)
    yield "Optimizer.step", _outermost(trace, _by_name(trace, ops[trace.name_matches(ops, _OPTIMIZER)])), "end"
    yield "DataLoader", _outermost(trace, _by_name(trace, ops[trace.name_matches(ops, _DATALOADER)])), "start"
    spans = trace.rows_of(Kind.USER_ANNOTATION, Kind.CPU_OP, Kind.PYTHON)
    modules = _outermost(trace, spans[trace.name_matches(spans, _MODULE)])
    if modules.size:
        modules = _by_name(trace, modules)
        yield f"module forward {trace.name_of(int(modules[0]))[len('nn.Module: '):]}", modules, "start"
    for label, rows in _repeating_annotations(trace):
        yield f"annotation {label}", rows, "auto"


def _by_name(trace: Trace, rows: I64) -> I64:
    """The rows of the most frequent name on its main thread (two optimizers: the one seen most)."""
    rows = _one_thread(trace, rows)
    if rows.size == 0:
        return rows
    names, counts = np.unique(trace.columns.name[rows], return_counts=True)
    kept: I64 = rows[trace.columns.name[rows] == names[np.argmax(counts)]]
    return kept


def _one_thread(trace: Trace, rows: I64) -> I64:
    """The rows of the thread holding most of them, or none when other threads hold a fair share too:
    a marker that runs on several threads at once (requests served concurrently) is no iteration."""
    if rows.size == 0:
        return rows
    main = _main_thread(trace, rows)
    return main if main.size >= 0.8 * rows.size else main[:0]


def _outermost(trace: Trace, rows: I64) -> I64:
    """Drop rows nested inside an earlier row of the set on the same thread (a marker recorded twice,
    an inner module of the same family); rows are in time order."""
    rows = _one_thread(trace, rows)
    if rows.size <= 1:
        return rows
    c = trace.columns
    ends = c.ts[rows] + c.dur[rows]
    reach = np.maximum.accumulate(ends)
    nested = np.zeros(rows.size, dtype=bool)
    nested[1:] = c.ts[rows][1:] < reach[:-1]
    kept: I64 = rows[~nested]
    return kept


def _repeating_annotations(trace: Trace) -> list[tuple[str, I64]]:
    """Top-level user annotations grouped by name (trailing numbers ignored), each group on its main
    thread; names that read like an iteration first, then the groups covering most time."""
    c = trace.columns
    ann = trace.rows_of(Kind.USER_ANNOTATION)
    if ann.size == 0:
        return []
    top = ann[links.parent(trace)[ann] < 0]
    if top.size == 0:
        return []
    order = np.argsort(c.name[top], kind="stable")  # rows of one name together, in time order
    names = c.name[top][order]
    cuts = np.flatnonzero(np.diff(names)) + 1
    groups: dict[str, list[I64]] = {}
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), names.size]):  # one label per distinct name
        name = trace.strings[int(names[lo])]
        if not _NOT_ITERATION.match(name):
            groups.setdefault(re.sub(r"[\s_#:\-]*\d+$", "", name) or name, []).append(top[order[lo:hi]])
    found: list[tuple[bool, int, str, I64]] = []
    for label, members in groups.items():
        rows = _outermost(trace, np.sort(np.concatenate(members)))
        if rows.size >= MIN_MARKERS:
            found.append((not _ITERATION_WORD.search(label), -int(c.dur[rows].sum()), label, rows))
    found.sort(key=lambda f: (f[0], f[1], f[2]))
    return [(label, rows) for _, _, label, rows in found]


def _iteration_spans(trace: Trace, rows: I64, mode: str) -> tuple[I64, I64] | None:
    """Host spans of the iterations the marker rows delimit (see the module doc), or None."""
    if rows.size < MIN_MARKERS:
        return None
    c = trace.columns
    starts, ends = c.ts[rows], c.ts[rows] + c.dur[rows]
    if mode == "auto":
        gaps = np.diff(starts)
        spanning = float(arrays.median(c.dur[rows][:-1] / np.maximum(gaps, 1))) >= 0.5
        mode = "span" if spanning else "start"
    if mode == "span":
        return starts, ends
    if mode == "start":
        return starts[:-1], starts[1:]
    first = _first_activity(trace, rows)
    return np.concatenate(([min(first, int(starts[0]))], ends[:-1])), ends


def _first_activity(trace: Trace, rows: I64) -> int:
    """Start of the first host event on the marker's thread."""
    c = trace.columns
    host = trace.rows_of(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.DRIVER, Kind.PYTHON)
    row = int(rows[0])
    same = host[(c.pid[host] == c.pid[row]) & (c.tid[host] == c.tid[row])]
    return int(c.ts[same].min()) if same.size else int(c.ts[row])


def _plausible(trace: Trace, rows: I64, spans: tuple[I64, I64]) -> bool:
    """Iterations that repeat at a plausible pace and span a fair part of the trace's host activity."""
    starts, ends = spans
    if starts.size < MIN_MARKERS - 1 or not _regular(np.diff(trace.columns.ts[rows])):
        return False
    lo, hi = _host_extent(trace)
    return hi > lo and (int(ends.max()) - int(starts.min())) >= _MIN_COVERAGE * (hi - lo)


def _regular(gaps: I64) -> bool:
    """Markers at a plausibly regular pace: after the first gap (warm-up may stretch it), no gap is more
    than 10x the median or less than a tenth of it, and no two markers coincide."""
    core = gaps[1:] if gaps.size >= 3 else gaps
    if core.size == 0 or int(core.min()) <= 0:
        return False
    median = float(arrays.median(core))
    return bool(core.max() <= 10 * median and core.min() >= 0.1 * median)


def _host_extent(trace: Trace) -> tuple[int, int]:
    c = trace.columns
    host = trace.rows_of(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.DRIVER)
    if host.size == 0:
        return (0, 0)
    return int(c.ts[host].min()), int((c.ts[host] + c.dur[host]).max())


def _gpu_end_per_step(trace: Trace, starts: I64, ends: I64) -> I64:
    """Max end of GPU work whose launch call started inside each step's CPU span (-1 when none)."""
    c = trace.columns
    out = np.full(starts.shape, -1, dtype=np.int64)
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    gpu = gpu[~suspect.mask(trace)[gpu]]  # a clock glitch would stretch the step over everything
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
    spans = ~trace.kind_mask(Kind.SPAN, Kind.INSTANT, Kind.MEMORY) & ~suspect.mask(trace)
    if not spans.any():
        start = end = 0
    else:
        start = int(c.ts[spans].min())
        end = int((c.ts[spans] + c.dur[spans]).max())
    return StepWindow("trace", -1, start, end, start, end, -1, WHOLE_TRACE)
