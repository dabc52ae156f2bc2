"""Diagnosis rules: analyses → findings with evidence, estimated saving and a fix, ranked by saving.

Two shapes of rule:

- per-rank rules, ``rule(ctx: RankContext) -> list[Finding]``: they need the trace's events and run in
  the worker process that holds the trace (through ``analyze_paths(..., rank_hook=...)``);
- run rules, ``rule(run: RunAnalysis, findings: list[Finding], options) -> list[Finding]``: they compare
  ranks (``straggler``) and run in the parent;
- memory rules, ``rule(report: MemoryReport, options) -> list[Finding]``: they read a rank's memory report
  (:func:`memory_findings`) and save bytes.

Each rule declares what it is next to its code (``@rank_rule`` / ``@run_rule``, :mod:`aiprof.rules.spec`):
the finding ids it emits, its saving kind, the options it reads, the analyses and shared views it needs.
The registry collects the declarations; ``DEFAULT_RANK_RULES`` and ``DEFAULT_RUN_RULES`` are ordinary
lists made from them: copy, edit (in any order), pass to :func:`aiprof.pipeline.analyze_and_diagnose`.
Thresholds live in :class:`RuleOptions`.
"""

from __future__ import annotations

from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.rules.registry import (
    DEFAULT_MEMORY_RULES,
    DEFAULT_RANK_RULES,
    DEFAULT_RUN_RULES,
    RULE_SPECS,
    MemoryRule,
    RankRule,
    RunRule,
    diagnose_rank,
    memory_findings,
    rank_findings,
)
from aiprof.rules.spec import ReplayPolicy, RuleSpec, Saving, memory_rule, rank_rule, run_rule, spec_of

__all__ = [
    "DEFAULT_MEMORY_RULES",
    "DEFAULT_OPTIONS",
    "DEFAULT_RANK_RULES",
    "DEFAULT_RUN_RULES",
    "Finding",
    "MemoryRule",
    "RULE_SPECS",
    "RankRule",
    "ReplayPolicy",
    "RuleOptions",
    "RuleSpec",
    "RunRule",
    "Saving",
    "diagnose_rank",
    "memory_findings",
    "memory_rule",
    "rank_findings",
    "rank_rule",
    "run_rule",
    "spec_of",
]
