"""Findings against the trace's health: a finding that depends on something the trace lacks is dropped or
downgraded, and a rule that could not judge for lack of it is listed, each with the reason
(:class:`aiprof.analysis.health.FindingChange`; docs/numbers.md, "Trace health").

=====================  ===================================================================================
health item             what happens to the findings
=====================  ===================================================================================
``shapes`` missing      the rules that need FLOPs/bytes from shapes (needs ``op_costs``, ``roofline``,
                        ``shaped_ops``, ``fp32_matrix_calls``, ``attention``) and found nothing are listed
                        ``not_run``: "no finding" there means "not judged", not "healthy"
``graph_replays``       ``missing`` (replays without their kernels): the idle rules skipped on such traces
                        (spec ``graph_replays``) are listed ``not_run``
``shared_machine``      host-side findings (their rule reads the host split, long calls, idle causes, CPU
                        ops or the telemetry CPU view; a straggler) are ``downgraded``: confidence one
                        level lower, with a note; the neighbours' load is in their time
``clock_skew``          device activity before its launch call: ``launch_bound`` (built on launch latency)
                        is ``downgraded``
``profiler_overhead``   at least :data:`OVERHEAD_DOWNGRADE_SHARE` of the host time: host-overhead findings
                        (``host_bound``, ``host_gaps``, ``host_stall``) are ``downgraded``
``stacks`` limited      recording the Python stacks costs at least :data:`OVERHEAD_DOWNGRADE_SHARE` of the
                        step time: the same host-overhead findings are ``downgraded`` (their time includes it)
=====================  ===================================================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from aiprof.analysis.health import FindingChange, Health, HealthItem
from aiprof.rules.finding import CONFIDENCES, Finding
from aiprof.rules.spec import ReplayPolicy, RuleSpec, Saving

SHAPE_NEEDS = frozenset({"op_costs", "roofline", "shaped_ops", "fp32_matrix_calls", "attention"})
HOST_NEEDS = frozenset({"host_split", "long_calls", "idle_causes", "cpu_ops", "cpu_view"})
NOT_HOST_SIDE = frozenset({"noisy_neighbour", "cpu_saturation"})  # they describe the shared machine itself
SKEWED_IDS = frozenset({"launch_bound"})
OVERHEAD_IDS = frozenset({"host_bound", "host_gaps", "host_stall"})
OVERHEAD_DOWNGRADE_SHARE = 0.25


def apply_health(findings: list[Finding], health: Health, specs: dict[str, RuleSpec]) -> tuple[list[Finding], list[FindingChange]]:
    """``findings`` with the health items' changes applied (module doc), and the changes. ``specs``: every rule's
    declaration by name (``aiprof.rules.registry.RULE_SPECS``)."""
    by_id = {i: s for s in specs.values() for i in s.ids}
    changes: list[FindingChange] = []
    out = list(findings)
    for item in health.limits:
        out, done = _apply_item(out, item, by_id, specs)
        changes += done
    return out, changes


def _apply_item(findings: list[Finding], item: HealthItem, by_id: dict[str, RuleSpec],
                specs: dict[str, RuleSpec]) -> tuple[list[Finding], list[FindingChange]]:
    present = {f.id for f in findings}
    if item.id == "shapes":
        return findings, _not_run(specs, present, item, lambda s: bool(set(s.needs) & SHAPE_NEEDS),
                                  "it needs the ops' input shapes (record_shapes=True) and the trace has none")
    if item.id == "graph_replays" and item.status == "missing":
        return findings, _not_run(specs, present, item, lambda s: s.graph_replays is not ReplayPolicy.RUN,
                                  "graph replays hide their kernels: the idle it would judge is not real")
    if item.id == "shared_machine":
        return _downgrade(findings, item, lambda f: _host_side(f, by_id),
                          f"measured on a shared machine (others used {item.value:g} cores)")
    if item.id == "clock_skew" and item.value > 0:
        return _downgrade(findings, item, lambda f: f.id in SKEWED_IDS,
                          "host and device clocks disagree: launch latency is not measured reliably")
    if item.id == "profiler_overhead" and item.value >= OVERHEAD_DOWNGRADE_SHARE:
        return _downgrade(findings, item, lambda f: f.id in OVERHEAD_IDS,
                          f"the profiler's own work is ~{100 * item.value:.0f} % of the host time, inflating it")
    if item.id == "stacks" and item.status == "limited" and item.value >= OVERHEAD_DOWNGRADE_SHARE:
        return _downgrade(findings, item, lambda f: f.id in OVERHEAD_IDS,
                          f"recording the Python stacks costs ~{100 * item.value:.0f} % of the step time, inflating it")
    return findings, []


def _host_side(f: Finding, by_id: dict[str, RuleSpec]) -> bool:
    spec = by_id.get(f.id)
    if spec is None or f.id in NOT_HOST_SIDE or spec.saving is Saving.NONE:
        return False
    return bool(set(spec.needs) & HOST_NEEDS) or f.id == "straggler"


def _not_run(specs: dict[str, RuleSpec], present: set[str], item: HealthItem, test: Callable[[RuleSpec], bool],
             reason: str) -> list[FindingChange]:
    """A change per rule that needs what ``item`` says is absent and gave no finding."""
    return [
        FindingChange(id=spec.name, action="not_run", item=item.id, reason=reason)
        for spec in specs.values()
        if spec.scope == "rank" and spec.saving is not Saving.NONE and test(spec) and not set(spec.ids) & present
    ]


def _downgrade(findings: list[Finding], item: HealthItem, test: Callable[[Finding], bool],
               reason: str) -> tuple[list[Finding], list[FindingChange]]:
    """Findings ``test`` selects with their confidence one level lower and a note saying why."""
    out: list[Finding] = []
    changes: list[FindingChange] = []
    for f in findings:
        if not test(f):
            out.append(f)
            continue
        lower = CONFIDENCES[min(CONFIDENCES.index(f.confidence) + 1, len(CONFIDENCES) - 1)]
        note = f"confidence {f.confidence} -> {lower}: {reason}"
        out.append(dataclasses.replace(f, confidence=lower, notes=(*f.notes, note)))
        changes.append(FindingChange(id=f.id, action="downgraded", item=item.id, reason=reason))
    return out, changes


__all__ = ["OVERHEAD_DOWNGRADE_SHARE", "apply_health"]
