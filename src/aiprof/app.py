"""The composition root: what every verb runs, in one place.

``analyze(paths, options) -> Report`` loads and analyses the traces, diagnoses the run (``pipeline``) and
builds the report; ``compare`` does it for two runs (or reads their JSON reports) and compares them;
``export`` writes the merged trace for Perfetto; ``roofline`` computes one rank's roofline; ``render`` /
``write`` turn any of these into text in a format and put it on stdout or into a file (atomically).
The CLI verbs (``cli/``) parse arguments and call these; none re-implements a step.

Every call into ``aiprof.report`` is in the small functions at the end of this module (``_build_report``,
``_render_report``, ``_compare_reports``…): the report layer's types can change behind them. Heavy
modules are imported inside the functions that need them, so ``import aiprof.app`` is cheap.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from aiprof.errors import AiprofError

if TYPE_CHECKING:
    from aiprof.analysis.run import RunAnalysis
    from aiprof.analysis.whatif.run import EditSpec as WhatIfEdit
    from aiprof.analysis.whatif.results import WhatIf as WhatIfResult
    from aiprof.memory.report import MemoryReport
    from aiprof.pipeline import MemoryMode
    from aiprof.report.compare import Comparison
    from aiprof.report.model import Report
    from aiprof.report.timeline import TimelineInput
    from aiprof.roofline.analysis import RooflineResult
    from aiprof.roofline.section import MeasuredPointRecord
    from aiprof.rules.finding import Finding
    from aiprof.rules.options import RuleOptions
    from aiprof.trace.model import Trace
    from aiprof.trace.readers.base import ReaderOptions
    from aiprof.trace.readers.ncu import MeasuredPoint, NcuResult
    from aiprof.analysis.failures import FailureCallback
    from aiprof.trace.runset import ProgressCallback

PathArg = str | os.PathLike[str]
Warn = Callable[[str], None]


@dataclass(frozen=True)
class AnalyzeOptions:
    """How to analyse: worker processes (None: one per core, as needed), only these ranks (empty: all),
    rule thresholds (None: the defaults), a loading-progress callback, and where warnings about the
    inputs go (salvaged files, skipped files, partial traces; None: dropped)."""

    workers: int | None = None
    ranks: tuple[int, ...] = ()
    rules: RuleOptions | None = None
    progress: ProgressCallback | None = None
    on_warning: Warn | None = None
    # The memory section (and findings): "auto" from allocator dumps of `aiprof run --memory`, "all" also from
    # a trace's [memory] events (read a second time: `analyze --memory`), "off" none (docs/memory.md).
    memory: MemoryMode = "auto"
    # The HTML report's interactive timeline: each rank's events, gathered while its trace is in memory
    # (analyze_with_timeline); off for every other output, which never pays for it.
    timeline: bool = False
    # Nsight Compute results of the same program (ncu --csv export or .ncu-rep): their measured per-kernel
    # points join the roofline section of the first rank shown (docs/nsight.md). None: none.
    ncu: Path | None = None
    # Where the ranks are analysed: "local" (this machine's process pool), "dask" (the cluster at
    # $DASK_SCHEDULER_ADDRESS, else a LocalCluster for the run) or "dask://host:port" (aiprof.trace.executors).
    executor: str = "local"
    # The rank cache's folder (aiprof.analysis.rankcache): a rerun skips the files already analysed. None: off.
    cache_dir: Path | None = None
    # Told of each rank file of a folder that fails, when it does (file, why): the progress bar's failed count
    # (aiprof.analysis.failures). The report's summary lists them whatever this is.
    on_failed: FailureCallback | None = None
    # What every read of a trace is told: Nsight Systems' step range, the load limits (--max-trace-mb,
    # --max-events; reader_options builds it). None: the defaults. Carried with each file's job to its worker.
    reader: ReaderOptions | None = None


@dataclass(frozen=True)
class RenderOptions:
    """Terminal width (None: the terminal's, at most 100, or ``$COLUMNS`` else 80 when not a terminal), whether the text
    goes to a terminal (colour), and how many rows a roofline table shows."""

    width: int | None = None
    is_tty: bool = False
    top: int = 15
    timeline: TimelineInput | None = None  # an HTML report's interactive timeline (analyze_with_timeline)
    rules: RuleOptions | None = None  # a memory report's findings: the memory rules' thresholds (``mem_*``)


@dataclass(frozen=True)
class MemoryOptions:
    """The device's memory in bytes when the input does not say (a snapshot does not): enables the
    capacity findings. None: what the input says."""

    device_memory_bytes: int | None = None


@dataclass(frozen=True)
class RooflineOptions:
    """Which rank of a folder (None: the first), a measured-peaks file, a device whose spec peaks to use."""

    rank: int | None = None
    peaks_file: Path | None = None
    device: str | None = None
    ncu: Path | None = None  # Nsight Compute results of the same program: measured points (docs/nsight.md)


# ---------------------------------------------------------------------------------------------------
# analyse → diagnose → report
# ---------------------------------------------------------------------------------------------------
def analyze(paths: Sequence[PathArg], options: AnalyzeOptions | None = None) -> Report:
    """Analyse every trace behind ``paths`` (files, folders of ranks, run directories), diagnose the run
    and build its report."""
    return _analyze(paths, options or AnalyzeOptions())[0]


def analyze_with_timeline(
    paths: Sequence[PathArg], options: AnalyzeOptions | None = None
) -> tuple[Report, TimelineInput | None]:
    """:func:`analyze`, plus the input of the HTML report's interactive timeline (pass it to ``write`` /
    ``render`` in ``RenderOptions.timeline``); None when no rank has events to show."""
    opts = dataclasses.replace(options or AnalyzeOptions(), timeline=True)
    return _analyze(paths, opts)


def _analyze(paths: Sequence[PathArg], opts: AnalyzeOptions) -> tuple[Report, TimelineInput | None]:
    reader = _reader(opts)
    ncu = _read_ncu(opts.ncu, reader) if opts.ncu is not None else None  # a bad file fails before the analysis
    stop_primed = _start_loading(paths, reader)
    try:
        run, findings = _analyze_and_diagnose(paths, opts)
    finally:
        stop_primed()
    for warning in run.warnings:
        if opts.on_warning is not None:
            opts.on_warning(warning)
    if opts.ranks:
        findings = _only_ranks(run, findings, opts.ranks)
    report = _build_report(run, findings)
    if ncu is not None and opts.ncu is not None:
        _add_measured(report, ncu, opts.ncu, reader)
    return report, (_timeline_input(run) if opts.timeline else None)


def _reader(opts: AnalyzeOptions) -> ReaderOptions:
    from aiprof.trace.readers.base import ReaderOptions

    return opts.reader or ReaderOptions()


def reader_options(step_range: str | None = None, max_trace_mb: float | None = None,
                   max_events: int | None = None) -> ReaderOptions:
    """What the readers are told (``AnalyzeOptions.reader``): NVTX ranges matching ``step_range`` are the steps
    of an Nsight Systems report; how much trace text (``--max-trace-mb``, MiB) and how many events
    (``--max-events``) one file may hold (None or 0: the defaults). A bad number is a one-line error."""
    from aiprof.trace.limits import LoadLimits
    from aiprof.trace.readers.base import ReaderOptions

    return ReaderOptions(step_range=step_range or None, limits=LoadLimits.from_options(max_trace_mb, max_events))


def _read_ncu(path: Path, reader: ReaderOptions) -> list[NcuResult]:
    from aiprof.trace.readers.ncu import read_ncu

    return read_ncu(Path(path), reader.limits)


def _add_measured(report: Report, results: list[NcuResult], source: Path, reader: ReaderOptions) -> None:
    """Nsight Compute's measured points (:func:`aiprof.trace.readers.ncu.measured_points`) under
    ``measured`` in the roofline section of the report's first rank (``--rank`` picks it), matched to that
    rank's kernels by name, launch order, grid and block; the rank's trace is read again for that (only
    with ``--ncu``)."""
    import msgspec

    from aiprof.roofline.section import RooflineSection
    from aiprof.trace.readers.ncu import measured_points

    if not report.ranks:
        return
    rank = report.ranks[0]
    points = measured_points(_rank_trace(rank.path, rank.rank, reader), results)
    section = rank.roofline if isinstance(rank.roofline, RooflineSection) else RooflineSection()
    rank.roofline = msgspec.structs.replace(
        section,
        measured=measured_records(points),
        measured_source=f"Nsight Compute ({Path(source).name})",
        basis={"rows": "estimated from shapes", "measured": "measured (ncu)"},
    )


def _rank_trace(path: PathArg, rank: int | None, reader: ReaderOptions | None = None) -> Trace:
    """One rank's trace from ``path`` (a file, a folder, a multi-process report): ``rank``, else the first."""
    from aiprof.trace.model import RunSet
    from aiprof.trace.runset import load_paths

    loaded = load_paths([path], options=reader)
    if not isinstance(loaded, RunSet):
        return loaded
    if rank is None:
        return loaded.traces[0]
    try:
        return loaded.rank(rank)
    except KeyError:
        raise AiprofError(f"no rank {rank} in {path}: ranks are {loaded.ranks}") from None


