"""The report document: the versioned JSON every renderer starts from (schema in docs/json-schema.md).

``build_document`` turns analysis results into plain JSON-ready data. Renderers (terminal, Markdown,
HTML, JSON) only format this document, so all formats say the same thing.
"""

from __future__ import annotations

import statistics
from typing import Any

from aiprof.analysis.run import RankAnalysis, RunAnalysis
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES

SCHEMA_VERSION = "1.0"


def build_document(run: RunAnalysis, findings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON report for a run (one or more ranks)."""
    from aiprof import __version__

    from aiprof.report.runcontext import run_context

    ranks = [_rank(r) for r in run.ranks]
    warnings = list(run.warnings)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "generator": f"aiprof {__version__}",
        "sources": list(run.sources),
        "summary": _summary(ranks),
        "ranks": ranks,
        "findings": list(findings or []),
        "warnings": warnings,
    }
    # An `aiprof run` directory also holds telemetry counters and run metadata (optional keys).
    doc.update(run_context(list(run.sources), notes=warnings))
    return doc


def _rank(r: RankAnalysis) -> dict[str, Any]:
    primary = r.primary
    out: dict[str, Any] = {
        "rank": r.rank,
        "rank_source": r.rank_source,
        "path": str(r.path),
        "event_count": r.event_count,
        "distributed": r.distributed,
        "trace_metadata": r.metadata,
        "device_properties": r.devices_info,
        "primary_device": primary.device,
        "devices": [d.to_dict() for d in r.devices],
        "step_source": r.step_source,
        "steps": [s.to_dict() for s in primary.steps],
        "totals": primary.totals,
        "notes": list(r.notes),
        # A partial trace: the steps left out of the numbers above, and the span the device record covers.
        "incomplete_steps": [s.to_dict() for s in r.incomplete_steps],
        "coverage": r.coverage.to_dict() if r.coverage is not None else {"partial": False},
    }
    for key, value in r.sections.items():
        out[key] = value
    return out


def _summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-level facts: the median step over ranks and the slowest rank (the one others wait for)."""
    if not ranks:
        return {}
    medians = [r["totals"]["median_step_ns"] for r in ranks]
    utils = [r["totals"]["gpu_utilization"] for r in ranks]
    slowest = max(ranks, key=lambda r: r["totals"]["median_step_ns"])
    return {
        "rank_count": len(ranks),
        "step_count": ranks[0]["totals"]["steps"],
        "step_source": ranks[0].get("step_source", "ProfilerStep"),
        "median_step_ns": int(statistics.median(medians)),
        "gpu_utilization": statistics.fmean(utils),
        "slowest_rank": slowest["rank"],
        "device_kind": "gpu" if any(r["primary_device"] != "cpu" for r in ranks) else "cpu",
        **_partial(ranks),
    }


def _partial(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the run is partial (a trace cut off mid-write, or steps without their device side), how many
    steps were left out, and one sentence that says so (None when the run is whole)."""
    partial = [r for r in ranks if r.get("coverage", {}).get("partial")]
    left_out = sum(len(r.get("incomplete_steps") or []) for r in ranks)
    if not partial:
        return {"partial": False, "incomplete_step_count": left_out, "partial_note": None}
    cut = [r for r in partial if r["coverage"].get("cut_off")]
    who = "" if len(ranks) == 1 else f" on rank(s) {', '.join(str(r['rank']) for r in partial[:8])}"
    why = "the trace is cut off mid-write" if cut else "the trace lacks the device side of some steps"
    if left_out:
        analysed = sum(int(r["totals"]["steps"]) for r in partial)
        what = (
            f"{left_out} of {left_out + analysed} steps{who} have no recorded device activity and are left out "
            "of every number and finding"
        )
    elif any(r["coverage"].get("clipped_ns") for r in partial):
        what = f"the accounting{who} stops where the device record ends"
    else:
        what = f"every step{who} is covered by the device record, but events after the cut are missing"
    return {"partial": True, "incomplete_step_count": left_out, "partial_note": f"Partial run: {why}; {what}."}


def mean_per_step(totals: dict[str, Any], key: str) -> dict[str, float]:
    """Per-step means of a totals dict's ``breakdown_ns`` or ``idle_causes_ns``."""
    steps = max(int(totals.get("steps", 0)), 1)
    names = BUCKETS if key == "breakdown_ns" else IDLE_CAUSES
    return {name: totals[key][name] / steps for name in names}
