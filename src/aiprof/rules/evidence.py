"""Small helpers the rules share to write their evidence and titles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from aiprof import arrays
from aiprof.rules.finding import Evidence
from aiprof.trace.model import I64

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext


class OpRow(Evidence, kw_only=True):
    """An op (or call, or kernel) by name in a finding's evidence: its calls and time per steady step."""

    name: str
    calls_per_step: float
    ns_per_step: int


def top_ops(ctx: RankContext, rows: I64, limit: int = 5) -> list[OpRow]:
    """The ops with the most total time among ``rows``, per step."""
    c = ctx.trace.columns
    if rows.size == 0:
        return []
    names, inverse = np.unique(c.name[rows], return_inverse=True)
    totals = np.bincount(inverse, weights=c.dur[rows])
    counts = np.bincount(inverse)
    order = np.argsort(-totals)[:limit]
    return [
        OpRow(
            name=ctx.trace.strings[int(names[i])],
            calls_per_step=round(float(counts[i]) / ctx.step_count, 1),
            ns_per_step=int(totals[i] / ctx.step_count),
        )
        for i in order.tolist()
    ]


def ms_text(ns: float) -> str:
    """12.3 ms, or 456 µs below a millisecond."""
    return f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs"


# ---------------------------------------------------------------------------------------------------
# Is the evidence spread over the step, or one event?
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread:
    """How a rule's time is spread over its events (idle gaps, calls): many small ones (overhead) or one
    that holds most of it (a stall with its own cause)."""

    count: int
    total_ns: int
    largest_ns: int
    median_ns: int

    @property
    def largest_share(self) -> float:
        """The share of the total held by the largest single event (1.0: one event is everything)."""
        return self.largest_ns / self.total_ns if self.total_ns > 0 else 0.0

    def concentrated(self, share: float) -> bool:
        """One event holds more than ``share`` of the time."""
        return self.largest_share > share

    def evidence(self, name: str, steps: int) -> dict[str, Any]:
        """``<name>s_per_step``, ``median_<name>_ns``, ``largest_<name>_ns`` and ``largest_share``."""
        return {
            f"{name}s_per_step": round(self.count / max(steps, 1), 1),
            f"median_{name}_ns": self.median_ns,
            f"largest_{name}_ns": self.largest_ns,
            "largest_share": round(self.largest_share, 3),
        }


def spread(lengths_ns: I64) -> Spread:
    """The spread of events of the given lengths (ns)."""
    if lengths_ns.size == 0:
        return Spread(0, 0, 0, 0)
    return Spread(int(lengths_ns.size), int(lengths_ns.sum()), int(lengths_ns.max()), int(arrays.median(lengths_ns)))


def long_gaps(lengths_ns: I64, floor_ns: int, factor: float) -> npt.NDArray[np.bool_]:
    """Which gaps are long: at least ``floor_ns`` and ``factor`` x the median gap (a stall among many
    short gaps, not one of them)."""
    if lengths_ns.size == 0:
        return np.zeros(0, dtype=bool)
    limit = max(floor_ns, factor * arrays.median(lengths_ns))
    mask: npt.NDArray[np.bool_] = lengths_ns >= limit
    return mask


