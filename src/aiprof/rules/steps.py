"""Rules on the steps themselves: ``step_variance`` (outlier steps), ``graph_trace_incomplete``
(CUDA/HIP graph replays that hide per-kernel detail) and ``graph_capture`` (a trace, or part of one, that
records a CUDA/HIP graph *capture*: launches recorded into a graph, almost nothing executed)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from aiprof import arrays
from aiprof.analysis import intervals as iv
from aiprof.analysis.graphs import capture_ranges, graph_capture_info, paired_capture
from aiprof.analysis.health import ATTRIBUTED_OK
from aiprof.analysis.timeline import StepAccount
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.evidence import ms_text
from aiprof.rules.spec import Saving, rank_rule
from aiprof.trace.model import Kind

GRAPH_LAUNCH = r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)"
# The trace *is* a capture when capture covers at least this share of the steady steps: no steady-state
# verdict at all then. Below it, the captured time is only taken out of the idle rules' evidence (the rules
# whose spec says ``capture_idle``: a capture range's idle has host / launch / sync causes, the host records
# launches while the device runs nothing).
CAPTURE_DOMINANT_SHARE = 0.8


@rank_rule(saving=Saving.TIME, options=("step_outlier_ratio", "step_outlier_sigma", "min_share"),
           needs=("steps", "idle_causes", "graph_capture"))
def step_variance(ctx: RankContext) -> list[Finding]:
    """Some steps take much longer than the median (periodic work: eval, checkpoint, GC, recompiles).

    Each step is taken without its data-loading wait: a loader whose workers deliver batches unevenly
    (two workers finishing together: one step waits, the next finds its batch ready) makes steps vary,
    but that time is the ``data_loading`` finding's, and its fix is the loader's, not this one's. Time inside
    CUDA/HIP graph capture ranges is left out too: a step that captures (torch.compile's cudagraph trees
    recording a new shape) is a one-time cost, reported by ``graph_capture``."""
    loading = np.array([s.idle_causes_ns.get("data_loading", 0) for s in ctx.steps], dtype=np.float64)
    captured = _captured_per_step(ctx)
    durations = np.array([s.duration_ns for s in ctx.steps], dtype=np.float64) - loading - captured
    if durations.size < 3:
        return []
    median = float(arrays.median(durations))
    mad = float(arrays.median(np.abs(durations - median))) * 1.4826  # robust sigma
    limit = max(median * ctx.options.step_outlier_ratio, median + ctx.options.step_outlier_sigma * mad)
    outliers = np.flatnonzero(durations > limit)
    if outliers.size == 0:
        return []
    saving = float((durations[outliers] - median).sum()) / durations.size
    if ctx.share(saving) < ctx.options.min_share:
        return []
    worst = int(outliers[np.argmax(durations[outliers])])
    step = ctx.steps[worst]
    buckets = {k: v for k, v in step.breakdown_ns.items() if v}
    causes = {k: v for k, v in step.idle_causes_ns.items() if v}
    evidence = {
        "median_step_ns": int(median),
        "outlier_steps": [ctx.steps[i].name for i in outliers.tolist()],
        "outlier_durations_ns": [int(durations[i]) for i in outliers.tolist()],
        "worst_step_breakdown_ns": buckets,
        "worst_step_idle_causes_ns": causes,
        "threshold_ns": int(limit),
    }
    if loading.any():
        evidence["data_loading_excluded_ns_per_step"] = int(loading.mean())
    if captured.any():
        evidence["graph_capture_excluded_ns_per_step"] = int(captured.mean())
    return [
        ctx.finding(
            "step_variance",
            f"{outliers.size} of {durations.size} steps are outliers (worst {ms_text(durations[worst])} vs median "
            f"{ms_text(median)}{', data-loading waits excluded' if loading.any() else ''})",
            saving,
            evidence=evidence,
            fix=(
                "Find the periodic work in the slow steps (the breakdown above says which bucket grew): move "
                "evaluation / checkpointing / logging off the training step or make it asynchronous, call "
                "gc.freeze() after setup, keep shapes static to avoid recompiles, and pre-warm the allocator."
            ),
            formula="step durations net of their data-loading idle and graph-capture time; Σ over outlier steps (duration > "
            "max(ratio × median, median + σ × 1.4826 MAD)) of (duration − median), divided by the number of steps",
            confidence="medium",
        )
    ]


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


@rank_rule(saving=Saving.NONE, needs=("graph_replays", "steps"))
def graph_trace_incomplete(ctx: RankContext) -> list[Finding]:
    """Graph replays launch many kernels with one call; without graph-node tracing the trace shows the
    GPU idle where it was busy. Say so, instead of reporting false idle."""
    replays = ctx.views.graph_replays
    if replays is None:
        return []
    evidence: dict[str, object] = {
        "graph_launches": replays.launches,
        "kernels_attributed_to_graph_launches": replays.linked,
        "kernels_per_graph_launch": round(replays.per_launch, 1),
        "idle_ns_per_step_reported": int(ctx.per_step("breakdown_ns", "idle")),
    }
    incomplete = replays.per_launch < 1.0
    paired = paired_capture(ctx.trace)  # analysed with its capture trace: the replayed kernels have their ops
    if not incomplete and paired is not None and paired[1].attributed_share >= ATTRIBUTED_OK:
        return []
    title = (
        f"{replays.launches} CUDA/HIP graph replays without per-kernel activity: idle time here is not real"
        if incomplete
        else f"{replays.launches} CUDA/HIP graph replays: kernels are attributed to the replay, not to ops"
        if paired is None
        else f"{replays.launches} CUDA/HIP graph replays: {100 * paired[1].unattributed_share:.0f}% of the replayed "
        "kernel time matches no graph of the capture trace, so has no op"
    )
    if paired is not None:
        evidence["capture_trace"] = paired[0]
        evidence["replay_attributed_share"] = round(paired[1].attributed_share, 4)
    return [
        ctx.finding(
            "graph_trace_incomplete",
            title,
            0,
            evidence=evidence,
            fix=(
                "Profile with graph-node tracing so each replayed kernel appears: torch.profiler with "
                "experimental_config=torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True) on "
                "recent PyTorch, or nsys profile --cuda-graph-trace=node; or profile a few steps with graphs off "
                "(torch.compile mode='default') to see per-op detail."
            ),
            formula="no saving: a trace-quality note; host_bound and launch_bound are not reported for ranks "
            "where graph replays hide their kernels",
            confidence="high",
            severity="info",
        )
    ]


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


@rank_rule(saving=Saving.NONE, options=("min_share",), needs=("graph_capture", "steps", "all_steps", "trace"))
def graph_capture(ctx: RankContext) -> list[Finding]:
    """The trace records a CUDA/HIP graph capture (vLLM / SGLang start-up, torch.cuda.graph warm-up): the
    launches inside are recorded into a graph, not executed, so the device looks idle and the host busy.
    Say what the trace is, instead of calling it host-bound."""
    capture = ctx.views.graph_capture
    if not capture.reported:
        return []
    captures, instantiations, captured_all = capture.captures, capture.instantiations, capture.captured_ns
    share_all, steady_share = capture.share_of_trace, capture.share_of_steady
    graphs = ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    replays = int(ctx.trace.name_matches(graphs, GRAPH_LAUNCH).sum())
    dominant = not capture.steady_state
    what = (f"{captures} capture{'s' if captures != 1 else ''}" if captures else
            f"{instantiations} graph instantiation{'s' if instantiations != 1 else ''}")
    if capture.capture_trace or share_all >= CAPTURE_DOMINANT_SHARE:
        title = f"The trace is a CUDA/HIP graph capture ({what}, {ms_text(captured_all)}), not steady-state execution"
    else:
        title = (f"{share_all:.0%} of the trace is CUDA/HIP graph capture ({what}, {ms_text(captured_all)}), "
                 "not steady-state execution")
    evidence = {
        "captures": captures,
        "graph_instantiations": instantiations,
        "graph_replays": replays,
        "captured_ns": captured_all,
        "capture_share_of_trace": round(share_all, 3),
        "capture_share_of_steady_steps": round(steady_share, 3),
        "steady_state": not dominant,
        "capture_trace": capture.capture_trace,
    }
    from aiprof.rules.registry import capture_idle_rules

    excluded = ("no steady-state finding is reported: the trace holds no steady-state execution"
                if dominant else
                f"captured time is taken out of {', '.join(sorted(capture_idle_rules()))}")
    return [
        ctx.finding(
            "graph_capture",
            title,
            0,
            evidence=evidence,
            fix=(
                "Profile steady-state execution instead: start the profiler after the capture / warm-up "
                "(torch.profiler schedule(wait=…, warmup=…, active=…); vLLM: profile a request after start-up, "
                "not the engine's CUDA-graph capture), so that the graphs are replayed in the trace. A capture "
                "is a one-time start-up cost; to shorten it, capture fewer batch sizes (vLLM "
                "cudagraph_capture_sizes / SGLang cuda_graph_max_bs)."
            ),
            formula=f"no saving: a note on what the trace is; {excluded}",
            confidence="high",
            severity="info",
        )
    ]


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
    return RankContext(ctx.trace, analysis, ctx.options, ctx.inputs, base=ctx)


def _captured_per_step(ctx: RankContext) -> np.ndarray:
    """Captured ns (graph capture ranges) inside each steady step's window (zeros without capture)."""
    ranges = ctx.views.graph_capture.ranges
    if not ranges[0].size or not ctx.steps:
        return np.zeros(len(ctx.steps), dtype=np.float64)
    ws = np.array([s.start_ns for s in ctx.steps], dtype=np.int64)
    we = ws + np.array([s.duration_ns for s in ctx.steps], dtype=np.int64)
    return iv.overlap_per_window(ranges, ws, we).astype(np.float64)