def _analyze_and_diagnose(paths: Sequence[PathArg], opts: AnalyzeOptions) -> tuple[RunAnalysis, list[Finding]]:
    from aiprof.pipeline import analyze_and_diagnose

    from aiprof.trace.executors import executor_for

    budget = _timeline_budget(paths) if opts.timeline else 0
    return analyze_and_diagnose(list(paths), workers=opts.workers, progress=opts.progress, options=opts.rules,
                                memory=opts.memory, timeline=budget, executor=executor_for(opts.executor),
                                cache_dir=opts.cache_dir, on_failed=opts.on_failed, reader=opts.reader)


def _only_ranks(run: RunAnalysis, findings: list[Finding], ranks: tuple[int, ...]) -> list[Finding]:
    """Keep the wanted ranks in ``run`` (in place) and the findings about them."""
    wanted = set(ranks)
    present = [r.rank for r in run.ranks]
    run.ranks = [r for r in run.ranks if r.rank in wanted]
    if not run.ranks:
        shown = ", ".join(str(r) for r in present[:16]) + (f" … ({len(present)} ranks)" if len(present) > 16 else "")
        raise AiprofError(f"no rank {sorted(wanted)} in these traces; ranks present: {shown}")
    return [f for f in findings if not f.ranks or set(f.ranks) & wanted]


