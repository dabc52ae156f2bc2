"""The report document: the versioned JSON every renderer starts from (schema in docs/json-schema.md).

``build_document`` turns analysis results into the typed :class:`~aiprof.report.model.Report`.
Renderers (terminal, Markdown, HTML, JSON) only format this document, so all formats say the same thing.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from aiprof.analysis.comm import CommunicationSection
from aiprof.analysis.compat import Compat
from aiprof.analysis.compile import CompileReport
from aiprof.analysis.coverage import Coverage as AnalysedCoverage
from aiprof.analysis.coverage import IncompleteStep as AnalysedIncompleteStep
from aiprof.analysis.graphs import GraphCaptureSection
from aiprof.analysis.health import Health
from aiprof.analysis.inference import InferenceReport
from aiprof.analysis.inference_memory import MemoryBudget
from aiprof.analysis.kernels import KernelStats
from aiprof.analysis.ops import OpStats
from aiprof.analysis.overview import TimelineOverview
from aiprof.analysis.run import RankAnalysis, RunAnalysis
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES, StepAccount, Totals
from aiprof.errors import AiprofError
from aiprof.report.model import (
    SCHEMA_VERSION,
    SECTIONS,
    Coverage,
    Device,
    IncompleteStep,
    RankReport,
    Report,
    Step,
    Summary,
)
from aiprof.analysis.failures import FailedRank
from aiprof.analysis.wholerun import WholeRun
from aiprof.report.runstatus import RunStatus
from aiprof.roofline.attention import AttentionReport
from aiprof.roofline.mfu import MfuReport
from aiprof.roofline.section import RooflineSection
from aiprof.rundir import RunDir
from aiprof.runmeta import RunMeta
from aiprof.rules.finding import Finding, FindingRecord, as_record

if TYPE_CHECKING:
    from aiprof.report.runcontext import RunContext

__all__ = ["SCHEMA_VERSION", "build_document", "mean_per_step"]

T = TypeVar("T")


def build_document(
    run: RunAnalysis, findings: Iterable[FindingRecord | Finding | Mapping[str, Any]] | None = None
) -> Report:
    """The typed report for a run (one or more ranks). ``findings`` are the diagnosis' :class:`Finding`
    objects (each becomes a :class:`FindingRecord` here, once); records or their JSON dicts (a report read
    back) are taken too. A section the analysis did not compute is left out."""
    from aiprof import __version__

    from aiprof.report.runcontext import run_context

    ranks = [_rank(r) for r in run.ranks]
    try:
        records = [as_record(dict(f) if isinstance(f, Mapping) else f) for f in findings or ()]
    except msgspec.ValidationError as err:
        raise AiprofError(f"a finding does not fit the report: {err}") from None
    warnings = list(run.warnings) + list(run.run_notes)
    context = run_context(run.run_dir)
    status = _run_status(context.run_metadata, ranks)
    whole = _whole_run(run.run_dir, ranks) if context.run_metadata is not None else None
    return Report(
        schema_version=SCHEMA_VERSION,
        generator=f"aiprof {__version__}",
        sources=list(run.sources),
        summary=_summary(ranks, run.failed),
        ranks=ranks,
        findings=records,
        warnings=warnings,
        # An `aiprof run` directory also holds telemetry counters and run metadata (optional keys).
        run_metadata=context.run_metadata,
        telemetry=context.telemetry,
        run_status=status if status is not None else UNSET,
        whole_run=whole if whole is not None else UNSET,
        cross_rank=run.cross_rank if run.cross_rank is not None else UNSET,
        health=_health(run, context),
    )


def _health(run: RunAnalysis, context: RunContext) -> Health | UnsetType:
    """The run's trace health: the diagnosis' (with the findings it changed), else built from the ranks' facts;
    a run directory's whole-run telemetry that shows a shared machine says so when the steps' did not."""
    from aiprof.analysis.health import clock_offsets, run_health, shared_item, with_item
    from aiprof.report.runcontext import shared_cores

    facts = [r.health for r in run.ranks if r.health is not None]
    if run.health is None and not facts:
        return UNSET
    health = run.health if run.health is not None else run_health(facts, clock_offsets(run.cross_rank))
    cores = shared_cores(context.telemetry, context.run_metadata)
    found = health.item("shared_machine")
    if cores is not None and (found is None or found.status == "ok"):
        health = with_item(health, shared_item(cores, "aiprof run telemetry over the whole run"))
    return health


def _whole_run(found: RunDir | None, ranks: list[RankReport]) -> WholeRun | None:
    """Every step of the run from its run directory's data-loader tables (analysis.wholerun), with the
    recorded steps' place in it; None for bare traces or a run directory without those tables."""
    from aiprof.analysis.wholerun import whole_run_of

    if found is None:
        return None
    return whole_run_of(found.path, {s.number for r in ranks for s in r.steps} | {s.number for r in ranks for s in r.incomplete_steps})


