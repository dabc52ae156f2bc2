"""Compare two reports (BEFORE, AFTER): did the fix work?

``compare_reports(before, after) -> Comparison`` is pure: two typed reports in, one versioned comparison
out (schema in docs/json-schema.md), which ``report.render`` formats like any report. Numbers compared:
the median step (the run's summary), utilisation, the mean per-step breakdown and idle causes (averaged
over ranks), ops and kernels matched by name (and input shapes when the ops were grouped by shapes),
and findings by id: resolved (only before), new (only after), unchanged (both).

Inputs: ``load_report(path)`` reads and validates a JSON report file (one written by this or an older
aiprof; anything else is a one-line ``AiprofError``); ``is_report_file`` tells such a file from a trace.
Analysing traces or run directories into a report is the composition root's job, not this module's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.errors import AiprofError
from aiprof.report.compare_memory import MemoryComparison, compare_memory
from aiprof.report.model import Report, Summary
from aiprof.rules.finding import FindingRecord

COMPARISON_SCHEMA_VERSION = "1.0"
NOISE_PCT = 2.0  # step-time changes within ±2 % are reported as unchanged
TOP_DELTAS = 25

_REPORT_HEAD = re.compile(rb'^\s*\{\s*"schema_version"\s*:')


# ---------------------------------------------------------------------------------------------------
# The comparison document
# ---------------------------------------------------------------------------------------------------
class Delta(msgspec.Struct, kw_only=True):
    """A number before and after; ``delta_pct`` is 0 when ``before`` is 0."""

    before: int
    after: int
    delta: int
    delta_pct: float


class RankDelta(Delta, kw_only=True):
    rank: int
    utilization_before: float
    utilization_after: float


class Utilization(msgspec.Struct, kw_only=True):
    before: float
    after: float
    delta: float


class PerStep(msgspec.Struct, kw_only=True):
    """A bucket's or idle cause's mean per step (ns), averaged over ranks."""

    before: int
    after: int
    delta: int


class Side(msgspec.Struct, kw_only=True):
    """What the comparison keeps of each input report."""

    sources: list[str]
    summary: Summary
    schema_version: str | None
    device: str | None
    partial: bool
    warnings: list[str]


class DeltaRow(msgspec.Struct, kw_only=True):
    """An op (matched by name and input shapes) or a kernel (by name): time and calls per step."""

    name: str
    input_shapes: str | None | UnsetType = UNSET  # ops only
    status: Literal["added", "removed", "matched"]
    before_ns_per_step: int
    after_ns_per_step: int
    delta_ns_per_step: int
    before_calls_per_step: float
    after_calls_per_step: float


class DeltaTable(msgspec.Struct, kw_only=True):
    metric: str
    matched_by: str
    rows: list[DeltaRow]


class FindingBrief(msgspec.Struct, kw_only=True):
    id: str
    title: str
    severity: str
    est_saving_ns_per_step: int
    share_of_step: float
    before_saving_ns_per_step: int | UnsetType = UNSET  # unchanged findings only
    after_saving_ns_per_step: int | UnsetType = UNSET


class FindingChanges(msgspec.Struct, kw_only=True):
    resolved: list[FindingBrief]
    new: list[FindingBrief]
    unchanged: list[FindingBrief]


class Verdict(msgspec.Struct, kw_only=True):
    result: Literal["faster", "slower", "unchanged"]
    caveat: str | None
    step_time_delta_pct: float
    speedup: float | None
    utilization_delta: float
    noise_pct: float
    text: str


class Comparison(msgspec.Struct, kw_only=True):
    """BEFORE against AFTER (``aiprof compare``)."""

    comparison_schema_version: str
    generator: str
    before: Side
    after: Side
    step_time_ns: Delta
    mean_step_time_ns: Delta
    utilization: Utilization
    breakdown_ns_per_step: dict[str, PerStep]
    idle_causes_ns_per_step: dict[str, PerStep]
    ranks: list[RankDelta]
    ops: DeltaTable
    kernels: DeltaTable
    findings: FindingChanges
    verdict: Verdict
    partial: bool
    warnings: list[str]
    memory: MemoryComparison | None = None  # both sides have memory data (report.compare_memory)


# ---------------------------------------------------------------------------------------------------
# Inputs: JSON reports
# ---------------------------------------------------------------------------------------------------
def is_report_file(path: Path) -> bool:
    """A JSON report written by aiprof (its first key is ``schema_version``), not a Kineto trace."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    with open(path, "rb") as fh:
        return bool(_REPORT_HEAD.match(fh.read(256)))


