"""Run every analysis over one trace (a rank) or a set of ranks, and gather the typed results.

``analyze_paths`` is what ``aiprof analyze`` uses: each rank is loaded *and* analysed in its own worker
process, and only the (small) results travel back — the event columns never cross a process boundary.
``analyze`` does the same for traces already loaded with ``aiprof.load``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from aiprof.analysis import forked
from aiprof.analysis.arrival import ArrivalTable, CrossRank, arrival_table, cross_rank
from aiprof.analysis.rankcache import RankCache, cached_map, code_fingerprint, describe as describe_fn
from aiprof.analysis.coverage import Coverage, IncompleteStep, device_coverage
from aiprof.analysis.failures import FailedRank, FailureCallback, Stage, failed_rank
from aiprof.analysis.health import Health, RankHealth, rank_health
from aiprof.analysis.overview import timeline_overview
from aiprof.analysis.steps import StepWindow, set_analysed_windows, step_source, step_windows
from aiprof.analysis.timeline import DeviceAccount, account
from aiprof.errors import NoTracesError, TraceError
from aiprof.heap import release_free_memory
from aiprof.interrupts import interrupts_held
from aiprof.analysis.graphs import GraphRole, attach_capture, graph_role, pair_replays, process_key
from aiprof.rundir import RunContext, RunDir
from aiprof.trace.cycles import Identity, cycle_groups, describe, identity, merge_cycles
from aiprof.trace.model import DeviceInfo, RunSet, Trace
from aiprof.trace.readers import ReaderOptions, load_ranks, program_of
from aiprof.trace.executors import Watch
from aiprof.trace.runset import ProgressCallback, assign_ranks, check_one_program, find_trace_files, map_files

if TYPE_CHECKING:
    from aiprof.analysis.comm import CommunicationSection
    from aiprof.analysis.compat import Compat
    from aiprof.analysis.compile import CompileReport
    from aiprof.analysis.graphs import GraphCaptureSection
    from aiprof.analysis.inference import InferenceReport
    from aiprof.analysis.kernels import KernelStats
    from aiprof.analysis.ops import OpGroupStats, OpStats
    from aiprof.analysis.overview import TimelineOverview
    from aiprof.roofline.attention import AttentionReport
    from aiprof.roofline.mfu import MfuReport
    from aiprof.roofline.section import RooflineSection
    from aiprof.rules.diagnosis import RankDiagnosis
    from aiprof.trace.executors import Executor

    # What a section computes: one of the report's per-rank section types (report/model.py RankReport).
    SectionValue = (KernelStats | OpStats | CommunicationSection | Compat | RooflineSection | TimelineOverview
                    | GraphCaptureSection | CompileReport | MfuReport | AttentionReport | InferenceReport)

Section = Callable[[Trace], "SectionValue"]


TOP_N = 50  # rows per table kept in the report (the full tables stay available through the Python API)


def _kernels_section(trace: Trace) -> KernelStats:
    """Kernel statistics with each device's :data:`TOP_N` longest kernel names (``kernel_names`` counts all)."""
    from aiprof.analysis.kernels import kernel_stats

    stats = kernel_stats(trace)
    devices = tuple(msgspec.structs.replace(d, kernels=tuple(sorted(d.kernels, key=lambda k: -k.total_ns)[:TOP_N]))
                    for d in stats.devices)
    return msgspec.structs.replace(stats, devices=devices)


def _ops_section(trace: Trace) -> OpStats:
    """Op statistics with the :data:`TOP_N` longest groups by GPU time, then by self CPU time (``group_count``
    counts all)."""
    from aiprof.analysis.ops import op_stats

    stats = op_stats(trace)
    by_cpu = sorted(stats.groups, key=lambda g: -g.cpu_self_ns)[:TOP_N]
    by_gpu = sorted(stats.groups, key=lambda g: -g.gpu_total_ns)[:TOP_N]
    kept: dict[str, OpGroupStats] = {}
    for group in by_gpu + by_cpu:
        kept.setdefault(group.name, group)
    return msgspec.structs.replace(stats, groups=tuple(kept.values()))


def _comm_section(trace: Trace) -> CommunicationSection:
    from aiprof.analysis.comm import comm_section
    from aiprof.analysis.steps import analysed_windows

    return comm_section(trace, analysed_windows(trace), TOP_N)


