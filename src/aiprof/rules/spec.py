"""What a rule is, declared next to its code: the ids it emits, its saving kind, the options it reads and
the analyses and shared views it needs.

    @rank_rule(saving=Saving.IDLE, options=("data_loading_share",), needs=("idle_causes", "machine"),
               capture_idle=True)
    def data_loading(ctx: RankContext) -> list[Finding]: ...

The registry (:mod:`aiprof.rules.registry`) collects every function so marked in the rule modules; how a
rule is run (skipped on a cold start or a graph capture, on graph replays, with the captured idle taken out)
follows from its spec, never from its name or its place in the list. Options and needs are checked when the
module is imported (a typo fails at once), and ``tests/rules/test_rule_specs.py`` checks them against the
code and the ids against ``docs/findings.md``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

from aiprof.rules.options import RuleOptions

SPEC_ATTRIBUTE = "spec"


class Saving(enum.Enum):
    """What a rule's findings save."""

    TIME = "time"  # step time a fix takes off (kernel, copy, host or communication time)
    IDLE = "idle"  # device idle time of one idle cause: false where graph replays hide kernels or captures run
    NONE = "none"  # nothing of its own: it explains other findings, flags a risk or says what the trace is
    BYTES = "bytes"  # device memory (memory rules: evidence ``est_saving_bytes``; no step time)


class ReplayPolicy(enum.Enum):
    """What a rule does on a trace that replays CUDA/HIP graphs (a ``graph_trace_incomplete`` note)."""

    RUN = "run"
    UNLESS_HIDDEN = "unless_hidden"  # skipped where the replays hide their kernels: the idle is not real
    NEVER = "never"  # skipped on any trace with graph replays


# What a rule may read, by name (``needs``): the timeline accounting and trace views of RankContext, the shared
# views of RankViews (``ctx.views.<name>``, computed once per rank), the run directory's inputs, and for run
# rules the ranks' analyses and the merged findings.
NEEDS: dict[str, str] = {
    "steps": "the steady steps and their buckets (RankContext.steps, per_step('breakdown_ns', …))",
    "idle_causes": "the steps' idle causes (per_step('idle_causes_ns', …))",
    "all_steps": "every step of the primary device, warm-up included (ctx.device.steps)",
    "kernels": "kernel rows of the steady steps (RankContext.kernels)",
    "cpu_ops": "CPU op rows of the steady steps (RankContext.cpu_ops)",
    "trace": "other events of the trace (runtime calls, copies, annotations, memory events)",
    "source_lines": "user source lines of ops (stacks or python_function events)",
    "one_time_costs": "one-time start-up costs (RankContext.one_time_costs)",
    "op_costs": "FLOPs and bytes of ops from their recorded shapes (aiprof.roofline.analysis.cached_op_cost)",
    "roofline": "RankViews.roofline",
    "comm": "RankViews.comm",
    "fp32_matrix_calls": "RankViews.fp32_matrix_calls",
    "attention": "RankViews.attention",
    "attention_paths": "RankViews.attention_paths",
    "shaped_ops": "RankViews.shaped_ops",
    "idle_sets": "RankViews.idle_sets",
    "host_split": "RankViews.host_split",
    "long_calls": "RankViews.long_calls",
    "uninflated_step": "RankViews.uninflated_step",
    "machine": "RankViews.machine",
    "cpu_view": "RankViews.cpu_view",
    "graph_capture": "RankViews.graph_capture",
    "graph_replays": "RankViews.graph_replays",
    "inference": "RankViews.inference",
    "telemetry": "telemetry.csv of the run directory (RankContext.inputs.telemetry)",
    "run_meta": "meta.json of the run directory (RankContext.inputs.meta)",
    "memory": "memory rules: the rank's memory report (aiprof.memory.report.MemoryReport)",
    "ranks": "run rules: every rank's analysis",
    "findings": "run rules: the ranks' merged findings",
}

# Options every rule obeys without declaring them: the registry's saving floor and the severity scale.
GLOBAL_OPTIONS = frozenset({"min_saving_ns", "high_share", "medium_share"})
OPTION_NAMES = frozenset(f.name for f in fields(RuleOptions))


