"""Paths → analysis → diagnosis: the diagnosis step of :func:`aiprof.app.analyze` (which every verb
calls; it builds the report from what this returns).

Per-rank rules run in the worker process that loaded the trace (``analyze_paths``'s ``rank_hook``);
their findings come back as JSON dicts in ``RankAnalysis.extras["findings"]``. Cross-rank rules then run
here on the small results, per-rank findings of the same id are merged across ranks, and everything is
ranked by estimated saving.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from aiprof.analysis.run import RankAnalysis, RunAnalysis, analyze_paths
from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.rules.registry import RankRule, RunRule
from aiprof.trace.model import Trace
from aiprof.trace.runset import ProgressCallback


def diagnose_hook(
    trace: Trace,
    analysis: RankAnalysis,
    options: RuleOptions = DEFAULT_OPTIONS,
    rules: list[RankRule] | None = None,
) -> dict[str, Any]:
    """The rank hook: run the per-rank rules while the trace is in memory (module level: it may cross
    a process boundary, with ``functools.partial`` for the options and rules, which must be module-level
    functions too)."""
    from aiprof.rules.registry import diagnose_rank
    from aiprof.rules.telemetry import load_run_inputs

    findings, notes = diagnose_rank(trace, analysis, options, rules=rules, extras=load_run_inputs(trace.path))
    return {"findings": [f.to_dict() for f in findings], "rule_notes": notes}


def analyze_and_diagnose(
    paths: Sequence[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    options: RuleOptions | None = None,
    rank_rules: list[RankRule] | None = None,
    run_rules: list[RunRule] | None = None,
) -> tuple[RunAnalysis, list[dict[str, Any]]]:
    """Analyse every trace behind ``paths`` and diagnose the run; findings ranked by saving, as dicts.
    ``rank_rules`` / ``run_rules`` replace ``DEFAULT_RANK_RULES`` / ``DEFAULT_RUN_RULES``."""
    opts = options or DEFAULT_OPTIONS
    if opts == DEFAULT_OPTIONS and rank_rules is None:
        hook: Any = diagnose_hook
    else:
        hook = functools.partial(diagnose_hook, options=opts, rules=rank_rules)
    run = analyze_paths(paths, workers=workers, progress=progress, rank_hook=hook)
    return run, diagnose_run(run, opts, run_rules)


def diagnose_run(
    run: RunAnalysis, options: RuleOptions = DEFAULT_OPTIONS, run_rules: list[RunRule] | None = None
) -> list[dict[str, Any]]:
    """Merge the ranks' findings, add the cross-rank ones, rank by saving. Rule failures become notes."""
    from aiprof.rules.registry import DEFAULT_RUN_RULES, rank_findings

    # The worker numbered its rank before the run's ranks were assigned: the final number is on ``r``.
    per_rank = [_of_rank(Finding.from_dict(d), r) for r in run.ranks for d in r.extras.get("findings", [])]
    for r in run.ranks:
        r.notes.extend(r.extras.get("rule_notes", []))
    merged = merge_ranks(per_rank, len(run.ranks))
    for rule in DEFAULT_RUN_RULES if run_rules is None else run_rules:
        merged.extend(rule(run, merged, options))
    return [f.to_dict() for f in rank_findings(merged)]


def _of_rank(f: Finding, rank: RankAnalysis) -> Finding:
    """A rank's finding with the rank's final number; on a partial trace, the steps its numbers leave
    out (no device record) are part of its evidence."""
    if not rank.incomplete_steps:
        return dataclasses.replace(f, ranks=(rank.rank,))
    left_out = [s.name for s in rank.incomplete_steps]
    evidence = {**f.evidence, "incomplete_steps_left_out": left_out}
    note = f"computed from the steps with a device record; {len(left_out)} incomplete step(s) left out"
    return dataclasses.replace(f, ranks=(rank.rank,), evidence=evidence, notes=(*f.notes, note))


def merge_ranks(findings: list[Finding], rank_count: int) -> list[Finding]:
    """One finding per id: the rank with the largest saving speaks for all ranks that have it (a run is
    as slow as its slowest rank); the others are listed in ``ranks`` and ``evidence['per_rank_saving_ns']``."""
    if rank_count <= 1:
        return list(findings)
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f)
    out: list[Finding] = []
    for group in by_id.values():
        worst = max(group, key=lambda f: f.est_saving_ns_per_step)
        ranks = tuple(sorted({r for f in group for r in f.ranks}))
        evidence = dict(worst.evidence)
        evidence["worst_rank"] = worst.ranks[0] if worst.ranks else None
        evidence["per_rank_saving_ns"] = {str(f.ranks[0]): f.est_saving_ns_per_step for f in group if f.ranks}
        out.append(_replace(worst, ranks=ranks, evidence=evidence))
    return out


def _replace(f: Finding, **changes: Any) -> Finding:
    return dataclasses.replace(f, **changes)


def run_directory_of(path: Path) -> Path | None:
    """The aiprof run directory holding a trace (:func:`aiprof.rundir.owner_of`), or None."""
    from aiprof.rundir import owner_of

    found = owner_of(path)
    return found.path if found is not None else None