def _compat_section(trace: Trace) -> Compat:
    from aiprof.analysis.compat import compat_for_trace

    return compat_for_trace(trace)


def _mfu_section(trace: Trace) -> MfuReport:
    from aiprof.roofline.mfu import mfu_section

    return mfu_section(trace)


def _attention_section(trace: Trace) -> AttentionReport:
    from aiprof.roofline.attention import attention_section

    return attention_section(trace)


def _compile_section(trace: Trace) -> CompileReport:
    from aiprof.analysis.compile import compile_section

    return compile_section(trace)


def _roofline_section(trace: Trace) -> RooflineSection:
    from aiprof.roofline.analysis import roofline

    return roofline(trace).section(max_instances=TOP_N)


def _graph_capture_section(trace: Trace) -> GraphCaptureSection:
    from aiprof.analysis.graphs import graph_capture_section

    return graph_capture_section(trace)


def _inference_section(trace: Trace) -> InferenceReport:
    from aiprof.analysis.inference import inference_section

    return inference_section(trace)


# The analyses beyond timeline accounting, by report key. Users may edit this dict.
DEFAULT_SECTIONS: dict[str, Section] = {
    "kernels": _kernels_section,
    "ops": _ops_section,
    "communication": _comm_section,
    "compat": _compat_section,
    "roofline": _roofline_section,
    "timeline_overview": timeline_overview,
    "graph_capture": _graph_capture_section,
    "compile": _compile_section,
    "mfu": _mfu_section,
    "attention": _attention_section,
    "inference": _inference_section,
}


@dataclass
class RankAnalysis:
    """Everything aiprof computed for one rank. ``windows`` and ``devices`` cover the steps the device
    record covers; ``incomplete_steps`` are the steps of a partial trace left out of them (``coverage``)."""

    rank: int
    rank_source: str
    path: Path
    distributed: dict[str, Any]
    devices_info: list[DeviceInfo]
    metadata: dict[str, Any]
    event_count: int
    windows: list[StepWindow]
    devices: list[DeviceAccount]
    sections: dict[str, SectionValue] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # What the diagnosis (the rank hook: the per-rank rules) computed from the trace while it was in memory.
    diagnosis: RankDiagnosis | None = None
    coverage: Coverage | None = None
    # One small row per collective, for the cross-rank arrival analysis (aiprof.analysis.arrival).
    arrivals: ArrivalTable | None = None
    # What the trace holds and lacks (aiprof.analysis.health): the report's health section is built from it.
    health: RankHealth | None = None
    # The aiprof run directory holding the trace (meta.json decoded), found at the analysis' root and handed
    # to the hook (the rules' run inputs); None for a trace outside one.
    run_dir: RunDir | None = None

    @property
    def incomplete_steps(self) -> list[IncompleteStep]:
        """Steps whose device side the trace does not hold (left out of ``windows`` and ``devices``)."""
        return list(self.coverage.incomplete) if self.coverage is not None else []

    @property
    def partial(self) -> bool:
        """Whether the trace is partial: cut off mid-write, or steps / time without their device side."""
        return self.coverage is not None and self.coverage.partial

    def partial_warning(self) -> str | None:
        """The warning of a partial trace: which steps are left out and why (None when none is)."""
        return self.coverage.warning(self.path.name) if self.coverage is not None else None

    @property
    def step_source(self) -> str:
        """The marker the step windows come from ("ProfilerStep", "Optimizer.step", "DataLoader",
        "module forward <name>", "annotation <name>", "whole trace")."""
        return step_source(self.windows)

    @property
    def primary(self) -> DeviceAccount:
        """The device whose steps represent the rank: the busiest one."""
        return max(
            self.devices,
            key=lambda d: d.totals.breakdown_ns["compute"] + d.totals.breakdown_ns["communication"],
        )


