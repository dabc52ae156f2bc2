"""Compare two report documents (BEFORE, AFTER): did the fix work?

``compare_documents`` is pure: two documents in, one versioned comparison document out (schema in
docs/json-schema.md), which the renderers in ``report.compare_render`` format. Numbers compared:
the median step (the run's summary), utilisation, the mean per-step breakdown and idle causes (averaged
over ranks), ops and kernels matched by name (and input shapes when the ops were grouped by shapes),
and findings by id: resolved (only before), new (only after), unchanged (both).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.errors import AiprofError

COMPARISON_SCHEMA_VERSION = "1.0"
NOISE_PCT = 2.0  # step-time changes within ±2 % are reported as unchanged
TOP_DELTAS = 25

_REPORT_HEAD = re.compile(rb'^\s*\{\s*"schema_version"\s*:')


# ---------------------------------------------------------------------------------------------------
# Inputs: JSON reports, traces or run directories
# ---------------------------------------------------------------------------------------------------
def is_report_file(path: Path) -> bool:
    """A JSON report written by aiprof (its first key is ``schema_version``), not a Kineto trace."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    with open(path, "rb") as fh:
        return bool(_REPORT_HEAD.match(fh.read(256)))


def load_report(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise AiprofError(f"{path}: not a readable aiprof JSON report ({err})") from None
    if not isinstance(doc, dict) or "ranks" not in doc or "summary" not in doc:
        raise AiprofError(f"{path}: not an aiprof report (no summary/ranks); pass a trace, a run directory or a report from `aiprof analyze -o X.json`")
    return doc


def analyse_to_document(paths: Sequence[str]) -> dict[str, Any]:
    """Analyse traces / run directories exactly as `aiprof analyze` does, diagnosis included when the
    rules are installed, and return the report document."""
    import importlib

    from aiprof.report.document import build_document

    try:
        pipeline = importlib.import_module("aiprof.pipeline")
    except ModuleNotFoundError:
        pipeline = None
    if pipeline is not None and hasattr(pipeline, "analyze_and_diagnose"):
        run, findings = pipeline.analyze_and_diagnose(list(paths))
        return build_document(run, findings)
    from aiprof.analysis.run import analyze_paths

    return build_document(analyze_paths(list(paths)))


def document_for(path: str) -> dict[str, Any]:
    """A report document for one BEFORE/AFTER argument."""
    p = Path(path)
    if not p.exists():
        raise AiprofError(f"{path}: no such file or folder")
    return load_report(p) if is_report_file(p) else analyse_to_document([path])


# ---------------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------------
def compare_documents(before: dict[str, Any], after: dict[str, Any], noise_pct: float = NOISE_PCT) -> dict[str, Any]:
    from aiprof import __version__

    b_step, a_step = int(before["summary"]["median_step_ns"]), int(after["summary"]["median_step_ns"])
    step = _delta(b_step, a_step)
    util = {
        "before": float(before["summary"]["gpu_utilization"]),
        "after": float(after["summary"]["gpu_utilization"]),
    }
    util["delta"] = util["after"] - util["before"]
    return {
        "comparison_schema_version": COMPARISON_SCHEMA_VERSION,
        "generator": f"aiprof {__version__}",
        "before": _side(before),
        "after": _side(after),
        "step_time_ns": step,
        "mean_step_time_ns": _delta(_mean_step(before), _mean_step(after)),
        "utilization": util,
        "breakdown_ns_per_step": _per_step_deltas(before, after, "breakdown_ns", BUCKETS),
        "idle_causes_ns_per_step": _per_step_deltas(before, after, "idle_causes_ns", IDLE_CAUSES),
        "ranks": _rank_deltas(before, after),
        "ops": _op_deltas(before, after),
        "kernels": _kernel_deltas(before, after),
        "findings": _finding_changes(before, after),
        "verdict": _verdict(step, util, noise_pct, _partial_sides(before, after)),
        "partial": bool(_partial_sides(before, after)),
        "warnings": _warnings(before, after),
    }


def _is_partial(doc: dict[str, Any]) -> bool:
    """A partial report (``summary.partial``; a report written before that key existed: any rank marked)."""
    summary = doc.get("summary") or {}
    if "partial" in summary:
        return bool(summary["partial"])
    return any((r.get("coverage") or {}).get("partial") for r in doc.get("ranks") or [])


def _partial_sides(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [name for name, doc in (("BEFORE", before), ("AFTER", after)) if _is_partial(doc)]


def _warnings(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Each side's warnings (salvaged files, incomplete steps, skipped files…), labelled, each once: what
    `aiprof analyze` said about either input still holds for the comparison. A partial side without a
    warning (a report from an older aiprof) gets its summary's sentence instead."""
    out: list[str] = []
    for name, doc in (("before", before), ("after", after)):
        texts = [str(w) for w in doc.get("warnings") or []]
        note = (doc.get("summary") or {}).get("partial_note")
        if note and not any("partial" in t for t in texts):
            texts.insert(0, str(note))
        for text in texts:
            line = f"{name}: {text}"
            if line not in out:
                out.append(line)
    return out


def _mean_step(doc: dict[str, Any]) -> int:
    """Mean step over ranks (the TensorBoard plugin's "average step time" on one rank)."""
    ranks = doc.get("ranks") or []
    return int(sum(int(r["totals"]["mean_step_ns"]) for r in ranks) / len(ranks)) if ranks else 0


def _side(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "sources": list(doc.get("sources", [])),
        "summary": dict(doc["summary"]),
        "schema_version": doc.get("schema_version"),
        "device": doc["ranks"][0].get("primary_device") if doc.get("ranks") else None,
        "partial": _is_partial(doc),
        "warnings": [str(w) for w in doc.get("warnings") or []],
    }


def _delta(before: float, after: float) -> dict[str, Any]:
    pct = 100.0 * (after - before) / before if before else 0.0
    return {"before": before, "after": after, "delta": after - before, "delta_pct": round(pct, 4)}


def _mean_per_step(doc: dict[str, Any], key: str, names: Sequence[str]) -> dict[str, float]:
    """Per-step mean of each bucket or cause, averaged over ranks."""
    ranks = doc.get("ranks") or []
    out = {n: 0.0 for n in names}
    for r in ranks:
        t = r["totals"]
        steps = max(int(t.get("steps", 0)), 1)
        for n in names:
            out[n] += float(t[key].get(n, 0)) / steps / len(ranks)
    return out


def _per_step_deltas(before: dict[str, Any], after: dict[str, Any], key: str, names: Sequence[str]) -> dict[str, Any]:
    b, a = _mean_per_step(before, key, names), _mean_per_step(after, key, names)
    return {n: {"before": int(round(b[n])), "after": int(round(a[n])), "delta": int(round(a[n] - b[n]))} for n in names}


def _rank_deltas(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Per rank, when both runs have the same ranks."""
    b = {r["rank"]: r for r in before.get("ranks") or []}
    a = {r["rank"]: r for r in after.get("ranks") or []}
    if len(b) < 2 or set(b) != set(a):
        return []
    out = []
    for rank in sorted(b):
        d = _delta(int(b[rank]["totals"]["median_step_ns"]), int(a[rank]["totals"]["median_step_ns"]))
        d["rank"] = rank
        d["utilization_before"] = float(b[rank]["totals"]["gpu_utilization"])
        d["utilization_after"] = float(a[rank]["totals"]["gpu_utilization"])
        out.append(d)
    return out


def _op_key(group: dict[str, Any]) -> tuple[str, str]:
    return str(group.get("name")), str(group.get("input_shapes") or "")


def _op_times(doc: dict[str, Any], metric: str) -> dict[tuple[str, str], dict[str, float]]:
    """Per op (name, shapes): time per step and calls per step, averaged over ranks."""
    ranks = doc.get("ranks") or []
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in ranks:
        section = r.get("ops")
        if not isinstance(section, dict):
            continue
        steps = max(int(r["totals"].get("steps", 0)), 1)
        for g in section.get("groups") or []:
            entry = out.setdefault(_op_key(g), {"ns": 0.0, "calls": 0.0})
            entry["ns"] += float(g.get(metric) or 0) / steps / len(ranks)
            entry["calls"] += float(g.get("count") or 0) / steps / len(ranks)
    return out


def _metric(before: dict[str, Any], after: dict[str, Any]) -> str:
    gpu = any(d["summary"].get("device_kind") == "gpu" for d in (before, after))
    return "gpu_total_ns" if gpu else "cpu_self_ns"


def _matched(b: dict[Any, dict[str, float]], a: dict[Any, dict[str, float]]) -> list[tuple[Any, dict[str, float] | None, dict[str, float] | None]]:
    return [(k, b.get(k), a.get(k)) for k in sorted(set(b) | set(a), key=str)]


def _op_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    metric = _metric(before, after)
    rows = []
    for (name, shapes), b, a in _matched(_op_times(before, metric), _op_times(after, metric)):
        rows.append(_row({"name": name, "input_shapes": shapes or None}, b, a))
    rows = [r for r in rows if r["before_ns_per_step"] or r["after_ns_per_step"]]
    rows.sort(key=lambda r: -abs(r["delta_ns_per_step"]))
    return {"metric": metric, "matched_by": "name and input shapes", "rows": rows[:TOP_DELTAS]}


def _kernel_times(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    from aiprof.report.common import top_kernels

    ranks = doc.get("ranks") or []
    out: dict[str, dict[str, float]] = {}
    for r in ranks:
        steps = max(int(r["totals"].get("steps", 0)), 1)
        for k in top_kernels(r, 10_000):
            entry = out.setdefault(str(k.get("name")), {"ns": 0.0, "calls": 0.0})
            entry["ns"] += float(k.get("total_ns") or 0) / steps / len(ranks)
            entry["calls"] += float(k.get("count") or 0) / steps / len(ranks)
    return out


def _kernel_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    rows = [_row({"name": name}, b, a) for name, b, a in _matched(_kernel_times(before), _kernel_times(after))]
    rows.sort(key=lambda r: -abs(r["delta_ns_per_step"]))
    return {"metric": "total_ns", "matched_by": "name", "rows": rows[:TOP_DELTAS]}


def _row(head: dict[str, Any], b: dict[str, float] | None, a: dict[str, float] | None) -> dict[str, Any]:
    b_ns = int(round(b["ns"])) if b else 0
    a_ns = int(round(a["ns"])) if a else 0
    status = "added" if b is None else "removed" if a is None else "matched"
    return {
        **head,
        "status": status,
        "before_ns_per_step": b_ns,
        "after_ns_per_step": a_ns,
        "delta_ns_per_step": a_ns - b_ns,
        "before_calls_per_step": round(b["calls"], 3) if b else 0.0,
        "after_calls_per_step": round(a["calls"], 3) if a else 0.0,
    }


def _finding_brief(f: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f.get("id"),
        "title": f.get("title"),
        "severity": f.get("severity"),
        "est_saving_ns_per_step": f.get("est_saving_ns_per_step"),
        "share_of_step": f.get("share_of_step"),
    }


def _finding_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """By finding id (a rule fires once per run): resolved, new, unchanged."""
    b = {str(f.get("id")): f for f in before.get("findings") or [] if isinstance(f, dict)}
    a = {str(f.get("id")): f for f in after.get("findings") or [] if isinstance(f, dict)}
    unchanged = []
    for k in sorted(set(b) & set(a)):
        item = _finding_brief(a[k])
        item["before_saving_ns_per_step"] = b[k].get("est_saving_ns_per_step")
        item["after_saving_ns_per_step"] = a[k].get("est_saving_ns_per_step")
        unchanged.append(item)
    return {
        "resolved": [_finding_brief(b[k]) for k in sorted(set(b) - set(a))],
        "new": [_finding_brief(a[k]) for k in sorted(set(a) - set(b))],
        "unchanged": unchanged,
    }


def _verdict(step: dict[str, Any], util: dict[str, float], noise_pct: float, partial: Sequence[str] = ()) -> dict[str, Any]:
    pct = float(step["delta_pct"])
    if pct < -noise_pct:
        result = "faster"
    elif pct > noise_pct:
        result = "slower"
    else:
        result = "unchanged"
    speedup = step["before"] / step["after"] if step["after"] else None
    from aiprof.report.common import fmt_ms

    text = {
        "faster": f"AFTER is faster: median step {fmt_ms(step['before'])} → {fmt_ms(step['after'])} ({pct:+.1f}%, {speedup:.2f}× speed-up)" if speedup else "AFTER is faster",
        "slower": f"AFTER is slower: median step {fmt_ms(step['before'])} → {fmt_ms(step['after'])} ({pct:+.1f}%)",
        "unchanged": f"No change beyond noise (±{noise_pct:g}%): median step {fmt_ms(step['before'])} → {fmt_ms(step['after'])} ({pct:+.1f}%)",
    }[result]
    caveat = None
    if partial:
        caveat = (
            f"{' and '.join(partial)} {'is a partial trace' if len(partial) == 1 else 'are partial traces'}: "
            "the numbers compare only the steps whose device side was recorded"
        )
    return {
        "result": result,
        "caveat": caveat,
        "step_time_delta_pct": pct,
        "speedup": None if speedup is None else round(speedup, 4),
        "utilization_delta": round(util["delta"], 6),
        "noise_pct": noise_pct,
        "text": text,
    }
