"""What the diagnosis computes for one rank while its trace is in memory: :class:`RankDiagnosis`.

The per-rank worker (``aiprof.pipeline.diagnose_hook``, the analysis' rank hook) returns one; it crosses the
process boundary (the local pool, a Dask cluster: pickled as is), is stored by the rank cache, and lands in
``RankAnalysis.diagnosis``. The findings stay :class:`~aiprof.rules.finding.Finding` objects all the way to the
report document, which turns each into a ``FindingRecord`` once (``report.document.build_document``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from aiprof.analysis.explore import RankTimeline
from aiprof.analysis.modules import ModuleProfile
from aiprof.analysis.stacks import StackProfile
from aiprof.analysis.inference_memory import MemoryBudget
from aiprof.memory.report import MemoryReport
from aiprof.rules.finding import Finding


class RankDiagnosis(msgspec.Struct, kw_only=True):
    """One rank's diagnosis: its findings (the per-rank rules', the memory ones), the rules' notes, and the
    sections only the worker can compute (from the trace's events or the run directory's memory dumps)."""

    findings: list[Finding] = []
    # What the rules could not say (a rule that failed, a rule left out): joins the rank's notes.
    notes: list[str] = []
    # Host time by Python source line and by nn.Module (None: no Python stacks, or an Nsight Systems report).
    stacks: StackProfile | None = None
    modules: ModuleProfile | None = None
    # The memory section (None: the rank has no memory data, or memory is off).
    memory: MemoryReport | None = None
    # The inference memory budget (None: no inference request with memory data; goes into the inference section).
    memory_budget: MemoryBudget | None = None
    # The HTML report's interactive timeline (None unless asked for: ``timeline`` > 0).
    timeline: RankTimeline | None = None
    # What the rules left for the what-if replay of their fixes (aiprof.analysis.whatif.findings.FIX_INPUTS: the
    # fusion chains, the host gaps), by trace-cache key: a run's ranks replayed together load their traces again.
    fix_inputs: dict[str, Any] = {}


__all__ = ["RankDiagnosis"]
