"""The ``idle_sets`` view: each idle cause of the primary device as an interval set, clipped to the
steady time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aiprof.analysis import intervals as iv

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext

def idle_sets(ctx: RankContext) -> dict[str, iv.IntervalSet]:
    """Each idle cause of the primary device as an interval set clipped to the steady time (plus
    ``launch_stall``): ``ctx.views.idle_sets``, computed once per rank."""
    return ctx.views.idle_sets


def find_idle_sets(ctx: RankContext) -> dict[str, iv.IntervalSet]:
    """What :func:`idle_sets` returns, computed."""
    from aiprof.analysis.timeline import idle_cause_sets

    windows = ctx.analysis.windows
    sets = idle_cause_sets(ctx.trace, windows, ctx.device.device_index)
    # the steady steps less any one-time costs cut out of them (cold_start reports those); the causes lie
    # inside the windows, so where the steady time holds every window they are already clipped
    window_set = iv.merge(np.array([w.start_ns for w in windows], dtype=np.int64),
                          np.array([w.end_ns for w in windows], dtype=np.int64))
    if iv.total(iv.intersect(window_set, ctx.steady_set)) == iv.total(window_set):
        return dict(sets)
    return {name: iv.intersect(s, ctx.steady_set) for name, s in sets.items()}


__all__ = ["find_idle_sets", "idle_sets"]