def _start_loading(paths: Sequence[PathArg], reader: ReaderOptions) -> Callable[[], None]:
    """One trace file: its decode helpers start on it now, while this process imports the analyses
    (about 30 ms of imports the second core would otherwise sit out). Returns what stops helpers that
    no load took over (called however the analysis ends)."""
    if len(paths) != 1 or not os.path.isfile(paths[0]):
        return lambda: None
    from aiprof.trace.readers import reader_for

    if reader_for(Path(paths[0])).name != "kineto":  # only the JSON loader has helpers to start early
        return lambda: None
    from aiprof.trace.kineto.stream import discard_primed, prime

    try:
        prime(Path(paths[0]), limits=reader.limits)
        import aiprof.analysis.compat  # noqa: F401 - imported now rather than during the analysis
        import aiprof.analysis.kernels  # noqa: F401
        import aiprof.analysis.ops  # noqa: F401
        import aiprof.roofline.analysis  # noqa: F401
        import aiprof.rules.registry  # noqa: F401
    except BaseException:  # Ctrl-C during the imports: the helpers stop with this process
        discard_primed()
        raise
    return discard_primed


# ---------------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------------
def report_of(source: PathArg | Report, options: AnalyzeOptions | None = None) -> Report:
    """A report for one side of a comparison: a report as is, an aiprof JSON report file read and
    checked, or traces / a run directory analysed."""
    if not isinstance(source, (str, os.PathLike)):
        return source
    path = Path(source)
    if not path.exists():
        raise AiprofError(f"{source}: no such file or folder")
    if _is_report_file(path):
        return _read_report(path)
    return analyze([source], options)


def compare(
    before: PathArg | Report, after: PathArg | Report, options: AnalyzeOptions | None = None,
    more_pairs: Sequence[tuple[PathArg | Report, PathArg | Report]] = (),
) -> Comparison:
    """BEFORE against AFTER, over every step of both runs (whole-run step times when both are run
    directories that have them, else the recorded steps), with the median change's confidence
    interval. ``more_pairs``: further (BEFORE, AFTER) runs of the same two programs; with any, the
    step-time change and its interval are over the pairs, so the noise between runs is in it (the
    rest of the comparison is the first pair's). A side whose median step is 0 (nothing measured) is
    refused: there is no baseline to give a percentage against, and "+0.0 %" would pass any CI gate."""
    given = [("BEFORE", before), ("AFTER", after)]
    given += [(f"{name} of pair {i}", side) for i, pair in enumerate(more_pairs, start=2)
              for name, side in zip(("BEFORE", "AFTER"), pair)]
    reports = [(name, side, report_of(side, options)) for name, side in given]
    sides = [(name, report) for name, _, report in reports[:2]]
    extra = [(name, report) for name, _, report in reports[2:]]
    for name, side, report in reports:
        if _median_step_ns(report) <= 0:  # named by the file the user gave (a report's own sources are its inputs')
            label = str(side) if isinstance(side, (str, os.PathLike)) else _sources_text(report)
            raise AiprofError(
                f"{name} ({label}): its median step is 0 ns (no step was measured), "
                "so there is no baseline to compare; check that the trace holds complete steps"
            )
    try:
        return _compare_reports(sides[0][1], sides[1][1], [(extra[i][1], extra[i + 1][1]) for i in range(0, len(extra), 2)])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        files = [str(side) for side in (before, after) if isinstance(side, (str, os.PathLike)) and _is_report_file(Path(side))]
        if not files:
            raise  # two analyses that do not compare: a bug, not bad input
        raise AiprofError(
            f"{' or '.join(files)}: not a valid aiprof report ({type(err).__name__}: {err}); "
            "write it again with `aiprof analyze -o X.json`"
        ) from None