@dataclass
class RunAnalysis:
    """All ranks of a run, in rank order, plus warnings raised while loading."""

    ranks: list[RankAnalysis]
    sources: list[str]
    warnings: list[str] = field(default_factory=list)
    # Collectives matched across ranks: who arrives last (None: one rank, or no shared collective).
    cross_rank: CrossRank | None = None
    # The run's trace health with the findings it changed (set by the diagnosis, aiprof.rules.health; None:
    # not diagnosed, the report builds it from the ranks' facts).
    health: Health | None = None
    # Rank files of a folder that are in no number: unreadable, their analysis raised, or their worker died
    # (aiprof.analysis.failures), in file order.
    failed: list[FailedRank] = field(default_factory=list)
    # The run directory every rank's trace belongs to (aiprof.rundir.RunContext, found once at the root:
    # the report's run metadata, telemetry and status come from it), and why a meta.json beside the traces
    # was ignored (the report's warnings, after the others).
    run_dir: RunDir | None = None
    run_notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cross_rank is None and len(self.ranks) > 1:
            self.cross_rank = cross_rank([(r.rank, r.arrivals) for r in self.ranks if r.arrivals is not None])


# The diagnosis' rank hook (``aiprof.pipeline.diagnose_hook``): the analysis layer runs it, never looks inside.
RankHook = Callable[[Trace, RankAnalysis], "RankDiagnosis"]

# Computed in a forked child when there is a spare core, while this process computes the roofline
# and runs the hook (the diagnosis rules, which use the roofline too): numpy work over columns, which
# touches few Python objects, so few pages are copied on write between the two processes.
_CHILD_SECTIONS = ("kernels", "ops", "communication", "compat", "timeline_overview")


def analyze_trace(
    trace: Trace,
    sections: dict[str, Section] | None = None,
    hook: RankHook | None = None,
    fork: bool = False,
    run_dir: RunDir | None = None,
) -> RankAnalysis:
    """All analyses of one loaded trace; then ``hook(trace, analysis)``, whose result goes into
    ``diagnosis`` (the hook sees the analysis without its sections, with ``run_dir``: the run directory
    holding the trace, found by the caller). With ``fork``, the statistics sections are computed in a
    forked copy of this process meanwhile (same results; done here if the child fails)."""
    coverage = device_coverage(trace, step_windows(trace))
    windows = coverage.complete
    set_analysed_windows(trace, windows)  # the sections' steps (aiprof.analysis.steps.analysed_windows)
    devices = account(trace, windows)
    coverage_note = coverage.warning(trace.path.name)
    result = RankAnalysis(
        rank=trace.rank,
        rank_source=trace.rank_source,
        path=trace.path,
        distributed=_public_distributed(trace.distributed),
        devices_info=list(trace.devices),
        metadata=dict(trace.metadata),
        event_count=trace.event_count,
        windows=windows,
        devices=devices,
        notes=list(trace.warnings) + _notes(trace) + ([coverage_note] if coverage_note else []),
        coverage=coverage,
        arrivals=arrival_table(trace, windows) if trace.distributed or _has_collectives(trace) else None,
        health=rank_health(trace, len(windows) + len(coverage.incomplete), len(coverage.incomplete), coverage.cut_off,
                           windows),
        run_dir=run_dir,
    )
    chosen = sections if sections is not None else DEFAULT_SECTIONS
    in_child = [key for key in _CHILD_SECTIONS if key in chosen]
    pending: forked.Pending[dict[str, SectionValue]] | None = None
    try:
        if fork and len(in_child) < len(chosen):
            _shared_views(trace)  # computed once, before the fork, for both halves
            release_free_memory()  # freed heap pages would otherwise be resident in both processes
            with interrupts_held():  # Ctrl-C comes after `pending` is set: the child is always closed
                pending = forked.start(lambda: {key: chosen[key](trace) for key in in_child})
        done = {key: section(trace) for key, section in chosen.items() if pending is None or key not in in_child}
        diagnosis = hook(trace, result) if hook is not None else None
        from_child = pending.result() if pending is not None else None
    finally:
        if pending is not None:
            pending.close()
    if pending is not None:
        done.update(from_child if from_child is not None else {key: chosen[key](trace) for key in in_child})
    result.sections = {key: done[key] for key in chosen}
    result.diagnosis = diagnosis
    return result


def _has_collectives(trace: Trace) -> bool:
    from aiprof.analysis.comm import is_comm_kernel

    return bool(is_comm_kernel(trace).any())


