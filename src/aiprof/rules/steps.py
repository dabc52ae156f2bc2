"""Rules on the steps themselves: ``step_variance`` (outlier steps), ``graph_trace_incomplete``
(CUDA/HIP graph replays that hide per-kernel detail) and ``graph_capture`` (a trace, or part of one, that
records a CUDA/HIP graph *capture*: launches recorded into a graph, almost nothing executed)."""

from __future__ import annotations

import numpy as np

from aiprof import arrays
from aiprof.analysis.graphs import paired_capture
from aiprof.analysis.health import ATTRIBUTED_OK
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.evidence import ms_text
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rules.views.graphs import CAPTURE_DOMINANT_SHARE, GRAPH_LAUNCH, captured_per_step
from aiprof.trace.model import Kind


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
    captured = captured_per_step(ctx)
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
    excluded = ("no steady-state finding is reported: the trace holds no steady-state execution"
                if dominant else
                f"captured time is taken out of {', '.join(sorted(ctx.capture_idle_rules)) or 'the idle rules'}")
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


