"""Compare two reports (BEFORE, AFTER): did the fix work?

``compare_reports(before, after) -> Comparison`` is pure: two typed reports in, one versioned comparison
out (schema in docs/json-schema.md), which ``report.render`` formats like any report. Numbers compared:
the median step (the run's summary), utilisation, the mean per-step breakdown and idle causes (averaged
over ranks), ops and kernels matched by name (and input shapes when the ops were grouped by shapes),
and findings by id and size: resolved (only before), new (only after), unchanged (both, savings within
``FINDING_FACTOR`` of each other), grew / shrank (both, the saving moved by more than that).

The step-time verdict rests on every step of both runs (``compare_steps.step_samples``: whole-run step
times from the run directories when both have them, else the recorded steps): the median change with a
95 % bootstrap confidence interval (``compare_stats``), significant when the interval excludes 0.
``program_differences`` says when the two runs are not the same program (command, ranks, devices,
step source): their numbers then compare different things.

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

from aiprof.analysis.ops import OpGroupStats
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.errors import AiprofError
from aiprof.report.compare_memory import MemoryComparison, compare_memory
from aiprof.report.compare_mfu import MfuComparison, compare_mfu
from aiprof.report.compare_inference import InferenceComparison, compare_inference
from aiprof.report.compare_stats import (CONFIDENCE, MIN_STEPS, MedianChange, VerdictResult, change_text, median_change,
                                         paired_change, verdict_result)
from aiprof.report.compare_steps import StepSample, recorded_steps
from aiprof.report.common import fmt_ms
from aiprof.report.model import Report, Summary
from aiprof.report.runcontext import shared_cores
from aiprof.roofline.mfu import MfuReport
from aiprof.rules.finding import FindingRecord

COMPARISON_SCHEMA_VERSION = "1.0"
NOISE_PCT = 2.0  # step-time changes within ±2 % are reported as unchanged
LARGE_PCT = 10.0  # a change this large that is not significant is "possibly faster/slower", not "no change"
TOP_DELTAS = 25
# A finding in both runs is "unchanged" while its savings are within this factor (±20 %): a saving 40 % larger
# is a problem that grew, never "unchanged".
FINDING_FACTOR = 1.2
# Notes about how a run was measured, not about the program: never "resolved" or "new" (the comparison's
# shared-machine warning says them, once per side).
MEASUREMENT_NOTES = frozenset({"noisy_neighbour"})

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
    """Findings by id: only before, only after, in both with about the same saving (within
    ``FINDING_FACTOR``), in both with a saving that grew or shrank beyond it (both savings given)."""

    resolved: list[FindingBrief]
    new: list[FindingBrief]
    unchanged: list[FindingBrief]
    grew: list[FindingBrief] = msgspec.field(default_factory=list)
    shrank: list[FindingBrief] = msgspec.field(default_factory=list)


class StepsUsed(msgspec.Struct, kw_only=True):
    """The steps the step-time statistics rest on: how many per side, from where ("whole-run": every
    step, from the run directories' data-loader tables; "recorded": the profiler's recorded steps),
    and each side's median over them."""

    before: int
    after: int
    source: str
    before_median_ns: int
    after_median_ns: int


