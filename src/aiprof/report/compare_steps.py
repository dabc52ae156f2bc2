"""The step durations a comparison rests on: every step of the run when the run directory has them,
else the steps the profiler recorded.

* ``recorded_steps(report)``: the report's recorded steps (``ranks[].steps``, complete steps only).
* ``whole_run_steps(report)``: every step of an ``aiprof run`` directory, from its data-loader table
  (``dataloader.rank<N>[-pid<P>].csv``: ``step,start_unix_ns,end_unix_ns,wait_ns,batches``, one row per
  step, recorded or not; step −1, the time before the first step, is left out), or None when the
  report's traces are not in a run directory that still holds those files.

On several ranks a step lasts as long as its slowest rank (the others wait for it at the next
collective), so durations are taken per step number as the maximum over ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from aiprof.rundir import read_waits

from aiprof.report.model import Report

Source = Literal["whole-run", "recorded"]


@dataclass(frozen=True)
class StepSample:
    """The step durations (ns) of one run and where they come from."""

    durations_ns: list[int]
    source: Source


def recorded_steps(report: Report) -> StepSample:
    """The recorded steps' durations, the slowest rank's per step number."""
    per_step: dict[int, int] = {}
    for rank in report.ranks:
        for step in rank.steps:
            per_step[step.number] = max(per_step.get(step.number, 0), step.duration_ns)
    return StepSample([per_step[k] for k in sorted(per_step)], "recorded")


def whole_run_steps(report: Report) -> StepSample | None:
    """Every step of the run from its run directory's data-loader tables, or None (see the module text)."""
    from aiprof.report.runcontext import run_dir_of

    found = run_dir_of([str(s) for s in report.sources])
    if found is None:
        return None
    folder = found.path
    per_step: dict[int, int] = {}
    for path in sorted(folder.glob("dataloader.rank*.csv")):
        waits = read_waits(path)  # the run directory's one reader of these files
        if waits is None:
            continue
        for number, start, end in zip(waits.steps, waits.starts_unix_ns, waits.ends_unix_ns):
            if number >= 0 and end > start:
                per_step[number] = max(per_step.get(number, 0), end - start)
    if not per_step:
        return None
    return StepSample([per_step[k] for k in sorted(per_step)], "whole-run")


def step_samples(before: Report, after: Report) -> tuple[StepSample, StepSample]:
    """Like with like: both runs' whole-run steps when both have them, else both runs' recorded steps."""
    b, a = whole_run_steps(before), whole_run_steps(after)
    if b is not None and a is not None:
        return b, a
    return recorded_steps(before), recorded_steps(after)
