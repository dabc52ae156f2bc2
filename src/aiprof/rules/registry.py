"""The default rule lists, running the per-rank rules on one trace, and ranking findings."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from aiprof.analysis.run import RankAnalysis, RunAnalysis
from aiprof.rules import coldstart, comm, fusion, gpu_kernels, idle, kernel_efficiency, memory, steps, telemetry
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.trace.model import Trace

RankRule = Callable[[RankContext], list[Finding]]
RunRule = Callable[[RunAnalysis, list[Finding], RuleOptions], list[Finding]]

DEFAULT_RANK_RULES: list[RankRule] = [
    coldstart.cold_start,
    steps.graph_capture,
    steps.graph_trace_incomplete,
    idle.data_loading,
    idle.host_bound,
    idle.host_gaps,
    idle.host_stall,
    idle.launch_bound,
    idle.sync,
    memory.pageable_memcpy,
    memory.memcpy_exposed,
    memory.allocator_churn,
    memory.memory_pressure,
    fusion.unfused_attention,
    fusion.fusion_opportunity,
    gpu_kernels.precision,
    gpu_kernels.tensor_core_alignment,
    gpu_kernels.launch_config,
    kernel_efficiency.kernel_efficiency,
    kernel_efficiency.kernel_variance,
    gpu_kernels.optimizer_unfused,
    comm.exposed_communication,
    comm.comm_bandwidth,
    steps.step_variance,
    telemetry.cpu_saturation,
    telemetry.noisy_neighbour,
    telemetry.io_bound,
]

DEFAULT_RUN_RULES: list[RunRule] = [comm.straggler]

# Rules whose finding explains others or flags a risk, with no time saving of its own. Their findings skip
# the min_saving_ns filter (as does any ``info`` note); their severity is capped at ``low`` by Finding itself
# (a note with no saving is never high: see aiprof.rules.finding.capped_severity).
ZERO_SAVING_RULES = {
    "memory_pressure", "cpu_saturation", "noisy_neighbour", "io_bound", "graph_trace_incomplete", "graph_capture",
    "cold_start",
}

# Rules whose evidence is device idle time: not run where graph replays hide the kernels (the idle is false).
IDLE_RULES = {"host_bound", "host_gaps", "host_stall", "launch_bound"}

_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def diagnose_rank(
    trace: Trace,
    analysis: RankAnalysis,
    options: RuleOptions = DEFAULT_OPTIONS,
    rules: list[RankRule] | None = None,
    extras: dict[str, Any] | None = None,
) -> tuple[list[Finding], list[str]]:
    """Run the per-rank rules on one trace. A rule that crashes is reported as a note, never fatal:
    one broken rule must not hide the other findings."""
    ctx = RankContext(trace, analysis, options, dict(extras or {}))
    findings: list[Finding] = []
    notes: list[str] = []
    skipped: list[str] = []
    views: dict[str, RankContext] = {}
    for rule in rules if rules is not None else DEFAULT_RANK_RULES:
        if rule.__name__ not in ZERO_SAVING_RULES and _cold_start_only(ctx):
            continue  # nothing but one-time costs: no steady state for the other rules to judge
        capture = next((f for f in findings if f.id == "graph_capture"), None)
        if capture is not None and not capture.evidence["steady_state"] and rule.__name__ not in ZERO_SAVING_RULES:
            skipped.append(rule.__name__)
            continue
        if rule.__name__ in IDLE_RULES and _hides_kernels(findings):
            notes.append(f"{rule.__name__} skipped on rank {analysis.rank}: graph replays hide kernels, idle is not real")
            continue
        if rule.__name__ in ("launch_bound", "host_stall") and _replays_graphs(findings):
            # launch_bound: graphs already remove launches; host_stall: a long call waits on a replay whose
            # kernels the trace may not show.
            notes.append(f"{rule.__name__} skipped on rank {analysis.rank}: the run replays CUDA/HIP graphs")
            continue
        try:
            view = ctx
            if capture is not None and rule.__name__ in steps.CAPTURE_RULES:  # captured idle is not steady state
                view = views.get("capture") or views.setdefault("capture", steps.without_capture(ctx, capture))
            findings.extend(
                f for f in rule(view)
                if f.id in ZERO_SAVING_RULES or f.severity == "info" or f.est_saving_ns_per_step >= options.min_saving_ns
            )
        except Exception as err:  # noqa: BLE001 - a rule bug becomes a note
            where = traceback.extract_tb(err.__traceback__)[-1]
            notes.append(f"rule {rule.__name__} failed on rank {analysis.rank}: {type(err).__name__}: {err} "
                         f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})")
    if skipped:
        notes.append(f"{len(skipped)} rules with a saving skipped on rank {analysis.rank}: the trace is a CUDA/HIP "
                     "graph capture, not steady-state execution")
    ctx.extras.clear()  # shared views refer back to the context: let reference counting free the trace
    return findings, notes


def _cold_start_only(ctx: RankContext) -> bool:
    """Nothing but one-time costs (see RankContext.steps); a failure here must not stop the diagnosis:
    the rules then run and report it themselves."""
    try:
        return not ctx.steps and bool(ctx.one_time_costs)
    except Exception:  # noqa: BLE001
        return False


def _hides_kernels(findings: list[Finding]) -> bool:
    return any(f.id == "graph_trace_incomplete" and f.evidence.get("kernels_per_graph_launch", 1) < 1 for f in findings)


def _replays_graphs(findings: list[Finding]) -> bool:
    return any(f.id == "graph_trace_incomplete" for f in findings)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Highest saving first; info findings (no saving) last; ties by severity then id. Zero-saving notes
    therefore never come before a finding that saves time, whatever their rule asked for."""
    return sorted(
        findings,
        key=lambda f: (f.severity == "info", -f.est_saving_ns_per_step, _SEVERITY_ORDER[f.severity], f.id),
    )
