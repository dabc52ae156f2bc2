"""What a per-rank rule sees: the trace, its analysis, the options, and derived views computed once.

Rules share expensive views (kernel stats, op stats, per-op roofline costs) through this object so each
is computed at most once per rank, in the worker process that holds the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from collections.abc import Iterable
from typing import Any

import numpy as np

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.analysis.run import RankAnalysis
from aiprof.analysis.timeline import DeviceAccount, StepAccount
from aiprof.rules.finding import Finding
from aiprof.rules.options import RuleOptions
from aiprof.trace import links
from aiprof.trace.model import I64, Kind, Trace


@dataclass
class RankContext:
    """One rank under diagnosis. ``device`` is the primary device's account (the busiest one)."""

    trace: Trace
    analysis: RankAnalysis
    options: RuleOptions
    extras: dict[str, Any] = field(default_factory=dict)  # run-directory inputs (telemetry)

    # ----- steps ----------------------------------------------------------------------------
    @cached_property
    def device(self) -> DeviceAccount:
        return self.analysis.primary

    @cached_property
    def steps(self) -> list[StepAccount]:
        """Steady-state steps: the first of several is warm-up (allocator, cuDNN autotune) and is dropped."""
        steps = self.device.steps
        return steps[1:] if len(steps) >= 3 else list(steps)

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
        return (self.steps[0].start_ns, self.steps[-1].start_ns + self.steps[-1].duration_ns)

    def in_window(self, rows: I64) -> I64:
        """Rows whose start lies inside the steady steps."""
        ts = self.trace.columns.ts[rows]
        lo, hi = self.window
        kept: I64 = rows[(ts >= lo) & (ts < hi)]
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
        return self.in_window(self.trace.rows_of(Kind.CPU_OP))

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
        evidence: dict[str, Any],
        fix: str,
        formula: str,
        kind: str = "upper_bound",
        confidence: str = "medium",
        severity: str | None = None,
        notes: tuple[str, ...] = (),
    ) -> Finding:
        """A finding of this rank; severity follows the share of step unless given."""
        share = self.share(saving_ns)
        evidence = {"mean_step_ns": int(self.mean_step_ns), "steps_used": len(self.steps), **evidence}
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
            return _first_user_frame(stack.split(";"))
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
        return _first_user_frame(strings[n] for n in innermost_first)  # names looked up until one is found

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


_LIBRARY_HINTS = ("site-packages", "dist-packages", "torch/", "<built-in", "threading.py", "/lib/python")


def _first_user_frame(frames: Iterable[str]) -> str | None:
    """The innermost frame outside libraries (``file.py(12): fn``), else None."""
    for frame in frames:
        text = frame.strip()
        if text and ".py(" in text and not any(h in text for h in _LIBRARY_HINTS):
            return text
    return None
