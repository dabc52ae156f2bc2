"""The rules, collected from their declarations; running the per-rank rules on one trace; ranking findings."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from functools import cached_property

from aiprof.analysis.run import RankAnalysis, RunAnalysis
from aiprof.memory.report import MemoryReport
from aiprof.analysis.inference_memory import MemoryBudget
from aiprof.rules import (coldstart, comm, compiled, fusion, gpu_kernels, idle, inference, inference_memory,
                          kernel_efficiency, memory, memory_findings as memory_rules, steps, telemetry)
from aiprof.rules.context import RankContext, RunInputs
from aiprof.rules.finding import Finding
from aiprof.rules.framework import in_framework_words
from aiprof.rules.vendor import in_vendor_words, vendor_of
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.rules.spec import ReplayPolicy, RuleSpec, Saving, declared_in, spec_of
from aiprof.rules.views.graphs import GraphCapture, GraphReplays, without_capture
from aiprof.trace.model import Trace

RankRule = Callable[[RankContext], list[Finding]]
RunRule = Callable[[RunAnalysis, list[Finding], RuleOptions], list[Finding]]
MemoryRule = Callable[[MemoryReport, RuleOptions], list[Finding]]
BudgetRule = Callable[[MemoryBudget | None, RuleOptions], list[Finding]]

# The modules that declare rules (``@rank_rule`` / ``@run_rule``, aiprof.rules.spec). A rule added to one of
# them is registered by its declaration; a new module is added here.
RULE_MODULES = (coldstart, steps, compiled, idle, inference, memory, fusion, gpu_kernels, kernel_efficiency, comm, telemetry,
                memory_rules, inference_memory)

# Every declared rule, one list: per module, in definition order. The order does not change any finding
# (rules share views, not results: tests/rules/test_rule_order.py runs them reversed and shuffled).
RULES: list[Callable[..., list[Finding]]] = [rule for module in RULE_MODULES for rule in declared_in(module)]
RULE_SPECS: dict[str, RuleSpec] = {spec_of(r).name: spec_of(r) for r in RULES}
DEFAULT_RANK_RULES: list[RankRule] = [r for r in RULES if spec_of(r).scope == "rank"]
DEFAULT_RUN_RULES: list[RunRule] = [r for r in RULES if spec_of(r).scope == "run"]
DEFAULT_MEMORY_RULES: list[MemoryRule] = [r for r in RULES if spec_of(r).scope == "memory"]
DEFAULT_BUDGET_RULES: list[BudgetRule] = [r for r in RULES if spec_of(r).scope == "budget"]

_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def capture_idle_rules() -> list[str]:
    """The rules that see the steps' idle causes without the captured idle (spec ``capture_idle``)."""
    return [s.name for s in RULE_SPECS.values() if s.capture_idle]


def diagnose_rank(
    trace: Trace,
    analysis: RankAnalysis,
    options: RuleOptions = DEFAULT_OPTIONS,
    rules: list[RankRule] | None = None,
    inputs: RunInputs | None = None,
) -> tuple[list[Finding], list[str]]:
    """Run the per-rank rules on one trace (``inputs``: the run directory's, as
    :func:`aiprof.rules.context.load_run_inputs` reads them). What each rule is given follows its spec
    (:func:`run_one`). A rule that crashes is reported as a note, never fatal: one broken rule must not hide
    the other findings."""
    ctx = RankContext(trace, analysis, options, inputs or RunInputs(), capture_idle_rules=tuple(capture_idle_rules()))
    gates = _Gates(ctx)
    findings: list[Finding] = []
    notes: list[str] = []
    skipped: list[str] = []
    for rule in rules if rules is not None else DEFAULT_RANK_RULES:
        spec = spec_of(rule)
        if spec.saving is not Saving.NONE and gates.cold_start_only:
            continue  # nothing but one-time costs: no steady state for the other rules to judge
        if spec.saving is not Saving.NONE and gates.capture is not None and gates.capture.excluded:
            skipped.append(spec.name)
            continue
        why = gates.replays_skip(spec)
        if why:
            notes.append(f"{spec.name} skipped on rank {analysis.rank}: {why}")
            continue
        try:
            view = gates.adjusted() if spec.capture_idle and gates.capture is not None else ctx
            findings.extend(
                f for f in rule(view)
                if spec.saving is Saving.NONE or f.severity == "info" or f.est_saving_ns_per_step >= options.min_saving_ns
            )
        except Exception as err:  # noqa: BLE001 - a rule bug becomes a note
            where = traceback.extract_tb(err.__traceback__)[-1]
            notes.append(f"rule {spec.name} failed on rank {analysis.rank}: {type(err).__name__}: {err} "
                         f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})")
    if skipped:
        notes.append(f"{len(skipped)} rules with a saving skipped on rank {analysis.rank}: the trace is a CUDA/HIP "
                     "graph capture, not steady-state execution")
    findings = in_framework_words(ctx, findings)  # fixes in the Trainer's / Lightning's arguments
    findings = in_vendor_words(findings, vendor_of(trace))  # HIP / RCCL / rocm-smi on AMD, CUDA on NVIDIA
    ctx.release()  # shared views refer back to the context: let reference counting free the trace
    return findings, notes