def _shared_views(trace: Trace) -> None:
    """The cached per-row links both halves of a forked analysis use (the op statistics, the roofline
    and the rules): built here they are built once and inherited by the child."""
    from aiprof.analysis.ops import gpu_ns_per_op
    from aiprof.trace import links

    links.parent(trace)
    links.issuing_op(trace)
    links.gpu_op(trace)
    gpu_ns_per_op(trace)


def analyze(loaded: Trace | RunSet, sections: dict[str, Section] | None = None) -> RunAnalysis:
    """Analyse what :func:`aiprof.load` returned."""
    traces = [loaded] if isinstance(loaded, Trace) else list(loaded.traces)
    warnings = [] if isinstance(loaded, Trace) else list(loaded.warnings)
    context = RunContext.find(t.path for t in traces)
    ranks = [analyze_trace(t, sections, run_dir=context.of(t.path)) for t in traces]
    warnings += [w for r in ranks if (w := r.partial_warning())]
    notes: list[str] = []
    found = context.common([t.path for t in traces], notes)
    return RunAnalysis(ranks, [str(t.path) for t in traces], warnings, run_dir=found, run_notes=notes)


def _notes(trace: Trace) -> list[str]:
    notes: list[str] = []
    if not trace.device_ids:
        from aiprof.trace.model import Kind

        launches = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
        if launches.size and trace.name_matches(launches, "Launch|Memcpy").any():
            notes.append(
                "the trace has GPU launch calls but no GPU activity: the profiler did not record the device "
                "side (CUDA activities off, or CUPTI unavailable); accounted on the CPU instead"
            )
    return notes


