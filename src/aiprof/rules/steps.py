"""Rules on the steps themselves: ``step_variance`` (outlier steps) and ``graph_trace_incomplete``
(CUDA/HIP graph replays that hide per-kernel detail)."""

from __future__ import annotations

import numpy as np

from aiprof import arrays
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.evidence import ms_text
from aiprof.trace.model import Kind

_GRAPH_LAUNCH = r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)"


def step_variance(ctx: RankContext) -> list[Finding]:
    """Some steps take much longer than the median (periodic work: eval, checkpoint, GC, recompiles).

    Each step is taken without its data-loading wait: a loader whose workers deliver batches unevenly
    (two workers finishing together: one step waits, the next finds its batch ready) makes steps vary,
    but that time is the ``data_loading`` finding's, and its fix is the loader's, not this one's."""
    loading = np.array([s.idle_causes_ns.get("data_loading", 0) for s in ctx.steps], dtype=np.float64)
    durations = np.array([s.duration_ns for s in ctx.steps], dtype=np.float64) - loading
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
            formula="step durations net of their data-loading idle; Σ over outlier steps (duration > "
            "max(ratio × median, median + σ × 1.4826 MAD)) of (duration − median), divided by the number of steps",
            confidence="medium",
        )
    ]


def graph_trace_incomplete(ctx: RankContext) -> list[Finding]:
    """Graph replays launch many kernels with one call; without graph-node tracing the trace shows the
    GPU idle where it was busy. Say so, instead of reporting false idle."""
    launches = ctx.trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    graphs = launches[ctx.trace.name_matches(launches, _GRAPH_LAUNCH)]
    if graphs.size == 0:
        return []
    c = ctx.trace.columns
    corr = c.correlation[graphs]
    gpu = ctx.trace.rows_of(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
    linked = arrays.isin(c.correlation[gpu], corr[corr >= 0])
    per_launch = linked.sum() / graphs.size
    evidence = {
        "graph_launches": int(graphs.size),
        "kernels_attributed_to_graph_launches": int(linked.sum()),
        "kernels_per_graph_launch": round(float(per_launch), 1),
        "idle_ns_per_step_reported": int(ctx.per_step("breakdown_ns", "idle")),
    }
    incomplete = per_launch < 1.0
    title = (
        f"{graphs.size} CUDA/HIP graph replays without per-kernel activity: idle time here is not real"
        if incomplete
        else f"{graphs.size} CUDA/HIP graph replays: kernels are attributed to the replay, not to ops"
    )
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