def slower_than(comparison: Comparison, limit_pct: float) -> str | None:
    """The CI gate: why AFTER fails it, or None when it passes. It fails when the median step's change
    over every step (``step_time_change_pct``) is beyond ``limit_pct`` percent AND significant (its
    confidence interval excludes 0): noise between two runs of one program never fails it. With too
    few steps to tell (no interval) it falls back to the point estimate, and says so. A comparison
    written before these statistics is gated on its recorded median step. A change that cannot be
    computed fails."""
    pct = _gate_pct(comparison)
    if not math.isfinite(pct):
        return "the median step change cannot be computed (no baseline)"
    if pct <= limit_pct:
        return None
    ci = getattr(comparison, "step_time_ci_pct", None)
    used = getattr(comparison, "steps_used", None)
    head = f"AFTER's median step is {pct:.1f}% slower than BEFORE's (limit {limit_pct:g}%)"
    if used is None:
        return head
    steps = f"{used.before} + {used.after} {used.source} steps"
    pairs = int(getattr(comparison, "pairs", 1) or 1)
    if pairs > 1:
        steps = f"{pairs} pairs of runs, {used.source} steps"
    if ci is None:
        return f"{head}: point estimate only, too few steps to tell a change from noise ({steps})"
    if not comparison.significant:
        return None
    one_pair = ("; one pair of runs: the noise between two runs of one program is not in this interval "
                "(confirm with more pairs: --pair BEFORE AFTER)") if pairs == 1 else ""
    return f"{head}: 95% CI {ci[0]:+.1f} … {ci[1]:+.1f}%, significant ({steps}){one_pair}"


GateOutcome = Literal["pass", "fail", "inconclusive"]


def gate(comparison: Comparison, limit_pct: float) -> tuple[GateOutcome, str | None]:
    """The CI gate's outcome and its message (None when it passes in silence). "inconclusive" (exit 4 in
    ``aiprof compare``) when either run shared the machine with other processes (their load, not the
    change, may have moved the step: checked first, so it neither fails nor passes on it), or when the
    change is beyond ``limit_pct`` but not significant (within the steps' noise); "fail" as
    :func:`slower_than`; else "pass"."""
    shared = list(getattr(comparison, "shared_machine", None) or [])
    if shared:
        sides = " and ".join(s.upper() for s in shared)
        return "inconclusive", (
            f"inconclusive: the machine was shared while {sides} ran (other processes' load is in the step "
            "times, so the gate can neither pass nor fail on them); compare runs made on a quiet machine"
        )
    failed = slower_than(comparison, limit_pct)
    if failed is not None:
        return "fail", failed
    note = gate_note(comparison, limit_pct)
    return ("inconclusive", note) if note is not None else ("pass", None)


def gate_note(comparison: Comparison, limit_pct: float) -> str | None:
    """Why a change beyond ``limit_pct`` did not fail the gate (not significant: inconclusive), or None."""
    pct = _gate_pct(comparison)
    ci = getattr(comparison, "step_time_ci_pct", None)
    if not math.isfinite(pct) or pct <= limit_pct or ci is None or comparison.significant:
        return None
    return (
        f"AFTER's median step is {pct:.1f}% slower, beyond the limit of {limit_pct:g}%, but within noise "
        f"(95% CI {ci[0]:+.1f} … {ci[1]:+.1f}%): inconclusive; record more steps, or pairs of runs (--pair)"
    )


def _gate_pct(comparison: Comparison) -> float:
    """The change the gate judges: over every step; a comparison without it (written before these
    statistics): its recorded median step's."""
    pct = getattr(comparison, "step_time_change_pct", None)
    return float(pct) if pct is not None else _step_delta_pct(comparison)


# ---------------------------------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------------------------------
def export(paths: Sequence[PathArg], output: Path, options: AnalyzeOptions | None = None, *,
           force: bool = False) -> Path:
    """Write the merged trace of ``paths`` (every rank's events, telemetry counters, aiprof's steps and
    findings) to ``output`` (``.json``, or ``.json.gz`` compressed). The inputs' top-level fields are
    copied from an allow-list only (``trace_header``): free-form blocks never leave the input."""
    name = output.name.lower()
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        raise AiprofError(f"{output.name}: the merged trace must end in .json or .json.gz")
    check_output(output, paths, force=force)
    report = analyze(paths, options)
    reader = _reader(options or AnalyzeOptions())
    write_file(output, _merged_trace_bytes(report, gz=name.endswith(".gz"), reader=reader), what="merged trace")
    return output