_DECODER = msgspec.json.Decoder(Report)


def load_report(path: Path) -> Report:
    """The report in an ``aiprof analyze -o X.json`` file (this version's or an older one's), validated:
    a file that is not one raises a one-line ``AiprofError`` saying what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AiprofError(f"{path}: cannot read the report ({err.strerror})") from None
    return decode_report(data, str(path))


def decode_report(data: bytes, name: str = "report") -> Report:
    """A report from JSON bytes (see :func:`load_report`)."""
    hint = "pass a trace, a run directory or a report from `aiprof analyze -o X.json`"
    try:
        report = _DECODER.decode(data)
    except msgspec.ValidationError as err:
        raise AiprofError(f"{name}: not an aiprof report ({_one_line(err)}); {hint}") from None
    except (msgspec.DecodeError, RecursionError) as err:
        raise AiprofError(f"{name}: not readable JSON ({_one_line(err)}); {hint}") from None
    if report.schema_version.split(".")[0] != "1":
        raise AiprofError(f"{name}: report schema {report.schema_version!r} is newer than this aiprof reads (1.x)")
    return report


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300]


# ---------------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------------
def compare_reports(before: Report, after: Report, noise_pct: float = NOISE_PCT) -> Comparison:
    """BEFORE against AFTER; step-time changes within ±``noise_pct`` % read as unchanged."""
    from aiprof import __version__

    step = _delta(before.summary.median_step_ns, after.summary.median_step_ns)
    util_b, util_a = before.summary.gpu_utilization, after.summary.gpu_utilization
    util = Utilization(before=util_b, after=util_a, delta=util_a - util_b)
    partial = _partial_sides(before, after)
    return Comparison(
        comparison_schema_version=COMPARISON_SCHEMA_VERSION,
        generator=f"aiprof {__version__}",
        before=_side(before),
        after=_side(after),
        step_time_ns=step,
        mean_step_time_ns=_delta(_mean_step(before), _mean_step(after)),
        utilization=util,
        breakdown_ns_per_step=_per_step_deltas(before, after, "breakdown_ns", BUCKETS),
        idle_causes_ns_per_step=_per_step_deltas(before, after, "idle_causes_ns", IDLE_CAUSES),
        ranks=_rank_deltas(before, after),
        ops=_op_deltas(before, after),
        kernels=_kernel_deltas(before, after),
        findings=_finding_changes(before, after),
        verdict=_verdict(step, util, noise_pct, partial),
        partial=bool(partial),
        warnings=_warnings(before, after),
        memory=compare_memory(before, after),
    )


def _is_partial(doc: Report) -> bool:
    """A partial report (``summary.partial``; a report written before that key existed: any rank marked)."""
    return doc.summary.partial or any(r.coverage.partial for r in doc.ranks)


def _partial_sides(before: Report, after: Report) -> list[str]:
    return [name for name, doc in (("BEFORE", before), ("AFTER", after)) if _is_partial(doc)]


def _warnings(before: Report, after: Report) -> list[str]:
    """Each side's warnings (salvaged files, incomplete steps, skipped files…), labelled, each once: what
    `aiprof analyze` said about either input still holds for the comparison. A partial side without a
    warning (a report from an older aiprof) gets its summary's sentence instead."""
    out: list[str] = []
    for name, doc in (("before", before), ("after", after)):
        texts = list(doc.warnings)
        note = doc.summary.partial_note
        if note and not any("partial" in t for t in texts):
            texts.insert(0, note)
        for text in texts:
            line = f"{name}: {text}"
            if line not in out:
                out.append(line)
    return out


