"""The ``graph_capture`` and ``graph_replays`` views: CUDA/HIP graph capture ranges and replays in a trace,
and the context with the captured idle taken out of the steps' idle causes (:func:`without_capture`, for
the rules whose spec says ``capture_idle``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from aiprof import arrays
from aiprof.analysis import intervals as iv
from aiprof.analysis.graphs import capture_ranges, graph_capture_info
from aiprof.analysis.timeline import StepAccount
from aiprof.trace.model import Kind

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext

GRAPH_LAUNCH = r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)"
# The trace *is* a capture when capture covers at least this share of the steady steps: no steady-state
# verdict at all then. Below it, the captured time is only taken out of the idle rules' evidence (the rules
# whose spec says ``capture_idle``: a capture range's idle has host / launch / sync causes, the host records
# launches while the device runs nothing).
CAPTURE_DOMINANT_SHARE = 0.8


@dataclass(frozen=True)
class GraphReplays:
    """CUDA/HIP graph replays in a trace (``ctx.views.graph_replays``): launches, and the GPU activities the
    trace attributes to them (none without graph-node tracing)."""

    launches: int
    linked: int  # kernels, copies and memsets correlated with a graph launch

    @property
    def per_launch(self) -> float:
        return float(self.linked / self.launches)

    @property
    def hide_kernels(self) -> bool:
        """Fewer than one attributed kernel per replay (as ``kernels_per_graph_launch`` reads it, rounded to
        0.1): the device's idle time is not real and the idle rules whose spec says so are skipped."""
        return round(self.per_launch, 1) < 1


def find_graph_replays(ctx: RankContext) -> GraphReplays | None:
    """The trace's graph replays, or None when it has none."""
    launches = ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    graphs = launches[ctx.trace.name_matches(launches, GRAPH_LAUNCH)]
    if graphs.size == 0:
        return None
    c = ctx.trace.columns
    corr = c.correlation[graphs]
    gpu = ctx.trace.rows_of(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
    linked = arrays.isin(c.correlation[gpu], corr[corr >= 0])
    return GraphReplays(int(graphs.size), int(linked.sum()))


def _covered(ranges: iv.IntervalSet, steps: list[StepAccount]) -> tuple[int, int]:
    """Captured ns inside these steps' windows, and the windows' total."""
    if not steps:
        return 0, 0
    ws = np.array([s.start_ns for s in steps], dtype=np.int64)
    we = ws + np.array([s.duration_ns for s in steps], dtype=np.int64)
    return int(iv.overlap_per_window(ranges, ws, we).sum()), int((we - ws).sum())


@dataclass(frozen=True)
class GraphCapture:
    """CUDA/HIP graph capture in a trace (``ctx.views.graph_capture``): the capture ranges
    (:func:`aiprof.analysis.graphs.capture_ranges`), how much of the steps they cover, and whether the whole
    trace is a capture (:attr:`aiprof.analysis.graphs.GraphCaptureInfo.is_capture_trace`)."""

    ranges: iv.IntervalSet
    captures: int
    instantiations: int
    captured_ns: int  # inside every step of the primary device
    share_of_trace: float  # of every step
    share_of_steady: float  # of the steady steps
    reported: bool  # covers at least min_share of the steps: graph_capture says so, the rules follow it
    capture_trace: bool = False  # the trace is a capture phase (analysis.graphs): no steady state at all

    @property
    def steady_state(self) -> bool:
        """Below ``CAPTURE_DOMINANT_SHARE`` of the steady steps, in a trace that is not a capture phase: the
        rest is steady-state execution."""
        return not self.capture_trace and self.share_of_steady < CAPTURE_DOMINANT_SHARE

    @property
    def excluded(self) -> bool:
        """The rules with a saving are not run at all: the trace holds no steady-state execution."""
        return self.reported and not self.steady_state


def find_graph_capture(ctx: RankContext) -> GraphCapture:
    """The trace's graph capture ranges and their share of the steps (nothing reported without ranges)."""
    found = capture_ranges(ctx.trace)
    ranges, captures, instantiations = found.merged, found.captures, found.instantiations
    if not ranges[0].size:
        return GraphCapture(ranges, captures, instantiations, 0, 0.0, 0.0, False)
    captured_all, total_all = _covered(ranges, ctx.device.steps)
    captured, total = _covered(ranges, ctx.steps)
    share_all = captured_all / total_all if total_all else 0.0
    steady_share = captured / total if total else 0.0
    whole = graph_capture_info(ctx.trace).is_capture_trace  # the device ran almost nothing: a capture phase
    reported = whole or max(share_all, steady_share) >= ctx.options.min_share
    return GraphCapture(ranges, captures, instantiations, captured_all, share_all, steady_share, reported, whole)


def without_capture(ctx: RankContext, capture: GraphCapture) -> RankContext:
    """A view of ``ctx`` whose steps have the device idle inside capture ranges moved out of the causes the
    idle rules read (host, launch, sync, data loading, collective wait) into ``unknown``: capture is a
    one-time cost, not the steady state those rules judge. Buckets and step durations are unchanged; the
    views are ``ctx``'s (they do not read idle causes)."""
    if not ctx.is_gpu or not capture.captured_ns:
        return ctx
    ranges = capture.ranges
    c = ctx.trace.columns
    dev = ctx.device.device_index
    busy_rows = np.flatnonzero((c.device == dev) & ctx.trace.kind_mask(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
    idle_captured = iv.subtract(ranges, iv.merge(c.ts[busy_rows], c.ts[busy_rows] + c.dur[busy_rows]))
    steps = ctx.device.steps
    ws = np.array([s.start_ns for s in steps], dtype=np.int64)
    we = ws + np.array([s.duration_ns for s in steps], dtype=np.int64)
    per_step = iv.overlap_per_window(idle_captured, ws, we).tolist()
    adjusted = []
    for step, captured in zip(steps, per_step):
        causes = dict(step.idle_causes_ns)
        left = int(captured)
        for cause in ("host", "launch", "sync", "data_loading", "collective_wait"):
            take = min(left, causes.get(cause, 0))
            causes[cause] = causes.get(cause, 0) - take
            causes["unknown"] = causes.get("unknown", 0) + take
            left -= take
        adjusted.append(replace(step, idle_causes_ns=causes))
    device = replace(ctx.device, steps=adjusted)
    analysis = replace(ctx.analysis, devices=[device if d is ctx.device else d for d in ctx.analysis.devices])
    return replace(ctx, analysis=analysis, base=ctx)  # a new context: its own cached steps, the base's views


def captured_per_step(ctx: RankContext) -> np.ndarray:
    """Captured ns (graph capture ranges) inside each steady step's window (zeros without capture)."""
    ranges = ctx.views.graph_capture.ranges
    if not ranges[0].size or not ctx.steps:
        return np.zeros(len(ctx.steps), dtype=np.float64)
    ws = np.array([s.start_ns for s in ctx.steps], dtype=np.int64)
    we = ws + np.array([s.duration_ns for s in ctx.steps], dtype=np.int64)
    return iv.overlap_per_window(ranges, ws, we).astype(np.float64)


__all__ = ["CAPTURE_DOMINANT_SHARE", "GRAPH_LAUNCH", "GraphCapture", "GraphReplays", "captured_per_step",
           "find_graph_capture", "find_graph_replays", "without_capture"]