@dataclass(frozen=True)
class RuleSpec:
    """A rule's declaration (see the module docstring)."""

    name: str  # the function's name
    scope: Literal["rank", "run", "memory", "budget"]
    ids: tuple[str, ...]  # finding ids it can emit
    saving: Saving
    options: tuple[str, ...] = ()  # RuleOptions fields it reads (besides GLOBAL_OPTIONS)
    needs: tuple[str, ...] = ()  # keys of NEEDS
    # It reads the steps' idle causes: where graph capture covers part of the steps, the captured idle is
    # moved out of its causes (into ``unknown``) for this rule (:func:`aiprof.rules.views.graphs.without_capture`).
    capture_idle: bool = False
    graph_replays: ReplayPolicy = ReplayPolicy.RUN

    def __post_init__(self) -> None:
        bad = sorted(set(self.options) - OPTION_NAMES)
        if bad:
            raise ValueError(f"rule {self.name}: unknown option(s) {bad}")
        bad = sorted(set(self.needs) - set(NEEDS))
        if bad:
            raise ValueError(f"rule {self.name}: unknown need(s) {bad}; known: {sorted(NEEDS)}")
        if (self.capture_idle or self.graph_replays is not ReplayPolicy.RUN) and self.saving is not Saving.IDLE:
            raise ValueError(f"rule {self.name}: only idle savings depend on graph captures and replays")
        if not self.ids:
            raise ValueError(f"rule {self.name}: declares no finding id")
        if (self.scope in ("memory", "budget")) != (self.saving is Saving.BYTES):
            raise ValueError(f"rule {self.name}: memory rules, and only they, save bytes")


F = TypeVar("F", bound=Callable[..., Any])


def rank_rule(
    *,
    saving: Saving,
    options: tuple[str, ...] = (),
    needs: tuple[str, ...] = (),
    ids: tuple[str, ...] | None = None,
    capture_idle: bool = False,
    graph_replays: ReplayPolicy = ReplayPolicy.RUN,
) -> Callable[[F], F]:
    """Declare a per-rank rule ``rule(ctx: RankContext) -> list[Finding]``; its id defaults to its name. The
    function itself is returned (with a ``spec`` attribute): it stays a module-level function that pickles."""

    def mark(fn: F) -> F:
        spec = RuleSpec(fn.__name__, "rank", ids or (fn.__name__,), saving, options, needs, capture_idle,
                        graph_replays)
        setattr(fn, SPEC_ATTRIBUTE, spec)
        return fn

    return mark


def run_rule(
    *, saving: Saving, options: tuple[str, ...] = (), needs: tuple[str, ...] = (), ids: tuple[str, ...] | None = None
) -> Callable[[F], F]:
    """Declare a cross-rank rule ``rule(run, findings, options) -> list[Finding]`` (runs in the parent)."""

    def mark(fn: F) -> F:
        setattr(fn, SPEC_ATTRIBUTE, RuleSpec(fn.__name__, "run", ids or (fn.__name__,), saving, options, needs))
        return fn

    return mark


def memory_rule(*, options: tuple[str, ...] = (), ids: tuple[str, ...] | None = None) -> Callable[[F], F]:
    """Declare a memory rule ``rule(report: MemoryReport, options: RuleOptions) -> list[Finding]`` (runs where
    a rank has a memory report: :func:`aiprof.rules.registry.memory_findings`); it saves bytes."""

    def mark(fn: F) -> F:
        setattr(fn, SPEC_ATTRIBUTE, RuleSpec(fn.__name__, "memory", ids or (fn.__name__,), Saving.BYTES, options,
                                             ("memory",)))
        return fn

    return mark


def budget_rule(*, options: tuple[str, ...] = (), ids: tuple[str, ...] | None = None) -> Callable[[F], F]:
    """Declare an inference memory-budget rule ``rule(budget: MemoryBudget | None, options: RuleOptions) ->
    list[Finding]`` (runs where a rank has an inference memory budget:
    :func:`aiprof.rules.registry.budget_findings`); a memory rule: it saves bytes."""

    def mark(fn: F) -> F:
        setattr(fn, SPEC_ATTRIBUTE, RuleSpec(fn.__name__, "budget", ids or (fn.__name__,), Saving.BYTES, options,
                                             ("memory",)))
        return fn

    return mark


def spec_of(rule: Callable[..., Any]) -> RuleSpec:
    """A rule's declared spec; a plain function of the user's (no declaration) is a rank rule with a time
    saving whose id is its name."""
    spec = getattr(rule, SPEC_ATTRIBUTE, None)
    if isinstance(spec, RuleSpec):
        return spec
    name = getattr(rule, "__name__", type(rule).__name__)
    return RuleSpec(name, "rank", (name,), Saving.TIME)


def declared_in(module: Any) -> list[Callable[..., Any]]:
    """The rules a module declares, in definition order (names it imports from elsewhere are not its own)."""
    return [
        value for value in vars(module).values()
        if callable(value) and isinstance(getattr(value, SPEC_ATTRIBUTE, None), RuleSpec)
        and getattr(value, "__module__", None) == module.__name__
    ]


__all__ = [
    "GLOBAL_OPTIONS",
    "ReplayPolicy",
    "NEEDS",
    "RuleSpec",
    "Saving",
    "declared_in",
    "memory_rule",
    "rank_rule",
    "run_rule",
    "spec_of",
]
