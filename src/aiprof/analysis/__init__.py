"""Analyses: pure functions from traces to typed results. Nothing here prints or plots."""

from __future__ import annotations

from aiprof.analysis.run import RankAnalysis, RunAnalysis, analyze, analyze_paths, analyze_trace

__all__ = ["RankAnalysis", "RunAnalysis", "analyze", "analyze_paths", "analyze_trace"]