def _public_distributed(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("backend", "rank", "world_size", "pg_count", "nccl_version")
    return {k: info[k] for k in keys if k in info}


# ---------------------------------------------------------------------------------------------------
# Paths → results, one process per rank
# ---------------------------------------------------------------------------------------------------
@dataclass
class _Loaded:
    """A rank's results as they come back from a worker (enough for rank numbering)."""

    path: Path
    distributed: dict[str, Any]
    rank: int
    rank_source: str
    analysis: RankAnalysis | None
    error: str | None
    warnings: list[str]
    program: str = ""
    identity: Identity | None = None  # host, pid, rank, span: whether files are cycles of one process
    stage: Stage = "read"  # where it failed, when ``error`` is set
    graph_role: GraphRole = ""  # a graph capture trace, a replay, or neither: which files pair (analysis.graphs)


def _failed(path: Path, error: str, stage: Stage) -> _Loaded:
    return _Loaded(path, {}, 0, "file order", None, error, [], stage=stage)


# trace file, tolerate a bad one, hook, run directory, what the reader is told
Job = tuple[Path, bool, RankHook | None, RunDir | None, ReaderOptions]


def _load_and_analyze(args: Job) -> list[_Loaded]:
    """Load one file and analyse each rank it holds. In a folder (``tolerate``) a file that is no trace, or
    a rank whose analysis raises, is a failed rank (its error), not the end of the run."""
    path, tolerate, hook, run_dir, reader = args
    try:
        traces = load_ranks(path, reader)  # one per rank the file holds (an nsys report of an MPI job: several)
    except TraceError as err:
        if tolerate:
            return [_failed(path, str(err), "read")]
        raise
    out: list[_Loaded] = []
    while traces:
        trace = traces.pop(0)
        assign_ranks([trace])  # its own number while the rules run (the run's numbering comes after)
        ident = identity(trace)
        try:
            role = graph_role(trace)
            analysis = analyze_trace(trace, hook=hook, fork=True, run_dir=run_dir)
        except MemoryError:
            raise  # the machine, not the rank: the run ends with its one-line error instead of numbers without it
        except Exception as err:  # noqa: BLE001 - one rank's failure is named, the run goes on
            if not tolerate:
                raise
            out.append(_failed(path, f"{path.name}: analysing it failed ({type(err).__name__}: {err})", "analysis"))
            trace.cache.clear()
            del trace
            continue
        out.append(_Loaded(path, dict(trace.distributed), 0, "file order", analysis, None, list(trace.warnings),
                           program_of(trace), ident, graph_role=role))
        # The trace's caches (views, links, the roofline) refer back to it: clearing them lets reference
        # counting free the trace now, even where the cyclic collector is off (the CLI), before the next rank.
        trace.cache.clear()
        del trace
    return out


def analyze_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    rank_hook: RankHook | None = None,
    executor: Executor | None = None,
    cache_dir: Path | None = None,
    on_failed: FailureCallback | None = None,
    reader: ReaderOptions | None = None,
) -> RunAnalysis:
    """Load and analyse every trace behind ``paths``; ranks are analysed in parallel processes.

    ``rank_hook(trace, analysis)`` runs in the worker while the trace is in memory (the diagnosis layer
    uses it for rules that need events); what it returns lands in ``RankAnalysis.diagnosis``. It must be a
    module-level function (it may cross a process boundary). ``executor`` says where the per-file work runs
    (:mod:`aiprof.trace.executors`; None: this machine's process pool). With ``cache_dir``, each file's
    result is looked up in and stored to the rank cache there (:mod:`aiprof.analysis.rankcache`). In a folder, a
    file that fails (:mod:`aiprof.analysis.failures`) is skipped with a warning, told to ``on_failed`` as soon as
    it is known (the progress bar's failed count) and listed in ``RunAnalysis.failed``. ``reader``: what every
    read is told (the step range, the load limits; None: the defaults), carried with each file's job."""
    reader = reader or ReaderOptions()
    if not paths:
        raise NoTracesError("no path given; pass a trace file or a folder of traces")
    files = [(found, Path(raw).is_dir()) for raw in paths for found in find_trace_files(Path(raw))]
    context = RunContext.find(found for found, _ in files)  # each folder's meta.json read once, here
    jobs: list[Job] = [(found, tolerate, rank_hook, context.of(found), reader) for found, tolerate in files]
    cache = _rank_cache(cache_dir, rank_hook, [job[0] for job in jobs], reader)

    watch: Watch[Job, list[_Loaded]] = Watch(
        progress=progress, failed=_first_error, on_failed=on_failed,
        lost=lambda job, why: [_failed(job[0], why, "worker")])

    def mapper(fn: Callable[[Job], list[_Loaded]], todo: list[Job]) -> list[list[_Loaded]]:
        return map_files(fn, todo, workers, progress, executor, watch)

    done = cached_map(cache, mapper, _load_and_analyze, jobs, keep=lambda rs: all(r.error is None for r in rs))
    results = [r for rs in done for r in rs]
    loaded = [r for r in results if r.analysis is not None]
    check_one_program(loaded)
    loaded = _cycles_as_one_rank(loaded, rank_hook, workers, progress, executor, context, reader)
    skipped = [f"skipped: {r.error}" for r in results if r.error]
    if not loaded:
        raise NoTracesError(f"{paths[0]}: none of the {len(jobs)} JSON file(s) is a readable trace")
    notes = assign_ranks(loaded)  # one file too: a lone rank-34 trace is rank 34
    ranks: list[RankAnalysis] = []
    for item in sorted(loaded, key=lambda r: r.rank):
        assert item.analysis is not None
        item.analysis.rank, item.analysis.rank_source = item.rank, item.rank_source
        item.analysis.run_dir = context.of(item.path)  # this run's reading, also for a result from the cache
        ranks.append(item.analysis)
    warnings = skipped + notes + [w for r in loaded for w in r.warnings]
    warnings += [w for r in ranks if (w := r.partial_warning())]
    failed = [failed_rank(r.path, r.stage, r.error) for r in results if r.error]
    run_notes: list[str] = []
    found_dir = context.common([r.path for r in ranks], run_notes)
    return RunAnalysis(ranks, [str(r.path) for r in ranks], warnings, failed=failed, run_dir=found_dir,
                       run_notes=run_notes)


def _first_error(results: list[_Loaded]) -> str | None:
    """Why a file's results are a failure (its first error), or None."""
    return next((r.error for r in results if r.error), None)


def _rank_cache(folder: Path | None, hook: RankHook | None, traces: list[Path], reader: ReaderOptions) -> RankCache | None:
    """The rank cache for this analysis: keyed by aiprof's code, the hook and its options, and what the
    readers are told (it changes what a file's result is)."""
    if folder is None:
        return None
    from aiprof.analysis import summary

    context = "\0".join((code_fingerprint(), describe_fn(hook), repr(reader)))
    kind = summary.hook_result_type(hook)
    return RankCache(folder, context, traces, encode=functools.partial(summary.encode, diagnosis=kind),
                     decode=functools.partial(summary.decode, diagnosis=kind))


