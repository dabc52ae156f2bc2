"""What a per-rank rule sees: the trace, its analysis, the options, the run directory's inputs, and derived
views computed once.

Steps, kernels and ops of the steady state are members of :class:`RankContext`; the views several rules
share (roofline, communication stats, attention scores, idle sets…) are the typed, lazily computed members
of ``ctx.views`` (:class:`aiprof.rules.views.RankViews`). Each is computed at most once per rank, in the
worker process that holds the trace, whichever rule asks first: no rule depends on another having run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from aiprof import arrays, rundir
from aiprof.arrays import unique
from aiprof.analysis.health import PROFILER_FRAME
from aiprof.analysis.run import RankAnalysis
from aiprof.analysis.stacks import is_user_frame
from aiprof.analysis.timeline import DeviceAccount, StepAccount
from aiprof.rules.finding import Evidence, Finding, unstruct
from aiprof.rules.options import RuleOptions
from aiprof.trace import links
from aiprof.trace.model import I64, Kind, Trace

if TYPE_CHECKING:
    from aiprof.rules.views.one_time import OneTimeCost
    from aiprof.rules.views import RankViews


# A single window whose one-time costs leave less than this share of it has no steady state to judge.
STEADY_MIN_SHARE = 0.10


@dataclass(frozen=True)
class RunInputs:
    """What the run directory around a trace adds to it (:func:`load_run_inputs`): ``meta.json``'s known
    fields and the telemetry table (column → values). All ``None`` for a trace found in the wild."""

    meta: dict[str, Any] | None = None
    telemetry: dict[str, list[float]] | None = None
    telemetry_path: str | None = None
    loader_waits: dict[int, int] | None = None  # step number → ns in DataLoader.__next__, timed by the loader


def load_run_inputs(trace_path: Path, found: rundir.RunDir | None | Literal["find"] = "find") -> RunInputs:
    """What the run directory ``found`` around a trace adds to the trace (found once at the analysis' root,
    :class:`aiprof.rundir.RunContext`: aiprof's own run directories only): ``meta`` (``meta.json``'s known
    fields: host cores, torch threads…), the telemetry table (column → list), and ``loader_waits`` (step
    number → ns the training loop waited in ``DataLoader.__next__``, measured by the loader itself) for the
    process that wrote this trace. ``"find"``: look the run directory up (:func:`aiprof.rundir.owner_of`),
    for a caller without a run context."""
    if found == "find":
        found = rundir.owner_of(trace_path)
    if found is None:
        return RunInputs()
    csv_path = found.telemetry_path
    waits_path = found.waits_path(trace_path)
    waits = rundir.read_waits(waits_path) if waits_path is not None else None
    return RunInputs(
        meta=found.meta.to_dict() or None,
        telemetry=rundir.read_telemetry(csv_path) if csv_path is not None else None,
        telemetry_path=str(csv_path) if csv_path is not None else None,
        loader_waits=waits.by_step() if waits is not None and waits.steps else None,
    )


@dataclass
class RankContext:
    """One rank under diagnosis. ``device`` is the primary device's account (the busiest one). ``base`` is the
    context this one adjusts (:func:`aiprof.rules.views.graphs.without_capture`): they share their views."""

    trace: Trace
    analysis: RankAnalysis
    options: RuleOptions
    inputs: RunInputs = field(default_factory=RunInputs)
    base: RankContext | None = field(default=None, repr=False)
    # The rules that see the steps' idle causes without the captured idle (spec ``capture_idle``), named by
    # the registry that runs them (``graph_capture`` says which): a rule module never reads the registry.
    capture_idle_rules: tuple[str, ...] = ()

    @cached_property
    def views(self) -> RankViews:
        """The shared views of this rank, each computed on first use (the base context's when adjusted)."""
        if self.base is not None:
            return self.base.views
        from aiprof.rules.views import RankViews

        return RankViews(self)

    def release(self) -> None:
        """Drop the views (they refer back to this context): reference counting then frees the trace."""
        self.__dict__.pop("views", None)

    # ----- steps ----------------------------------------------------------------------------
    @cached_property
    def device(self) -> DeviceAccount:
        return self.analysis.primary

    @cached_property
    def steps(self) -> list[StepAccount]:
        """Steady-state steps (see :meth:`_steady`): without warm-up and one-time costs."""
        return self._steady[0]

    @cached_property
    def steady_note(self) -> str:
        """What was left out of the steady state and why ('' when nothing was)."""
        return self._steady[1]

    @cached_property
    def one_time_costs(self) -> list[OneTimeCost]:
        """One-time start-up costs of the trace (:func:`aiprof.rules.views.one_time.one_time_costs`)."""
        if self.base is not None:
            return self.base.one_time_costs  # the same trace and windows
        from aiprof.rules.views.one_time import one_time_costs

        return one_time_costs(self.trace, self.analysis.windows)

    @cached_property
    def _steady(self) -> tuple[list[StepAccount], str]:
        """The first step is warm-up when it holds one-time costs (context creation, module loading, cuDNN
        autotuning) or, among three or more, when it is an outlier; it is dropped. A single window with
        one-time costs loses their time (:meth:`_after_costs`); when too little is left, there is no
        steady state (no steps)."""
        steps = list(self.device.steps)
        costs = self.one_time_costs
        if len(steps) == 1 and costs:
            return self._after_costs(steps[0], costs)
        if len(steps) >= 2 and any(_overlaps(c.start_ns, c.end_ns, steps[0]) for c in costs):
            return steps[1:], f"first step ({steps[0].name}) dropped: it holds one-time costs"
        ratio = _first_step_outlier(steps)
        if ratio:
            return steps[1:], f"first step ({steps[0].name}) dropped as warm-up: {ratio:.1f}x the median step"
        return self._without_profiler_steps(steps)

    def _without_profiler_steps(self, steps: list[StepAccount]) -> tuple[list[StepAccount], str]:
        """Steps mostly spent in torch.profiler's own code (its start, stop, ``__exit__``, the trace export; a
        ``cudaDeviceSynchronize`` inside it that is CUDA initialisation) are the profiler's overhead, not the
        script's: dropped while other steps remain (:func:`profiler_steps`)."""
        own = profiler_steps(self.trace, steps)
        if not own or len(own) >= len(steps):
            return steps, ""
        kept = [s for i, s in enumerate(steps) if i not in own]
        names = ", ".join(steps[i].name for i in sorted(own))
        return kept, f"{names} dropped: mostly torch.profiler's own work (start/stop/export), not the script's"

    def _after_costs(self, step: StepAccount, costs: list[OneTimeCost]) -> tuple[list[StepAccount], str]:
        """The single window without its one-time costs: the pieces between them accounted anew and added
        up into one step (its ``duration_ns`` is their total; :attr:`window` keeps the real span). None when
        under ``STEADY_MIN_SHARE`` of the window is left or no device work (CPU: no op) starts in it."""
        from aiprof.analysis import intervals as iv
        from aiprof.analysis.steps import StepWindow
        from aiprof.analysis.timeline import account

        lo, hi = step.start_ns, step.start_ns + step.duration_ns
        cut = iv.merge(np.array([c.start_ns for c in costs], dtype=np.int64), np.array([c.end_ns for c in costs], dtype=np.int64))
        pieces = iv.subtract(iv.as_set([lo], [hi]), cut)
        left = iv.total(pieces)
        note = f"{(step.duration_ns - left) / 1e6:.1f} ms of one-time costs left out of the window"
        if left < STEADY_MIN_SHARE * step.duration_ns or not self._work_starts_in(pieces):
            return [], note + f": the {left / 1e6:.1f} ms left is no steady state"
        source = self.analysis.windows[0].source
        windows = [StepWindow(step.name, step.number, s, e, s, e, -1, source) for s, e in zip(*map(np.ndarray.tolist, pieces))]
        accounts = [d for d in account(self.trace, windows) if d.device == self.device.device]
        if not accounts:
            return [], note
        parts = accounts[0].steps
        merged = StepAccount(
            name=step.name,
            number=step.number,
            start_ns=parts[0].start_ns,
            duration_ns=sum(p.duration_ns for p in parts),
            breakdown_ns={k: sum(p.breakdown_ns[k] for p in parts) for k in step.breakdown_ns},
            idle_causes_ns={k: sum(p.idle_causes_ns[k] for p in parts) for k in step.idle_causes_ns},
        )
        self._span_end = parts[-1].start_ns + parts[-1].duration_ns
        self._cut = cut
        return [merged], note

    # End of the steady span when one-time costs were cut out of a single window, and the cut intervals
    # (set by _after_costs): rows starting inside them are no steady-state evidence.
    _span_end: int = field(default=-1, init=False, repr=False)
    _cut: tuple[I64, I64] | None = field(default=None, init=False, repr=False)

    def _work_starts_in(self, pieces: tuple[I64, I64]) -> bool:
        c = self.trace.columns
        if self.is_gpu:
            rows = self.trace.rows_of(Kind.KERNEL)
            rows = rows[c.device[rows] == self.device.device_index]
        else:
            rows = self.trace.rows_of(Kind.CPU_OP)
        ts = c.ts[rows]
        idx = np.searchsorted(pieces[0], ts, side="right") - 1
        ok = idx >= 0
        return bool((ts[ok] < pieces[1][idx[ok]]).any())

    @cached_property
    def step_count(self) -> int:
        return max(len(self.steps), 1)

    @cached_property
    def mean_step_ns(self) -> float:
        return sum(s.duration_ns for s in self.steps) / self.step_count if self.steps else 0.0

    @cached_property
    def median_step_ns(self) -> float:
        return float(arrays.median([s.duration_ns for s in self.steps])) if self.steps else 0.0

    def per_step(self, key: str, name: str) -> float:
        """Mean per steady step of a breakdown bucket (``breakdown_ns``) or idle cause (``idle_causes_ns``)."""
        return float(sum(getattr(s, key)[name] for s in self.steps)) / self.step_count

    def share(self, ns_per_step: float) -> float:
        return ns_per_step / self.mean_step_ns if self.mean_step_ns > 0 else 0.0

    @property
    def is_gpu(self) -> bool:
        return self.device.kind == "gpu"

    @cached_property
    def window(self) -> tuple[int, int]:
        """First and last ns of the steady steps."""
        if not self.steps:
            return (0, 0)
        if self._span_end >= 0:
            return (self.steps[0].start_ns, self._span_end)
        return (self.steps[0].start_ns, self.steps[-1].start_ns + self.steps[-1].duration_ns)

    @cached_property
    def steady_set(self) -> tuple[I64, I64]:
        """The steady time as an interval set (starts, ends): the steady steps' windows, less the one-time
        costs cut out of a single window. Rules that clip intervals to the steady state use this, not
        ``start_ns + duration_ns`` (a cut step's duration is its pieces' total, shorter than its span)."""
        from aiprof.analysis import intervals as iv

        starts = np.array([s.start_ns for s in self.steps], dtype=np.int64)
        if self._cut is not None:
            return iv.subtract(iv.as_set([self.window[0]], [self.window[1]]), self._cut)
        return iv.merge(starts, starts + np.array([s.duration_ns for s in self.steps], dtype=np.int64))

    def in_window(self, rows: I64) -> I64:
        """Rows whose start lies inside the steady steps (not inside a one-time cost cut out of them)."""
        ts = self.trace.columns.ts[rows]
        lo, hi = self.window
        keep = (ts >= lo) & (ts < hi)
        if self._cut is not None and self._cut[0].size:
            idx = np.searchsorted(self._cut[0], ts, side="right") - 1
            inside = (idx >= 0) & (ts < self._cut[1][np.maximum(idx, 0)])
            keep &= ~inside
        kept: I64 = rows[keep]
        return kept

    # ----- shared views ---------------------------------------------------------------------
    @cached_property
    def kernels(self) -> I64:
        """Kernel rows of the primary device inside the steady steps, by start time."""
        c = self.trace.columns
        rows = self.trace.rows_of(Kind.KERNEL)
        return self.in_window(rows[c.device[rows] == self.device.device_index])

    @cached_property
    def cpu_ops(self) -> I64:
        """CPU op rows of the steady steps, without the ops torch.compile's compiler runs (fake tensors,
        constant folding: :func:`aiprof.analysis.compile.outside_compile`), which are not the model's."""
        from aiprof.analysis.compile import outside_compile

        return outside_compile(self.trace, self.in_window(self.trace.rows_of(Kind.CPU_OP)))

    @cached_property
    def issuing_op(self) -> I64:
        return links.gpu_op(self.trace)

    def names(self, rows: I64) -> list[str]:
        return list(map(self.trace.strings.__getitem__, self.trace.columns.name[rows].tolist()))

    def finding(
        self,
        id: str,
        title: str,
        saving_ns: float,
        *,
        evidence: dict[str, Any] | Evidence,
        fix: str,
        formula: str,
        kind: str = "upper_bound",
        confidence: str = "medium",
        severity: str | None = None,
        notes: tuple[str, ...] = (),
        step_ns: float | None = None,
    ) -> Finding:
        """A finding of this rank; severity follows the share of step unless given. ``step_ns``: the step its
        share is taken of, when not the measured mean (host rules: the step less what with_stack's recording
        added to it). ``evidence``: a dict, or the rule's typed :class:`~aiprof.rules.finding.Evidence` (held as
        the dict of its set fields)."""
        share = self.share(saving_ns) if step_ns is None else (saving_ns / step_ns if step_ns > 0 else 0.0)
        own = unstruct(evidence) if isinstance(evidence, Evidence) else evidence
        evidence = {"mean_step_ns": int(self.mean_step_ns), "steps_used": len(self.steps), **own}
        if self.steady_note:
            evidence.setdefault("steps_excluded", self.steady_note)
        return Finding(
            id=id,
            title=title,
            severity=severity or self.options.severity(share),
            est_saving_ns_per_step=int(round(max(saving_ns, 0.0))),
            share_of_step=min(max(share, 0.0), 1.0),
            saving_kind=kind,
            saving_formula=formula,
            confidence=confidence,
            evidence=evidence,
            fix=fix,
            ranks=(self.analysis.rank,),
            device=self.device.device,
            notes=notes,
        )

    def source_line(self, row: int) -> str | None:
        """The innermost user Python frame of an op, when the trace recorded stacks (``with_stack``)."""
        stack = self.trace.stacks.get(int(row))
        if stack:
            return first_user_frame(stack.split(";"))
        return self._python_frame(int(row))

    def _python_frame(self, row: int) -> str | None:
        """From python_function events: the innermost Python span enclosing the op on its thread."""
        c = self.trace.columns
        spans = self._python_by_thread.get(int(c.tid[row]))
        if spans is None:
            return None
        starts, ends, rows = spans
        ts = int(c.ts[row])
        k = int(np.searchsorted(starts, ts, side="right"))  # spans starting after the op cannot enclose it
        cand = rows[:k][ends[:k] >= ts]
        innermost_first = c.name[cand[np.argsort(-c.ts[cand], kind="stable")]].tolist()
        strings = self.trace.strings
        return first_user_frame(strings[n] for n in innermost_first)  # names looked up until one is found

    @cached_property
    def _python_by_thread(self) -> dict[int, tuple[I64, I64, I64]]:
        """python_function spans per thread id: starts (ascending), ends, rows."""
        c = self.trace.columns
        py = self.python_rows
        out: dict[int, tuple[I64, I64, I64]] = {}
        for tid in unique(c.tid[py]).tolist():
            rows = py[c.tid[py] == tid]  # rows are in time order
            out[tid] = (c.ts[rows], c.ts[rows] + c.dur[rows], rows)
        return out

    @cached_property
    def python_rows(self) -> I64:
        return self.trace.rows_of(Kind.PYTHON)


PROFILER_STEP_SHARE = 0.25  # a step this much in the profiler's own frames is the profiler's
PROFILER_STEP_MIN_NS = 1_000_000


def profiler_spans(trace: Trace) -> tuple[I64, I64]:
    """The time the host thread spent in torch.profiler's own frames (python stacks only), as an interval set."""
    from aiprof.analysis import intervals as iv

    rows = trace.rows_of(Kind.PYTHON)
    rows = rows[trace.name_matches(rows, PROFILER_FRAME)] if rows.size else rows
    c = trace.columns
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def profiler_steps(trace: Trace, steps: list[StepAccount]) -> set[int]:
    """Indices of the steps at least :data:`PROFILER_STEP_SHARE` (and 1 ms) in torch.profiler's own frames."""
    from aiprof.analysis import intervals as iv

    spans = profiler_spans(trace)
    if spans[0].size == 0:
        return set()
    out = set()
    for i, step in enumerate(steps):
        inside = iv.total(iv.intersect(spans, iv.as_set([step.start_ns], [step.start_ns + step.duration_ns])))
        if inside >= max(PROFILER_STEP_SHARE * step.duration_ns, PROFILER_STEP_MIN_NS):
            out.add(i)
    return out


def _overlaps(start: int, end: int, step: StepAccount) -> bool:
    return start < step.start_ns + step.duration_ns and end > step.start_ns


def _first_step_outlier(steps: list[StepAccount]) -> float:
    """The first step's duration over the median of the others when it stands out (more than 25 % longer
    and beyond their spread, robust sigma = 1.4826 MAD); 0 when it does not or there are under 3 steps."""
    if len(steps) < 3:
        return 0.0
    rest = np.array([s.duration_ns for s in steps[1:]], dtype=np.float64)
    median = float(arrays.median(rest))
    mad = float(arrays.median(np.abs(rest - median))) * 1.4826
    first = float(steps[0].duration_ns)
    if median > 0 and first > median + max(0.25 * median, 3 * mad):
        return first / median
    return 0.0


def first_user_frame(frames: Iterable[str]) -> str | None:
    """The innermost frame of the user's own code (``file.py(12): fn``), else None. One definition of a user
    frame for the rules and the source-lines section: :func:`aiprof.analysis.stacks.is_user_frame`."""
    for frame in frames:
        text = frame.strip()
        if text and is_user_frame(text):
            return text
    return None