class Verdict(msgspec.Struct, kw_only=True):
    """``result``: "faster" / "slower" when the change is significant and beyond ±``noise_pct`` %;
    "unchanged" when the change is within ±``noise_pct`` %; "inconclusive" when the steps cannot tell it
    from noise (beyond ±``noise_pct`` % but not significant) or either run shared the machine with other
    processes (their load is in its step times: no verdict may rest on it)."""

    result: VerdictResult
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
    # Statistics over every step (absent in comparisons written before them): the median step's change
    # in percent, its confidence interval (None with fewer than MIN_STEPS steps on a side), whether the
    # interval excludes 0, and the steps used.
    step_time_change_pct: float | None = None
    step_time_ci_pct: list[float] | None = None
    confidence: float = CONFIDENCE
    significant: bool = False
    steps_used: StepsUsed | None = None
    program_differences: list[str] = msgspec.field(default_factory=list)
    memory: MemoryComparison | None = None  # both sides have memory data (report.compare_memory)
    # Both sides served requests (an `aiprof run` of generate()): TTFT / ITL / tokens per second per request,
    # before -> after, with intervals and the verdict rule of the step time (report.compare_inference).
    inference: InferenceComparison | None = None
    # Pairs of runs the step-time statistics rest on (``aiprof compare … --pair B A``): with more than
    # one, the change is the geometric mean of the pairs' median changes and its interval a t interval
    # over the pairs (``compare_stats.paired_change``); each pair's change is listed.
    pairs: int = 1
    pair_changes_pct: list[float] = msgspec.field(default_factory=list)
    # Model FLOPs utilisation of each side's slowest rank (both sides must have one), and the peak it used.
    mfu: Utilization | None = None
    mfu_peak: str = ""
    # The same MFU per op class and per nn.Module, before -> after, with each side's peak
    # (report.compare_mfu); None unless both sides have an MFU.
    mfu_detail: MfuComparison | None = None
    # The sides ("before", "after") that shared the machine with other processes (``shared_sides``): the
    # verdict is then "inconclusive", and so is the CI gate.
    shared_machine: list[str] = msgspec.field(default_factory=list)


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
def compare_reports(
    before: Report, after: Report, noise_pct: float = NOISE_PCT, steps: tuple[StepSample, StepSample] | None = None,
    more_pairs: Sequence[tuple[StepSample, StepSample]] = (),
) -> Comparison:
    """BEFORE against AFTER. ``steps``: the step durations of each run (``compare_steps.step_samples``
    reads whole-run times from the run directories); None: the reports' recorded steps. ``more_pairs``:
    the step durations of further pairs of runs of the same two programs; with any, the step-time
    statistics are over the pairs (``compare_stats.paired_change``). A change is "faster"/"slower" only
    when significant and beyond ±``noise_pct`` %."""
    from aiprof import __version__

    step = _delta(before.summary.median_step_ns, after.summary.median_step_ns)
    util_b, util_a = before.summary.gpu_utilization, after.summary.gpu_utilization
    util = Utilization(before=util_b, after=util_a, delta=util_a - util_b)
    partial = _partial_sides(before, after)
    sample_b, sample_a = steps if steps is not None else (recorded_steps(before), recorded_steps(after))
    stats = _median_change(sample_b, sample_a, step, more_pairs)
    differences = program_differences(before, after, sample_b, sample_a)
    shared = shared_sides(before, after)
    mfu = _mfu_change(before, after)
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
        verdict=_verdict(step, util, noise_pct, partial, stats, sample_b, sample_a, [name for name, _ in shared]),
        partial=bool(partial),
        warnings=[f"different programs: {d}" for d in differences] + _too_few_warning(stats, sample_b, sample_a)
        + shared_machine(shared) + _warnings(before, after),
        step_time_change_pct=round(stats.change_pct, 4),
        step_time_ci_pct=None if stats.ci_pct is None else [round(stats.ci_pct[0], 4), round(stats.ci_pct[1], 4)],
        significant=stats.significant,
        steps_used=StepsUsed(
            before=len(sample_b.durations_ns), after=len(sample_a.durations_ns), source=sample_b.source,
            before_median_ns=int(round(stats.before_median_ns)), after_median_ns=int(round(stats.after_median_ns)),
        ),
        program_differences=differences,
        memory=compare_memory(before, after),
        inference=compare_inference(before, after, noise_pct, [name for name, _ in shared]),
        pairs=stats.pairs,
        pair_changes_pct=list(stats.pair_changes_pct),
        shared_machine=[name for name, _ in shared],
        mfu=mfu[0] if mfu is not None else None,
        mfu_peak=mfu[1] if mfu is not None else "",
        mfu_detail=compare_mfu(before, after),
    )


def _mfu_change(before: Report, after: Report) -> tuple[Utilization, str] | None:
    """``mfu`` and ``mfu_peak`` when both sides' slowest ranks have an MFU (the ``mfu`` section), else None."""
    found: list[MfuReport] = []
    for doc in (before, after):
        rank = next((r for r in doc.ranks if r.rank == doc.summary.slowest_rank), doc.ranks[0] if doc.ranks else None)
        sec = rank.mfu if rank is not None else UNSET
        if not sec or not sec.available:
            return None
        found.append(sec)
    b, a = float(found[0].mfu or 0.0), float(found[1].mfu or 0.0)
    peaks = {f"{s.peak_key or ''} {s.device or ''}".strip() for s in found}
    return Utilization(before=b, after=a, delta=a - b), " / ".join(sorted(peaks))


def _median_change(
    b: StepSample, a: StepSample, step: Delta, more_pairs: Sequence[tuple[StepSample, StepSample]] = ()
) -> MedianChange:
    """The statistics over both samples (and over the pairs, with ``more_pairs``); a side without a
    positive step (a report that lists no step durations) falls back to the summaries' medians, as a
    point estimate."""
    pairs = [(b, a), *more_pairs]
    if all(any(d > 0 for d in x.durations_ns) and any(d > 0 for d in y.durations_ns) for x, y in pairs):
        if more_pairs:
            return paired_change([(x.durations_ns, y.durations_ns) for x, y in pairs])
        return median_change(b.durations_ns, a.durations_ns)
    return MedianChange(float(step.before), float(step.after), step.delta_pct, None, False, False)


