"""Diagnosis rules: analyses → findings with evidence, estimated saving and a fix, ranked by saving.

Two shapes of rule:

- per-rank rules, ``rule(ctx: RankContext) -> list[Finding]``: they need the trace's events and run in
  the worker process that holds the trace (through ``analyze_paths(..., rank_hook=...)``);
- run rules, ``rule(run: RunAnalysis, findings: list[Finding], options) -> list[Finding]``: they compare
  ranks (``straggler``) and run in the parent.

``DEFAULT_RANK_RULES`` and ``DEFAULT_RUN_RULES`` are ordinary lists: copy, edit, pass to
:func:`aiprof.pipeline.analyze_and_diagnose`. Thresholds live in :class:`RuleOptions`.
"""

from __future__ import annotations

from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.rules.registry import (
    DEFAULT_RANK_RULES,
    DEFAULT_RUN_RULES,
    RankRule,
    RunRule,
    diagnose_rank,
    rank_findings,
)

__all__ = [
    "DEFAULT_OPTIONS",
    "DEFAULT_RANK_RULES",
    "DEFAULT_RUN_RULES",
    "Finding",
    "RankRule",
    "RuleOptions",
    "RunRule",
    "diagnose_rank",
    "rank_findings",
]