def _run_status(meta: RunMeta | None, ranks: list[RankReport]) -> RunStatus | None:
    """The banner's facts: how the run ended (``meta.json``) and how many recorded steps are complete (the
    rank with the fewest complete steps speaks for the run)."""
    from aiprof.report.runstatus import run_status

    complete = min((r.totals.steps for r in ranks), default=0)
    incomplete = max((len(r.incomplete_steps) for r in ranks), default=0)
    return run_status(
        meta,
        complete_steps=complete,
        incomplete_steps=incomplete,
        partial=any(r.coverage.partial for r in ranks),
        cut_off=any(bool(r.coverage.cut_off) for r in ranks),
    )


def _step(s: StepAccount) -> Step:
    return Step(
        name=s.name,
        number=s.number,
        start_ns=s.start_ns,
        duration_ns=s.duration_ns,
        breakdown_ns=dict(s.breakdown_ns),
        idle_causes_ns=dict(s.idle_causes_ns),
    )


def _rank(r: RankAnalysis) -> RankReport:
    primary = r.primary
    unknown = set(r.sections) - set(SECTIONS)
    if unknown:  # a new section is a new typed field of RankReport (report/model.py), not a free key
        raise ValueError(f"the report has no field for the section(s) {sorted(unknown)}")
    return RankReport(
        rank=r.rank,
        rank_source=r.rank_source,
        path=str(r.path),
        event_count=r.event_count,
        distributed=r.distributed,
        trace_metadata=r.metadata,
        device_properties=r.devices_info,
        primary_device=primary.device,
        devices=[
            Device(device=d.device, index=d.device_index, kind=d.kind, name=d.name,
                   steps=[_step(s) for s in d.steps], totals=d.totals)
            for d in r.devices
        ],
        step_source=r.step_source,
        steps=[_step(s) for s in primary.steps],
        totals=primary.totals,
        notes=list(r.notes),
        # A partial trace: the steps left out of the numbers above, and the span the device record covers.
        incomplete_steps=[_incomplete(s) for s in r.incomplete_steps],
        coverage=_coverage(r.coverage) if r.coverage is not None else Coverage(partial=False),
        memory=_unset_if_none(r.diagnosis.memory if r.diagnosis is not None else None),
        stacks=_unset_if_none(r.diagnosis.stacks if r.diagnosis is not None else None),
        modules=_unset_if_none(r.diagnosis.modules if r.diagnosis is not None else None),
        kernels=_section(r, "kernels", KernelStats),
        ops=_section(r, "ops", OpStats),
        communication=_section(r, "communication", CommunicationSection),
        compat=_section(r, "compat", Compat),
        roofline=_section(r, "roofline", RooflineSection),
        timeline_overview=_section(r, "timeline_overview", TimelineOverview),
        graph_capture=_section(r, "graph_capture", GraphCaptureSection),
        compile=_section(r, "compile", CompileReport),
        mfu=_section(r, "mfu", MfuReport),
        attention=_section(r, "attention", AttentionReport),
        inference=_with_budget(_section(r, "inference", InferenceReport),
                               r.diagnosis.memory_budget if r.diagnosis is not None else None),
    )


def _section(r: RankAnalysis, key: str, cls: type[T]) -> T | UnsetType:
    """The rank's section ``key`` (``analysis.run.DEFAULT_SECTIONS``), UNSET when it was not computed; a value
    of another type is a section function that returns the wrong thing, said at once."""
    value = r.sections.get(key)
    if value is None:
        return UNSET
    if not isinstance(value, cls):
        raise TypeError(f"the {key!r} section is a {type(value).__name__}, not a {cls.__name__}")
    return value


def _incomplete(s: AnalysedIncompleteStep) -> IncompleteStep:
    """A step of a partial trace left out of every number, as the report lists it (its duration, why in words)."""
    return IncompleteStep(
        name=s.name, number=s.number, start_ns=s.start_ns, duration_ns=s.end_ns - s.start_ns, reason=s.reason,
        detail=s.detail, launches=s.launches, launches_recorded=s.launches_recorded, cpu_ops=s.cpu_ops,
    )


