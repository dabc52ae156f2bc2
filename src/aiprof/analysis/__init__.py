"""Analyses: pure functions from traces to typed results. Nothing here prints or plots."""

from __future__ import annotations

from aiprof.analysis.run import RankAnalysis, RunAnalysis, analyze, analyze_paths, analyze_trace

analyze_run = analyze_paths  # ``aiprof run`` summarises its run directory with this

__all__ = ["RankAnalysis", "RunAnalysis", "analyze", "analyze_paths", "analyze_run", "analyze_trace"]
