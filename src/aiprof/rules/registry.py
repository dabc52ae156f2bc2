"""The default rule lists, running the per-rank rules on one trace, and ranking findings."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from aiprof.analysis.run import RankAnalysis, RunAnalysis
from aiprof.rules import comm, fusion, gpu_kernels, idle, memory, steps, telemetry
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.trace.model import Trace

RankRule = Callable[[RankContext], list[Finding]]
RunRule = Callable[[RunAnalysis, list[Finding], RuleOptions], list[Finding]]

DEFAULT_RANK_RULES: list[RankRule] = [
    steps.graph_trace_incomplete,
    idle.data_loading,
    idle.host_bound,
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
ZERO_SAVING_RULES = {"memory_pressure", "cpu_saturation", "noisy_neighbour", "io_bound", "graph_trace_incomplete"}

# Rules whose evidence is device idle time: not run where graph replays hide the kernels (the idle is false).
IDLE_RULES = {"host_bound", "launch_bound"}

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
    for rule in rules if rules is not None else DEFAULT_RANK_RULES:
        if rule.__name__ in IDLE_RULES and _hides_kernels(findings):
            notes.append(f"{rule.__name__} skipped on rank {analysis.rank}: graph replays hide kernels, idle is not real")
            continue
        if rule.__name__ == "launch_bound" and _replays_graphs(findings):
            notes.append(f"launch_bound skipped on rank {analysis.rank}: the run already replays CUDA/HIP graphs")
            continue
        try:
            findings.extend(
                f for f in rule(ctx)
                if f.id in ZERO_SAVING_RULES or f.severity == "info" or f.est_saving_ns_per_step >= options.min_saving_ns
            )
        except Exception as err:  # noqa: BLE001 - a rule bug becomes a note
            where = traceback.extract_tb(err.__traceback__)[-1]
            notes.append(f"rule {rule.__name__} failed on rank {analysis.rank}: {type(err).__name__}: {err} "
                         f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})")
    ctx.extras.clear()  # shared views refer back to the context: let reference counting free the trace
    return findings, notes


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