def _coverage(c: AnalysedCoverage) -> Coverage:
    """The span the device record covers and whether the trace is partial, with the steps counted."""
    return Coverage(
        partial=c.partial, cut_off=c.cut_off, device_start_ns=c.device_start_ns, device_end_ns=c.device_end_ns,
        clipped_ns=c.clipped_ns, complete_steps=len(c.complete), incomplete_steps=len(c.incomplete),
    )


def _with_budget(inference: InferenceReport | UnsetType, budget: MemoryBudget | None) -> InferenceReport | UnsetType:
    """The inference section holding the diagnosis' memory budget (when it computed one)."""
    if budget is None or isinstance(inference, UnsetType) or not inference.detected:
        return inference
    return msgspec.structs.replace(inference, memory_budget=budget)


def _unset_if_none(value: T | None) -> T | UnsetType:
    """A section the diagnosis computed while the rank's trace was loaded (``RankDiagnosis``), or UNSET."""
    return UNSET if value is None else value


def _summary(ranks: list[RankReport], failed: list[FailedRank] | None = None) -> Summary:
    """Run-level facts: the median step over ranks and the slowest rank (the one others wait for), and the
    rank files that failed (absent when none did)."""
    if not ranks:
        return Summary()
    slowest = max(ranks, key=lambda r: r.totals.median_step_ns)
    partial, left_out, note = _partial(ranks)
    capture_note = _capture_note(ranks)
    return Summary(
        rank_count=len(ranks),
        step_count=ranks[0].totals.steps,
        step_source=ranks[0].step_source,
        median_step_ns=int(statistics.median([r.totals.median_step_ns for r in ranks])),
        gpu_utilization=statistics.fmean([r.totals.gpu_utilization for r in ranks]),
        slowest_rank=slowest.rank,
        device_kind="gpu" if any(r.primary_device != "cpu" for r in ranks) else "cpu",
        partial=partial,
        incomplete_step_count=left_out,
        partial_note=note,
        trace_kind="graph_capture" if capture_note is not None else UNSET,
        capture_note=capture_note if capture_note is not None else UNSET,
        failed_rank_count=len(failed) if failed else UNSET,
        failed_ranks=list(failed) if failed else UNSET,
    )


def _capture_note(ranks: list[RankReport]) -> str | None:
    """The summary's ``capture_note`` (its ``trace_kind`` is then ``graph_capture``): a capture when every
    rank's trace is one (the first rank's note speaks for them); None otherwise."""
    notes = [None if isinstance(r.graph_capture, UnsetType) else r.graph_capture.note for r in ranks]
    if not notes or not all(notes):
        return None
    prefix = "" if len(ranks) == 1 else f"Every rank ({len(ranks)}): "
    return prefix + str(notes[0])


def _partial(ranks: list[RankReport]) -> tuple[bool, int, str | None]:
    """Whether the run is partial (a trace cut off mid-write, or steps without their device side), how many
    steps were left out, and one sentence that says so (None when the run is whole)."""
    partial = [r for r in ranks if r.coverage.partial]
    left_out = sum(len(r.incomplete_steps) for r in ranks)
    if not partial:
        return False, left_out, None
    cut = [r for r in partial if r.coverage.cut_off]
    who = "" if len(ranks) == 1 else f" on rank(s) {', '.join(str(r.rank) for r in partial[:8])}"
    why = "the trace is cut off mid-write" if cut else "the trace lacks the device side of some steps"
    if left_out:
        analysed = sum(r.totals.steps for r in partial)
        what = (
            f"{left_out} of {left_out + analysed} steps{who} have no recorded device activity and are left out "
            "of every number and finding"
        )
    elif any(r.coverage.clipped_ns for r in partial):
        what = f"the accounting{who} stops where the device record ends"
    else:
        what = f"every step{who} is covered by the device record, but events after the cut are missing"
    return True, left_out, f"Partial run: {why}; {what}."


def mean_per_step(totals: Totals, key: str) -> dict[str, float]:
    """Per-step means of a totals' ``breakdown_ns`` or ``idle_causes_ns``."""
    steps = max(totals.steps, 1)
    values = totals.breakdown_ns if key == "breakdown_ns" else totals.idle_causes_ns
    names = BUCKETS if key == "breakdown_ns" else IDLE_CAUSES
    return {name: values.get(name, 0) / steps for name in names}