# Top-level fields of a Kineto trace that the merged trace keeps: scalars (versions, flags) and the
# device / distributed facts below, each filtered by key. Everything else (``metadata``, ``INFO``, user,
# host and job names, whatever a tool added) is left out: public traces carry tokens there.
_HEADER_SCALARS = (
    "schemaVersion", "displayTimeUnit", "baseTimeNanoseconds", "trace_id", "record_shapes", "profile_memory",
    "with_stack", "with_flops", "with_modules", "cupti_version", "cuda_runtime_version", "cuda_driver_version",
    "roctracer_version", "hip_runtime_version", "hip_driver_version",
)
_DEVICE_KEYS = frozenset((
    "id", "name", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor", "regsPerBlock", "regsPerMultiprocessor", "warpSize", "sharedMemPerBlock",
    "sharedMemPerMultiprocessor", "numSms", "sharedMemPerBlockOptin", "runtimeMajorVersion",
    "runtimeMinorVersion", "maxGridHeight", "maxGridWidth", "maxSharedMemoryPerMultiProcessor",
))
_DISTRIBUTED_KEYS = frozenset(("backend", "rank", "world_size", "pg_count", "nccl_version"))
_MAX_TEXT = 256
# A value that looks like an environment assignment or a credential, whatever key it sits under.
_SECRET_SHAPE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*=|\b(?:hf_|sk-|ghp_|gho_|github_pat_|xox[abp]-|AKIA|ASIA)[A-Za-z0-9_-]{6,}|://[^/\s]*@"
)


def _scalar(value: Any) -> Any:
    """``value`` when it is a plain number, boolean or short text without a secret's shape, else None."""
    if isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
        return value
    if isinstance(value, str) and len(value) <= _MAX_TEXT and not _SECRET_SHAPE.search(value):
        return value
    return None