class _Gates:
    """What decides how rules run on a rank, computed once from the trace (never from other rules' findings):
    a cold-start-only trace, a graph capture, graph replays. A failure here must not stop the diagnosis:
    the rules then run and the ones that read the failing view report it themselves."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        self._adjusted: RankContext | None = None

    @cached_property
    def cold_start_only(self) -> bool:
        """Nothing but one-time costs (see RankContext.steps)."""
        try:
            return not self.ctx.steps and bool(self.ctx.one_time_costs)
        except Exception:  # noqa: BLE001
            return False

    @cached_property
    def capture(self) -> GraphCapture | None:
        """The graph capture that ``graph_capture`` reports, if any."""
        try:
            found = self.ctx.views.graph_capture
        except Exception:  # noqa: BLE001
            return None
        return found if found.reported else None

    @cached_property
    def replays(self) -> GraphReplays | None:
        try:
            return self.ctx.views.graph_replays
        except Exception:  # noqa: BLE001
            return None

    def replays_skip(self, spec: RuleSpec) -> str:
        """Why graph replays keep this rule from running ('' when they do not)."""
        if spec.graph_replays is ReplayPolicy.RUN or self.replays is None:
            return ""
        if self.replays.hide_kernels:
            return "graph replays hide kernels, idle is not real"
        if spec.graph_replays is ReplayPolicy.NEVER:
            # launch_bound: graphs already remove launches; host_stall: a long call waits on a replay whose
            # kernels the trace may not show.
            return "the run replays CUDA/HIP graphs"
        return ""

    def adjusted(self) -> RankContext:
        """The context with the captured idle moved out of the idle causes (made once)."""
        if self._adjusted is None:
            assert self.capture is not None
            self._adjusted = without_capture(self.ctx, self.capture)
        return self._adjusted


def memory_findings(
    report: MemoryReport, options: RuleOptions = DEFAULT_OPTIONS, rules: list[MemoryRule] | None = None
) -> list[Finding]:
    """The memory rules' findings on one memory report (``aiprof analyze``'s memory section, ``aiprof memory``),
    in rule order; thresholds from ``options`` (its ``mem_*`` fields)."""
    return [f for rule in (rules if rules is not None else DEFAULT_MEMORY_RULES) for f in rule(report, options)]


def budget_findings(
    budget: MemoryBudget | None, options: RuleOptions = DEFAULT_OPTIONS, rules: list[BudgetRule] | None = None
) -> list[Finding]:
    """The inference memory-budget rules' findings on one rank's budget (``ranks[].inference.memory_budget``)."""
    return [f for rule in (rules if rules is not None else DEFAULT_BUDGET_RULES) for f in rule(budget, options)]


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Highest saving first; info findings (no saving) last. The saving is the one the finding claims from its
    replayed fix (``evidence['claimed_saving_ns_per_step']``, docs/whatif.md 'Claims': never twice for one
    cause) where it has one, else its formula's; ties by the formula's saving, then severity, then id. Zero-saving
    notes therefore never come before a finding that saves time, whatever their rule asked for."""
    return sorted(
        findings,
        key=lambda f: (f.severity == "info", -ranking_saving_ns(f), -f.est_saving_ns_per_step,
                       _SEVERITY_ORDER[f.severity], f.id),
    )


def ranking_saving_ns(f: Finding) -> int:
    """The saving ``f`` is ranked by: its claimed replayed saving, else its formula's."""
    from aiprof.analysis.whatif.results import FixPrediction

    fix = FixPrediction.of(f.evidence)
    if fix is not None and fix.claimed_saving_ns_per_step is not None:
        return fix.claimed_saving_ns_per_step
    return int(f.est_saving_ns_per_step)