def _mean_step(doc: Report) -> int:
    """Mean step over ranks (the TensorBoard plugin's "average step time" on one rank)."""
    ranks = doc.ranks
    return int(sum(r.totals.mean_step_ns for r in ranks) / len(ranks)) if ranks else 0


def _side(doc: Report) -> Side:
    return Side(
        sources=list(doc.sources),
        summary=msgspec.structs.replace(doc.summary),
        schema_version=doc.schema_version,
        device=doc.ranks[0].primary_device if doc.ranks else None,
        partial=_is_partial(doc),
        warnings=list(doc.warnings),
    )


def _delta(before: int, after: int) -> Delta:
    pct = 100.0 * (after - before) / before if before else 0.0
    return Delta(before=before, after=after, delta=after - before, delta_pct=round(pct, 4))


def _mean_per_step(doc: Report, key: str, names: Sequence[str]) -> dict[str, float]:
    """Per-step mean of each bucket or cause, averaged over ranks."""
    ranks = doc.ranks
    out = {n: 0.0 for n in names}
    for r in ranks:
        t = r.totals
        values = t.breakdown_ns if key == "breakdown_ns" else t.idle_causes_ns
        steps = max(t.steps, 1)
        for n in names:
            out[n] += float(values.get(n, 0)) / steps / len(ranks)
    return out


def _per_step_deltas(before: Report, after: Report, key: str, names: Sequence[str]) -> dict[str, PerStep]:
    b, a = _mean_per_step(before, key, names), _mean_per_step(after, key, names)
    return {n: PerStep(before=int(round(b[n])), after=int(round(a[n])), delta=int(round(a[n] - b[n]))) for n in names}


def _rank_deltas(before: Report, after: Report) -> list[RankDelta]:
    """Per rank, when both runs have the same ranks."""
    b = {r.rank: r for r in before.ranks}
    a = {r.rank: r for r in after.ranks}
    if len(b) < 2 or set(b) != set(a):
        return []
    out = []
    for rank in sorted(b):
        d = _delta(b[rank].totals.median_step_ns, a[rank].totals.median_step_ns)
        out.append(
            RankDelta(
                before=d.before, after=d.after, delta=d.delta, delta_pct=d.delta_pct, rank=rank,
                utilization_before=b[rank].totals.gpu_utilization,
                utilization_after=a[rank].totals.gpu_utilization,
            )
        )
    return out


def _op_key(group: dict[str, Any]) -> tuple[str, str]:
    return str(group.get("name")), str(group.get("input_shapes") or "")


def _op_times(doc: Report, metric: str) -> dict[tuple[str, str], dict[str, float]]:
    """Per op (name, shapes): time per step and calls per step, averaged over ranks."""
    ranks = doc.ranks
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in ranks:
        section = r.ops
        if not isinstance(section, dict):
            continue
        steps = max(r.totals.steps, 1)
        for g in section.get("groups") or []:
            entry = out.setdefault(_op_key(g), {"ns": 0.0, "calls": 0.0})
            entry["ns"] += float(g.get(metric) or 0) / steps / len(ranks)
            entry["calls"] += float(g.get("count") or 0) / steps / len(ranks)
    return out


def _metric(before: Report, after: Report) -> str:
    gpu = any(d.summary.device_kind == "gpu" for d in (before, after))
    return "gpu_total_ns" if gpu else "cpu_self_ns"


def _matched(b: dict[Any, dict[str, float]], a: dict[Any, dict[str, float]]) -> list[tuple[Any, dict[str, float] | None, dict[str, float] | None]]:
    return [(k, b.get(k), a.get(k)) for k in sorted(set(b) | set(a), key=str)]


def _op_deltas(before: Report, after: Report) -> DeltaTable:
    metric = _metric(before, after)
    rows = []
    for (name, shapes), b, a in _matched(_op_times(before, metric), _op_times(after, metric)):
        rows.append(_row(name, b, a, shapes or None))
    rows = [r for r in rows if r.before_ns_per_step or r.after_ns_per_step]
    rows.sort(key=lambda r: -abs(r.delta_ns_per_step))
    return DeltaTable(metric=metric, matched_by="name and input shapes", rows=rows[:TOP_DELTAS])