def _too_few_warning(stats: MedianChange, b: StepSample, a: StepSample) -> list[str]:
    if stats.enough:
        return []
    return [
        f"too few steps to tell a change from noise ({len(b.durations_ns)} before, {len(a.durations_ns)} after; "
        f"at least {MIN_STEPS} each): the verdict and --fail-if-slower use the point estimate only; "
        "record more steps (aiprof run --active N) or compare run directories"
    ]


def shared_sides(before: Report, after: Report) -> list[tuple[str, float]]:
    """Each side ("before", "after") whose run shared the machine with other processes, with the cores
    they used on average: its whole-run telemetry (other processes' mean CPU at least ``SHARED_PCT`` % of
    the machine) or, without it, the ``noisy_neighbour`` finding. Their load is in its step times, and no
    statistic over one run can tell it from the change being measured."""
    out = []
    for name, doc in (("before", before), ("after", after)):
        cores = others_cores(doc)
        if cores is None:
            cores = next((f.evidence.get("others_cores") for f in doc.findings if f.id == "noisy_neighbour"), None)
        if isinstance(cores, (int, float)):
            out.append((name, float(cores)))
    return out


def shared_machine(shared: Sequence[tuple[str, float]]) -> list[str]:
    """A warning per side of :func:`shared_sides`."""
    return [
        f"{name}: the machine was shared (other processes used {cores:.1f} cores on average while it ran): "
        "their load is in the step times and can look like a change; compare runs made on a quiet machine"
        for name, cores in shared
    ]


def others_cores(doc: Report) -> float | None:
    """Cores other processes used on average over the run (``aiprof run`` telemetry: the machine's CPU
    minus the profiled tree's), when that is at least ``SHARED_PCT`` % of the machine; else None."""
    return shared_cores(doc.telemetry, doc.run_metadata)


def program_differences(before: Report, after: Report, b: StepSample | None = None, a: StepSample | None = None) -> list[str]:
    """What says the two runs are not the same program: the command (run metadata), the number of
    ranks, the devices (kind and names), how steps were found. Empty when nothing differs."""
    out: list[str] = []
    cmd_b, cmd_a = _command(before), _command(after)
    if cmd_b is not None and cmd_a is not None and cmd_b != cmd_a:
        out.append(f"command {_shorten(cmd_b)!r} vs {_shorten(cmd_a)!r}")
    ranks_b, ranks_a = len(before.ranks), len(after.ranks)
    if ranks_b != ranks_a:
        out.append(f"{ranks_b} rank(s) vs {ranks_a}")
    kind_b, kind_a = before.summary.device_kind, after.summary.device_kind
    if kind_b != kind_a:
        out.append(f"device kind {kind_b} vs {kind_a}")
    names_b, names_a = _device_names(before), _device_names(after)
    if names_b and names_a and names_b != names_a:
        out.append(f"devices {', '.join(sorted(names_b))} vs {', '.join(sorted(names_a))}")
    src_b, src_a = before.summary.step_source, after.summary.step_source
    if src_b != src_a:
        out.append(f"steps found by {src_b} vs {src_a}")
    if b is not None and a is not None and b.source != a.source:
        out.append(f"step times from the {b.source} vs the {a.source}")
    return out


def _command(doc: Report) -> str | None:
    if doc.run_metadata is None or not doc.run_metadata.command:
        return None
    return " ".join(doc.run_metadata.command)


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _device_names(doc: Report) -> set[str]:
    """Accelerator names (``NVIDIA H100 80GB HBM3``…) of every rank's non-CPU devices, else the
    run metadata's device names; empty when neither says."""
    names = {d.name for r in doc.ranks for d in r.devices if d.kind != "cpu" and d.name}
    if names:
        return names
    ranks = doc.run_metadata.ranks if doc.run_metadata is not None else []
    return {dev.name for rank in ranks for dev in rank.devices if dev.type != "cpu" and isinstance(dev.name, str) and dev.name}


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


def _op_key(group: OpGroupStats) -> tuple[str, str]:
    return group.name, group.input_shapes or ""


