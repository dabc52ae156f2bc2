"""Peer tools' numbers, computed exactly as each peer defines them (docs/peer-conventions.md).

aiprof's own step and timeline semantics (DESIGN.md §3) differ from each peer's; these functions exist
so a report can show the peers' numbers next to ours and tests can check them against the peers'
published outputs. Each takes one rank's :class:`~aiprof.trace.model.Trace` and never raises on a
trace without GPU, steps or CPU side: undefined results carry ``defined=False`` and zeros / None.
"""

from __future__ import annotations

import msgspec

from aiprof.analysis.compat.hta import HtaBreakdown, hta_temporal_breakdown
from aiprof.analysis.compat.tbplugin import TbOverview, TbStep, tbplugin_overview
from aiprof.analysis.compat.tracelens import TraceLensTimeline, tracelens_gpu_timeline
from aiprof.trace.model import Trace

__all__ = [
    "Compat",
    "HtaBreakdown",
    "TbOverview",
    "TbStep",
    "TraceLensTimeline",
    "compat_for_trace",
    "hta_temporal_breakdown",
    "tbplugin_overview",
    "tracelens_gpu_timeline",
]


class Compat(msgspec.Struct, frozen=True, kw_only=True):
    """The report's ``ranks[].compat`` block: each peer's numbers of the rank."""

    hta: HtaBreakdown
    tracelens: TraceLensTimeline
    tbplugin: TbOverview


def compat_for_trace(trace: Trace) -> Compat:
    """The report contract's ``compat`` block: ``{hta: {...}, tracelens: {...}, tbplugin: {...}}``.

    Defaults are each peer's current defaults: HTA 0.5.0 (last ProfilerStep dropped), current TraceLens
    (linked GPU events, memset left out), the plugin as released (strict categories).
    """
    return Compat(hta=hta_temporal_breakdown(trace), tracelens=tracelens_gpu_timeline(trace),
                  tbplugin=tbplugin_overview(trace))