# ---------------------------------------------------------------------------------------------------
# Profiler cycles of one process: one rank (aiprof.trace.cycles)
# ---------------------------------------------------------------------------------------------------
def _cycles_as_one_rank(
    loaded: list[_Loaded],
    hook: RankHook | None,
    workers: int | None,
    progress: ProgressCallback | None,
    executor: Executor | None = None,
    context: RunContext | None = None,
    reader: ReaderOptions | None = None,
) -> list[_Loaded]:
    """``loaded`` with each set of cycles of one process replaced by one rank analysed over the merged
    cycles (loaded again, together, in a worker), and each graph capture that pairs with a replay
    (:func:`aiprof.analysis.graphs.pair_replays`) folded into the replay's rank: the replay is analysed again
    with the capture attached (its replayed kernels attributed to the captured ops). Only a folder of cycles,
    or a replay with its capture, pays the second load."""
    idents = [r.identity for r in loaded]
    if len(loaded) < 2 or any(i is None for i in idents):
        return loaded
    known = [i for i in idents if i is not None]  # every one, as checked: one per loaded rank
    pairs = pair_replays([r.graph_role for r in loaded], [process_key(i) for i in known])
    captures = set(pairs.values())
    kept = [i for i in range(len(loaded)) if i not in captures]
    found = cycle_groups([known[i] for i in kept])
    groups = [[kept[k] for k in g] for g in found]
    grouped = {i for g in groups for i in g}
    groups += [[rep] for rep in pairs if rep not in grouped]  # a replay with its capture, not in any cycles
    if not groups:
        return loaded
    jobs = [(loaded[g[0]].path, tuple(loaded[i].path for i in g), tuple(_idents_of(idents, g)),
             _capture_of(loaded, pairs, g), hook, context.of(loaded[g[0]].path) if context is not None else None,
             reader or ReaderOptions())
            for g in groups]
    merged = map_files(_load_cycles_and_analyze, jobs, workers, progress, executor)
    redone = {i for g in groups for i in g} | captures
    return [r for i, r in enumerate(loaded) if i not in redone] + merged


def _capture_of(loaded: list[_Loaded], pairs: dict[int, int], group: list[int]) -> tuple[Path, Identity] | None:
    """The capture file (and its identity) paired with a replay of ``group``, if any."""
    cap = next((pairs[i] for i in group if i in pairs), None)
    ident = loaded[cap].identity if cap is not None else None
    return (loaded[cap].path, ident) if cap is not None and ident is not None else None


def _idents_of(idents: list[Identity | None], group: list[int]) -> list[Identity]:
    return [i for i in (idents[k] for k in group) if i is not None]


def _load_cycles_and_analyze(
    args: tuple[Path, tuple[Path, ...], tuple[Identity, ...], tuple[Path, Identity] | None, RankHook | None,
                RunDir | None, ReaderOptions],
) -> _Loaded:
    """Load the cycle files, merge them (in time order), attach the graph capture when one pairs with
    them, and analyse them as one rank."""
    _, paths, idents, capture, hook, run_dir, reader = args
    traces = [_load_rank(path, ident, reader) for path, ident in zip(paths, idents)]
    note = describe(traces, idents[0].pid) if len(traces) > 1 else None
    trace = merge_cycles(traces)
    del traces
    if note is not None:
        trace.warnings.append(note)
    if capture is not None:
        attach_capture(trace, _load_rank(*capture, reader))
    assign_ranks([trace])
    analysis = analyze_trace(trace, hook=hook, fork=True, run_dir=run_dir)
    out = _Loaded(trace.path, dict(trace.distributed), 0, "file order", analysis, None, list(trace.warnings),
                  program_of(trace), identity(trace), graph_role="replay" if capture is not None else "")
    trace.cache.clear()
    return out


def _load_rank(path: Path, ident: Identity, reader: ReaderOptions) -> Trace:
    """The rank of ``path`` whose identity is ``ident`` (the file's first rank when none matches)."""
    found = load_ranks(path, reader)
    return next((t for t in found if identity(t) == ident), found[0])