def _op_times(doc: Report, metric: str) -> dict[tuple[str, str], dict[str, float]]:
    """Per op (name, shapes): time per step and calls per step, averaged over ranks."""
    ranks = doc.ranks
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in ranks:
        section = r.ops
        if isinstance(section, UnsetType):
            continue
        steps = max(r.totals.steps, 1)
        for g in section.groups:
            entry = out.setdefault(_op_key(g), {"ns": 0.0, "calls": 0.0})
            entry["ns"] += float(getattr(g, metric)) / steps / len(ranks)
            entry["calls"] += float(g.count) / steps / len(ranks)
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
            entry = out.setdefault(k.name, {"ns": 0.0, "calls": 0.0})
            entry["ns"] += float(k.total_ns) / steps / len(ranks)
            entry["calls"] += float(k.count) / steps / len(ranks)
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
    """By finding id (a rule fires once per run) and size: resolved, new, and for an id in both runs
    unchanged (savings within ``FINDING_FACTOR`` of each other), grew or shrank (both savings kept)."""
    b = {f.id: f for f in before.findings if f.id not in MEASUREMENT_NOTES}
    a = {f.id: f for f in after.findings if f.id not in MEASUREMENT_NOTES}
    both: dict[str, list[FindingBrief]] = {"unchanged": [], "grew": [], "shrank": []}
    for k in sorted(set(b) & set(a)):
        item = _finding_brief(a[k])
        item.before_saving_ns_per_step = b[k].est_saving_ns_per_step
        item.after_saving_ns_per_step = a[k].est_saving_ns_per_step
        both[saving_change(b[k].est_saving_ns_per_step, a[k].est_saving_ns_per_step)].append(item)
    return FindingChanges(
        resolved=[_finding_brief(b[k]) for k in sorted(set(b) - set(a))],
        new=[_finding_brief(a[k]) for k in sorted(set(a) - set(b))],
        unchanged=both["unchanged"],
        grew=both["grew"],
        shrank=both["shrank"],
    )


def saving_change(before_ns: int, after_ns: int, factor: float = FINDING_FACTOR) -> Literal["unchanged", "grew", "shrank"]:
    """A finding's saving per step before and after: "unchanged" while within ``factor`` of each other
    (8 ms and 64 ms are not the same problem), else "grew" or "shrank"."""
    lo, hi = sorted((max(before_ns, 0), max(after_ns, 0)))
    if hi <= lo * factor:
        return "unchanged"
    return "grew" if after_ns > before_ns else "shrank"


def _verdict(
    step: Delta, util: Utilization, noise_pct: float, partial: Sequence[str], stats: MedianChange,
    b: StepSample, a: StepSample, shared: Sequence[str] = (),
) -> Verdict:
    """Faster / slower when the change is beyond ±``noise_pct`` % and significant (with too few steps:
    beyond ±``noise_pct`` % on the point estimate alone); unchanged within ±``noise_pct`` %; inconclusive
    when it is beyond that but not significant, or when a side shared the machine (``shared``)."""
    pct = stats.change_pct
    result: VerdictResult = verdict_result(stats, noise_pct)
    speedup = stats.before_median_ns / stats.after_median_ns if stats.after_median_ns else None
    change = f"median step {fmt_ms(stats.before_median_ns)} → {fmt_ms(stats.after_median_ns)}, {change_text(pct, stats)}"
    steps = f"{len(b.durations_ns)} + {len(a.durations_ns)} {b.source} steps"
    if stats.pairs > 1:
        steps = f"{stats.pairs} pairs of runs, {b.source} steps"
    if result == "faster":
        text = f"AFTER is faster: {change}" + (f", {speedup:.2f}× speed-up" if speedup else "")
    elif result == "slower":
        text = f"AFTER is slower: {change}"
    elif result == "inconclusive":
        # A move the steps cannot confirm (few or spread-out steps): say so, never "no change".
        direction = "faster" if pct < 0 else "slower"
        hedge = f"possibly {direction}, not confirmed" if abs(pct) >= LARGE_PCT else "within the steps' noise"
        text = f"Inconclusive, {hedge}: {change}; record more steps or pairs of runs (--pair) to tell it from noise"
    elif stats.enough and not stats.significant:
        text = f"No change beyond noise: {change}"
    else:
        text = f"No change beyond ±{noise_pct:g} %: {change}"
    if shared:
        # The neighbour's load is in the step times: what was measured is said, but it decides nothing.
        result = "inconclusive"
        text = (f"Inconclusive: the machine was shared while {' and '.join(s.upper() for s in shared)} ran "
                f"(other processes' load is in the step times); measured: {text}; compare runs made on a quiet machine")
    caveats = []
    if partial:
        caveats.append(
            f"{' and '.join(partial)} {'is a partial trace' if len(partial) == 1 else 'are partial traces'}: "
            "the numbers compare only the steps whose device side was recorded"
        )
    if not stats.enough:
        caveats.append(f"too few steps to tell a change from noise ({steps}): point estimate only")
    return Verdict(
        result=result,
        caveat="; ".join(caveats) or None,
        step_time_delta_pct=round(pct, 4),
        speedup=None if speedup is None else round(speedup, 4),
        utilization_delta=round(util.delta, 6),
        noise_pct=noise_pct,
        text=f"{text} ({steps})",
    )