def _kernel_times(doc: Report) -> dict[str, dict[str, float]]:
    from aiprof.report.common import top_kernels

    ranks = doc.ranks
    out: dict[str, dict[str, float]] = {}
    for r in ranks:
        steps = max(r.totals.steps, 1)
        for k in top_kernels(r, 10_000):
            entry = out.setdefault(str(k.get("name")), {"ns": 0.0, "calls": 0.0})
            entry["ns"] += float(k.get("total_ns") or 0) / steps / len(ranks)
            entry["calls"] += float(k.get("count") or 0) / steps / len(ranks)
    return out


def _kernel_deltas(before: Report, after: Report) -> DeltaTable:
    rows = [_row(name, b, a, UNSET) for name, b, a in _matched(_kernel_times(before), _kernel_times(after))]
    rows.sort(key=lambda r: -abs(r.delta_ns_per_step))
    return DeltaTable(metric="total_ns", matched_by="name", rows=rows[:TOP_DELTAS])


def _row(name: str, b: dict[str, float] | None, a: dict[str, float] | None, shapes: str | None | UnsetType) -> DeltaRow:
    b_ns = int(round(b["ns"])) if b else 0
    a_ns = int(round(a["ns"])) if a else 0
    return DeltaRow(
        name=name,
        input_shapes=shapes,
        status="added" if b is None else "removed" if a is None else "matched",
        before_ns_per_step=b_ns,
        after_ns_per_step=a_ns,
        delta_ns_per_step=a_ns - b_ns,
        before_calls_per_step=round(b["calls"], 3) if b else 0.0,
        after_calls_per_step=round(a["calls"], 3) if a else 0.0,
    )


def _finding_brief(f: FindingRecord) -> FindingBrief:
    return FindingBrief(
        id=f.id, title=f.title, severity=f.severity, est_saving_ns_per_step=f.est_saving_ns_per_step,
        share_of_step=f.share_of_step,
    )


def _finding_changes(before: Report, after: Report) -> FindingChanges:
    """By finding id (a rule fires once per run): resolved, new, unchanged."""
    b = {f.id: f for f in before.findings}
    a = {f.id: f for f in after.findings}
    unchanged = []
    for k in sorted(set(b) & set(a)):
        item = _finding_brief(a[k])
        item.before_saving_ns_per_step = b[k].est_saving_ns_per_step
        item.after_saving_ns_per_step = a[k].est_saving_ns_per_step
        unchanged.append(item)
    return FindingChanges(
        resolved=[_finding_brief(b[k]) for k in sorted(set(b) - set(a))],
        new=[_finding_brief(a[k]) for k in sorted(set(a) - set(b))],
        unchanged=unchanged,
    )


def _verdict(step: Delta, util: Utilization, noise_pct: float, partial: Sequence[str] = ()) -> Verdict:
    from aiprof.report.common import fmt_ms

    pct = step.delta_pct
    result: Literal["faster", "slower", "unchanged"]
    if pct < -noise_pct:
        result = "faster"
    elif pct > noise_pct:
        result = "slower"
    else:
        result = "unchanged"
    speedup = step.before / step.after if step.after else None
    change = f"median step {fmt_ms(step.before)} → {fmt_ms(step.after)}"
    text = {
        "faster": f"AFTER is faster: {change} ({pct:+.1f}%, {speedup:.2f}× speed-up)" if speedup else "AFTER is faster",
        "slower": f"AFTER is slower: {change} ({pct:+.1f}%)",
        "unchanged": f"No change beyond noise (±{noise_pct:g}%): {change} ({pct:+.1f}%)",
    }[result]
    caveat = None
    if partial:
        caveat = (
            f"{' and '.join(partial)} {'is a partial trace' if len(partial) == 1 else 'are partial traces'}: "
            "the numbers compare only the steps whose device side was recorded"
        )
    return Verdict(
        result=result,
        caveat=caveat,
        step_time_delta_pct=pct,
        speedup=None if speedup is None else round(speedup, 4),
        utilization_delta=round(util.delta, 6),
        noise_pct=noise_pct,
        text=text,
    )