def _known(mapping: Any, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        return {}
    return {k: v for k, v in ((k, _scalar(mapping[k])) for k in keys if k in mapping) if v is not None}


def trace_header(raw: dict[str, Any]) -> dict[str, Any]:
    """The allow-listed top-level fields of a raw trace (never its events or free-form blocks)."""
    out = {k: v for k, v in ((k, _scalar(raw[k])) for k in _HEADER_SCALARS if k in raw) if v is not None}
    devices = raw.get("deviceProperties")
    if isinstance(devices, list):
        out["deviceProperties"] = [_known(d, _DEVICE_KEYS) for d in devices if isinstance(d, dict)]
    distributed = _known(raw.get("distributedInfo"), _DISTRIBUTED_KEYS)
    if distributed:
        out["distributedInfo"] = distributed
    return out


def _safe_raw(raw: dict[str, Any]) -> dict[str, Any]:
    return {**trace_header(raw), "traceEvents": raw.get("traceEvents") or []}


# ---------------------------------------------------------------------------------------------------
# roofline
# ---------------------------------------------------------------------------------------------------
def roofline(path: PathArg, options: RooflineOptions | None = None) -> RooflineResult:
    """The roofline of one rank: FLOPs and bytes per op from shapes, against the device's peaks."""
    return roofline_measured(path, options)[0]


def roofline_measured(
    path: PathArg, options: RooflineOptions | None = None
) -> tuple[RooflineResult, list[MeasuredPoint] | None]:
    """The roofline, and with ``options.ncu`` the Nsight Compute measurements matched to its kernels."""
    from aiprof.roofline.analysis import roofline as compute
    from aiprof.roofline.peaks import load_measured, resolve, spec_for

    opts = options or RooflineOptions()
    trace = _rank_trace(path, opts.rank)
    measured = load_measured(opts.peaks_file, required=opts.peaks_file is not None)
    choice = None
    if opts.device:
        choice = resolve(opts.device, cpu=False, measured=measured)
        if spec_for(opts.device) is None and choice.peaks is None:
            raise AiprofError(f"unknown device {opts.device!r}: see docs/roofline.md for the names known")
    result = compute(trace, choice, measured=measured)
    if opts.ncu is None:
        return result, None
    from aiprof.trace.readers.ncu import measured_points, read_ncu

    return result, measured_points(trace, read_ncu(opts.ncu))


def write_roofline_json(result: RooflineResult, points: list[MeasuredPoint] | None, output: Path) -> None:
    """The roofline section as JSON, with the measured points under ``measured`` when there are some."""
    import json

    from aiprof.fsutil import JSON_GENERATOR

    import msgspec

    section = result.section()
    if points is not None:
        section = msgspec.structs.replace(section, measured=measured_records(points))
    text = json.dumps({"generator": JSON_GENERATOR, **msgspec.to_builtins(section)}, indent=1, allow_nan=False)
    write_file(output, text + "\n", what="roofline")


def measured_records(points: list[MeasuredPoint]) -> list[MeasuredPointRecord]:
    """Nsight Compute's measured points as the roofline section holds them (``RooflineSection.measured``)."""
    from aiprof.roofline.section import MeasuredPointRecord

    return [
        MeasuredPointRecord(
            kernel=p.kernel, row=p.row, op=p.op, duration_ns=p.duration_ns, flops=p.flops, dram_bytes=p.dram_bytes,
            sm_sol_pct=p.sm_sol_pct, memory_sol_pct=p.memory_sol_pct, achieved_flops_per_s=p.achieved_flops_per_s,
            achieved_bytes_per_s=p.achieved_bytes_per_s, flop_per_byte=p.intensity, est_flops=p.est_flops,
            est_bytes=p.est_bytes)
        for p in points
    ]


# ---------------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------------
def memory(path: PathArg, options: MemoryOptions | None = None) -> MemoryReport:
    """The memory report of an allocator snapshot, a trace with ``[memory]`` events, an
    ``export_memory_timeline`` file or a run directory (``aiprof memory``); render it with :func:`render`,
    which adds its findings (``rules.registry.memory_findings``)."""
    from aiprof.memory import analyze_memory, load_memory

    opts = options or MemoryOptions()
    size = opts.device_memory_bytes
    if size is not None and size <= 0:
        raise AiprofError(f"the device memory must be a positive number of bytes, not {size}")
    return analyze_memory(load_memory(Path(path)), size)


# ---------------------------------------------------------------------------------------------------
# render and write
# ---------------------------------------------------------------------------------------------------
def output_format(output: Path | None, explicit: str | None) -> str:
    """``--format`` when given, else from ``-o``'s extension, else terminal."""
    return _format_for(output, explicit)


def render(
    doc: Report | Comparison | RooflineResult | MemoryReport, fmt: str, options: RenderOptions | None = None
) -> str:
    """A report, a comparison, a roofline or a memory report as text in ``fmt`` (terminal, json, md, html)."""
    opts = options or RenderOptions()
    mem = _as_memory(doc)
    if mem is not None:
        return _render_memory(mem, fmt, opts.rules)
    width = opts.width
    if width is None:
        width = min(_terminal_columns(), 100) if opts.is_tty else _columns_env(80)
    width = max(width, 60)
    roof = _as_roofline(doc)
    if roof is not None:
        return _render_roofline(roof, fmt, width, opts)
    if fmt == "html" and opts.timeline is not None:
        report = _as_report(doc)
        if report is not None:
            return _render_html(report, opts.timeline)
    from aiprof.report.render import render as render_document

    return render_document(cast("Report | Comparison", doc), fmt, width=width, is_tty=opts.is_tty)


def write(
    doc: Report | Comparison | RooflineResult | MemoryReport,
    output: Path | None,
    fmt: str,
    options: RenderOptions | None = None,
    *,
    what: str = "report",
) -> None:
    """Render ``doc`` and write it to ``output`` atomically, or to stdout when ``output`` is None. A
    Markdown or terminal file is marked as aiprof's own (:func:`aiprof.fsutil.mark_text`), so that running
    the command again may replace it."""
    text = render(doc, fmt, options)
    if output is None:
        sys.stdout.write(text)
    else:
        from aiprof.fsutil import mark_text

        write_file(output, mark_text(text, fmt, what), what=what)


def write_chart(result: RooflineResult, output: Path, *, title: str = "Roofline") -> None:
    """The roofline chart: SVG written atomically, or PNG (needs cairosvg) when ``output`` ends in .png."""
    from aiprof.report.roofline_chart import render_svg
    from aiprof.report.roofline_chart import write_chart as write_png

    if output.suffix.lower() == ".png":
        write_png(result, output, title=title)
    else:
        write_file(output, render_svg(result, title=title), what="chart")


def check_writable(output: Path) -> None:
    """Fail before the work when ``output`` cannot be written (no folder, read-only, a folder)."""
    from aiprof.fsutil import writable_folder_problem

    problem = writable_folder_problem(output)
    if problem is not None:
        raise AiprofError(f"{problem}; choose another -o path")


def check_output(output: Path, inputs: Sequence[PathArg] = (), *, force: bool = False) -> None:
    """Fail before the work when a command reading ``inputs`` must not write ``output``: the one rule of
    every verb's ``-o`` (:func:`aiprof.fsutil.output_problem`: never an input, never through a symbolic
    link, an existing file that is not an aiprof output only with ``force``)."""
    from aiprof.fsutil import output_problem

    problem = output_problem(output, [Path(p) for p in inputs], force=force)
    if problem is not None:
        raise AiprofError(f"{problem}; choose another -o path")


def write_file(output: Path, data: bytes | str, *, what: str = "report") -> None:
    """Write atomically (a fresh temporary file beside ``output``, renamed over it): a crash never leaves
    half a file, and no fixed temporary name can be redirected by a planted symlink. A character device or
    a named pipe (``-o /dev/null``) is written in place (:func:`aiprof.fsutil.write_output`)."""
    from aiprof.fsutil import write_output

    try:
        write_output(output, data)
    except OSError as err:
        raise AiprofError(f"{output}: cannot write the {what} ({err.strerror or err})") from None


def _as_roofline(doc: object) -> RooflineResult | None:
    """``doc`` if it is a roofline result (its module is loaded whenever one exists: no import to tell)."""
    module = sys.modules.get("aiprof.roofline.analysis")
    return doc if module is not None and isinstance(doc, module.RooflineResult) else None


def _as_memory(doc: object) -> MemoryReport | None:
    """``doc`` if it is a memory report (its module is loaded whenever one exists)."""
    module = sys.modules.get("aiprof.memory.report")
    return doc if module is not None and isinstance(doc, module.MemoryReport) else None


def _render_memory(report: MemoryReport, fmt: str, rules: RuleOptions | None = None) -> str:
    """``aiprof memory``'s output: the report and its findings (report/memory_render.py, escaped per format), the
    memory rules run with ``rules`` (the defaults when None)."""
    from aiprof.report.memory_render import RENDERERS, to_json
    from aiprof.rules.options import DEFAULT_OPTIONS
    from aiprof.rules.registry import memory_findings

    findings = memory_findings(report, rules or DEFAULT_OPTIONS)
    if fmt == "json":
        return to_json(report, findings).decode("utf-8")
    if fmt not in RENDERERS:
        raise AiprofError(f"unknown format {fmt!r} for a memory report; use terminal, json, md or html")
    return RENDERERS[fmt](report, findings)


def _columns_env(default: int) -> int:
    """``$COLUMNS`` when it is a width (a pipe has no terminal to ask; the user may still say how wide
    the text should be), else ``default``."""
    text = os.environ.get("COLUMNS", "")
    return min(int(text), 1000) if text.isdigit() and int(text) > 0 else default


def _terminal_columns() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 80


# ---------------------------------------------------------------------------------------------------
# The report layer, called from here only
# ---------------------------------------------------------------------------------------------------
def _format_for(output: Path | None, explicit: str | None) -> str:
    from aiprof.report import format_for

    return format_for(output, explicit)


def _build_report(run: RunAnalysis, findings: list[Finding]) -> Report:
    from aiprof.report.document import build_document

    return build_document(run, findings)


def _timeline_budget(paths: Sequence[PathArg]) -> int:
    from aiprof.analysis.explore import rank_budget
    from aiprof.trace.runset import find_trace_files

    return rank_budget(sum(len(find_trace_files(Path(p))) for p in paths))


def _timeline_input(run: RunAnalysis) -> TimelineInput | None:
    from aiprof.report.timeline import timeline_input

    return timeline_input([r.diagnosis.timeline if r.diagnosis is not None else None for r in run.ranks], run.run_dir)


def _as_report(doc: object) -> Report | None:
    from aiprof.report.model import Report

    return doc if isinstance(doc, Report) else None


def _render_html(report: Report, timeline: TimelineInput) -> str:
    from aiprof.report.html_report import HtmlRenderer

    return HtmlRenderer(timeline=timeline).render(report)


def render_summary(report: Report) -> str:
    """The few lines ``aiprof run`` prints at the end: the headline numbers and the top findings."""
    from aiprof.report.terminal import render_summary as summary

    return str(summary(report) or "")


def _compare_reports(before: Report, after: Report, more_pairs: Sequence[tuple[Report, Report]] = ()) -> Comparison:
    """The comparison over every step: whole-run step times from both run directories when both have
    them, else the recorded steps (``report.compare_steps``); each further pair likewise."""
    from aiprof.report.compare import compare_reports
    from aiprof.report.compare_steps import step_samples

    return compare_reports(before, after, steps=step_samples(before, after),
                           more_pairs=[step_samples(b, a) for b, a in more_pairs])


def warnings_of(doc: Report | Comparison) -> list[str]:
    """The warnings a report or a comparison carries (a comparison's are labelled by side)."""
    return [str(w) for w in doc.warnings]


def _step_delta_pct(comparison: Comparison) -> float:
    return float(comparison.step_time_ns.delta_pct)


def _median_step_ns(report: Report) -> float:
    return float(report.summary.median_step_ns)


def _sources_text(report: Report) -> str:
    sources = [str(s) for s in report.sources]
    return ", ".join(sources[:3]) + (" …" if len(sources) > 3 else "") if sources else "no source"


def _is_report_file(path: Path) -> bool:
    from aiprof.report.compare import is_report_file

    return is_report_file(path)


def _read_report(path: Path) -> Report:
    """An aiprof JSON report, with the fields a comparison reads checked (a report is input too)."""
    from aiprof.report.compare import load_report

    try:
        report = load_report(path)
    except RecursionError:
        raise AiprofError(f"{path}: JSON nested deeper than the decoder allows; not an aiprof report") from None
    problem = _report_problem(report)
    if problem is not None:
        raise AiprofError(f"{path}: not a valid aiprof report ({problem}); write it again with `aiprof analyze -o X.json`")
    return report


def _number(value: float, low: float = 0.0, high: float = math.inf) -> bool:
    return math.isfinite(value) and low <= value <= high


def _report_problem(report: Report) -> str | None:
    """What is wrong with the numbers a comparison reads from a decoded report (its types are checked
    by the decoder; a JSON number too large for a double decodes as infinity), or None."""
    if not _number(report.summary.gpu_utilization, 0.0, 1.0):
        return "summary.gpu_utilization is not a fraction from 0 to 1"
    for r in report.ranks:
        if not _number(r.totals.gpu_utilization, 0.0, 1.0):
            return f"rank {r.rank}: totals.gpu_utilization is not a fraction from 0 to 1"
        for key, values in (("breakdown_ns", r.totals.breakdown_ns), ("idle_causes_ns", r.totals.idle_causes_ns)):
            if any(v < 0 for v in values.values()):
                return f"rank {r.rank}: totals.{key} has a negative number"
    for f in report.findings:
        if not (_number(f.share_of_step) and f.est_saving_ns_per_step >= 0):
            return f"finding {f.id}: its saving is not a finite number >= 0"
    return None


def _index_in_file(report: Report) -> list[int]:
    """Each rank's place among the ranks of its file (an Nsight report of an MPI job holds several)."""
    seen: dict[str, int] = {}
    out = []
    for r in report.ranks:
        out.append(seen.get(r.path, 0))
        seen[r.path] = out[-1] + 1
    return out


def _merged_trace_bytes(report: Report, gz: bool, reader: ReaderOptions | None = None) -> bytes:
    from aiprof.report.perfetto import encode, merged_trace, read_raw_trace

    try:
        raws = [_safe_raw(read_raw_trace(Path(r.path), i, reader)) for r, i in zip(report.ranks, _index_in_file(report))]
    except (OSError, ValueError) as err:
        raise AiprofError(f"cannot re-read a trace for the export: {err}") from None
    merged = merged_trace(report, raws)
    kept = {**trace_header(merged), "baseTimeNanoseconds": merged.get("baseTimeNanoseconds", 0)}
    out = {**kept, "aiprof": merged.get("aiprof"), "traceEvents": merged["traceEvents"]}  # its generator first
    return encode(out, gz=gz)


def _render_roofline(result: RooflineResult, fmt: str, width: int, opts: RenderOptions) -> str:
    from aiprof.report.roofline_formats import roofline_html, roofline_json, roofline_markdown
    from aiprof.report.roofline_terminal import render_plain, render_rich

    if fmt == "json":
        return roofline_json(result)
    if fmt == "md":
        return roofline_markdown(result, opts.top)
    if fmt == "html":
        return roofline_html(result, opts.top)
    return render_rich(result, opts.top, width=width) if opts.is_tty else render_plain(result, opts.top)


def whatif_edit(kind: str, what: str = "", factor: float = 1.0) -> WhatIfEdit:
    """One what-if edit as a user names it (``aiprof whatif``'s flags; :class:`aiprof.analysis.whatif.run.EditSpec`)."""
    from aiprof.analysis.whatif.run import EditSpec

    return EditSpec(kind, what, factor)


def default_cache_dir() -> Path:
    """The rank cache's folder when ``--cache`` names none (:func:`aiprof.analysis.rankcache.default_dir`)."""
    from aiprof.analysis.rankcache import default_dir

    return default_dir()


def whatif(path: PathArg, specs: list[WhatIfEdit], rank: int | None = None) -> WhatIfResult:
    """Predict the steps of one rank's trace after each edit (``aiprof whatif``; docs/whatif.md)."""
    from aiprof.analysis.whatif.run import whatif as run_whatif

    return run_whatif(_rank_trace(path, rank), specs)
