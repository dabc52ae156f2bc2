"""Small helpers the rules share to write their evidence and titles."""

from __future__ import annotations

from typing import Any

import numpy as np

from aiprof.rules.context import RankContext
from aiprof.trace.model import I64


def top_ops(ctx: RankContext, rows: I64, limit: int = 5) -> list[dict[str, Any]]:
    """The ops with the most total time among ``rows``, per step."""
    c = ctx.trace.columns
    if rows.size == 0:
        return []
    names, inverse = np.unique(c.name[rows], return_inverse=True)
    totals = np.bincount(inverse, weights=c.dur[rows])
    counts = np.bincount(inverse)
    order = np.argsort(-totals)[:limit]
    return [
        {
            "name": ctx.trace.strings[int(names[i])],
            "calls_per_step": round(float(counts[i]) / ctx.step_count, 1),
            "ns_per_step": int(totals[i] / ctx.step_count),
        }
        for i in order.tolist()
    ]


def ms_text(ns: float) -> str:
    """12.3 ms, or 456 µs below a millisecond."""
    return f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs"
