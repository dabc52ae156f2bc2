"""Paths → analysis → diagnosis: the diagnosis step of :func:`aiprof.app.analyze` (which every verb
calls; it builds the report from what this returns).

Per-rank rules run in the worker process that loaded the trace (``analyze_paths``'s ``rank_hook``); the
worker returns a :class:`~aiprof.rules.diagnosis.RankDiagnosis` (``RankAnalysis.diagnosis``): the rank's
findings as :class:`Finding` objects, the rules' notes, and what only the loaded trace gives (host time by
source line and module, the interactive timeline). The worker is also where findings get what the trace says
about them besides the rules: the what-if replay of their fix and the source lines of the ops they name (the
analysis layer computes both; only this module edits findings). When the rank has memory data (``[memory]``
events in its trace, or an allocator snapshot of its rank in the run directory's ``memory/``), the worker also
computes its :class:`~aiprof.memory.report.MemoryReport` (the report's memory section) and the memory findings
join the rank's findings. Cross-rank rules then run here on the small results, per-rank findings of the same id
are merged across ranks, and everything is ranked by saving (the replayed claim where a finding has one, else
its formula: docs/whatif.md 'Claims'); the memory findings save bytes, not
time, and come after all the others (largest saving in bytes first).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from aiprof.analysis.run import RankAnalysis, RunAnalysis, analyze_paths
from aiprof.rules.diagnosis import RankDiagnosis
from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.rules.registry import RankRule, RunRule
from aiprof.rules.vendor import Vendor, in_vendor_words
from aiprof.trace.limits import LoadLimits
from aiprof.trace.model import Kind, Trace
from aiprof.trace.readers.base import ReaderOptions
from aiprof.trace.runset import ProgressCallback

if TYPE_CHECKING:
    from aiprof.rundir import RunDir
    from aiprof.memory.model import MemoryData
    from aiprof.memory.report import MemoryReport
    from aiprof.analysis.failures import FailureCallback
    from aiprof.trace.executors import Executor


def diagnose_hook(
    trace: Trace,
    analysis: RankAnalysis,
    options: RuleOptions = DEFAULT_OPTIONS,
    rules: list[RankRule] | None = None,
    memory: MemoryMode = "auto",
    timeline: int = 0,
    limits: LoadLimits | None = None,
) -> RankDiagnosis:
    """The rank hook: run the per-rank rules while the trace is in memory (module level: it may cross
    a process boundary, with ``functools.partial`` for the options and rules, which must be module-level
    functions too). With ``timeline`` > 0, also up to that many of the rank's events for the HTML report's
    interactive timeline (``RankDiagnosis.timeline``, :func:`aiprof.analysis.explore.rank_timeline`). ``limits``:
    the load limits of the memory inputs it reads (the run's ``ReaderOptions.limits``; None: the defaults)."""
    from aiprof.analysis.whatif.findings import fix_inputs, predict_findings
    from aiprof.rules.registry import diagnose_rank
    from aiprof.rules.context import load_run_inputs

    inputs = load_run_inputs(trace.path, analysis.run_dir)
    found, notes = diagnose_rank(trace, analysis, options, rules=rules, inputs=inputs)
    findings = [f.plain() for f in found]  # the evidence as the report holds it (what later rules read)
    replayed = predict_findings(trace, analysis.windows, [f.id for f in findings])  # docs/whatif.md
    notes.extend(replayed.notes)
    findings = [_with_evidence(f, replayed.evidence(f.id)) if f.id in replayed.fixes else f for f in findings]
    out = RankDiagnosis(notes=notes, fix_inputs=fix_inputs(trace))
    findings = _host_time(trace, analysis, findings, out)  # Python stacks, modules, source lines
    data = rank_memory_data(trace, notes, memory, analysis.run_dir, limits)
    if data is not None:
        from aiprof.analysis.inference_memory import trace_budget
        from aiprof.memory import analyze_memory
        from aiprof.rules.registry import budget_findings, memory_findings

        out.memory = analyze_memory(data)
        out.memory_budget = trace_budget(trace, data, analysis.run_dir)
        # A graph-capture phase (vLLM / SGLang start-up) is set-up: its memory (the KV cache reserved up front,
        # graph pools) is sized on purpose; the section shows it, no memory finding judges it
        capture = any(f.id == "graph_capture" and not f.evidence.get("steady_state", True) for f in findings)
        if not capture:
            findings += [f.plain() for f in memory_findings(out.memory, options)]
            findings += [f.plain() for f in budget_findings(out.memory_budget, options)]
    out.findings = findings
    if timeline > 0:
        from aiprof.analysis.explore import rank_timeline

        out.timeline = rank_timeline(trace, analysis.windows, max_events=timeline)
    return out


def _host_time(trace: Trace, analysis: RankAnalysis, findings: list[Finding], out: RankDiagnosis) -> list[Finding]:
    """The rank's host-time sections (:class:`~aiprof.analysis.stacks.StackProfile`, ``ModuleProfile``) into
    ``out``, and ``findings`` with the user source lines of the ops their evidence names (when the trace has
    Python stacks). Nothing for an Nsight Systems report without Python events (``--with-stack`` is no advice
    for it)."""
    from aiprof.analysis.modules import module_profile
    from aiprof.analysis.stacks import source_lines_of, stack_profile

    if trace.metadata.get("source") == "nsys" and not len(trace.rows_of(Kind.PYTHON)):
        return findings
    out.stacks = stack_profile(trace, analysis.windows)
    out.modules = module_profile(trace, analysis.windows)
    if not out.stacks.recorded or not findings:
        return findings
    lines = source_lines_of(trace, analysis.windows, [f.evidence for f in findings])
    return [_with_evidence(f, {"source_lines": found}) if found else f for f, found in zip(findings, lines)]


def _with_evidence(f: Finding, more: Mapping[str, object]) -> Finding:
    """``f`` with ``more`` added to (the end of) its evidence; the finding itself is not changed."""
    return dataclasses.replace(f, evidence={**f.evidence, **more})


# ---------------------------------------------------------------------------------------------------
# Memory: the rank's memory report, when it has memory data (cheap to rule out: one kind lookup, one stat)
# ---------------------------------------------------------------------------------------------------
MemoryMode = Literal["auto", "all", "off"]
"""Which memory inputs make a rank's memory section: ``auto`` (the default) and ``all`` the allocator dumps
an ``aiprof run --memory`` wrote, else a trace's ``[memory]`` events (``profile_memory=True``: the trace is
read a second time, about 1-4x its load time; a leak is found only by reading them); ``off`` none."""
MEMORY_PREFIX = "mem_"  # the ids of the memory rules (rules/memory_findings.py, registry.DEFAULT_MEMORY_RULES)
MEMORY_DIR = "memory"
STATS_FILE = "memory_stats.jsonl"


def memory_inputs(trace: Trace, mode: MemoryMode = "all", run_dir: RunDir | None = None) -> list[Path]:
    """The memory inputs of a rank, best first: its allocator snapshots in the memory folder of ``run_dir``
    (the run directory holding the trace: the OOM dump, then the end-of-window one), then its trace when it
    holds ``[memory]`` events."""
    found: list[Path] = []
    if mode == "off":
        return found
    folder = run_dir.path if run_dir is not None else None
    if folder is not None and (folder / MEMORY_DIR).is_dir():
        for stem in ("oom", "snapshot"):
            path = folder / MEMORY_DIR / f"{stem}.rank{trace.rank}.pickle"
            if path.is_file():
                found.append(path)
    name = trace.path.name.lower()
    if len(trace.rows_of(Kind.MEMORY)) and (name.endswith(".json") or name.endswith(".json.gz")):
        found.append(trace.path)
    return found


def rank_memory(
    trace: Trace, notes: list[str] | None = None, mode: MemoryMode = "all", run_dir: RunDir | None = None,
    limits: LoadLimits | None = None,
) -> MemoryReport | None:
    """The memory report of one rank (``run_dir``: the run directory holding its trace), or None when it has
    no memory data. An input that cannot be read becomes a note (in ``notes``), never a failed analysis."""
    from aiprof.memory import analyze_memory

    data = rank_memory_data(trace, notes, mode, run_dir, limits)
    return analyze_memory(data) if data is not None else None


def rank_memory_data(
    trace: Trace, notes: list[str] | None = None, mode: MemoryMode = "all", run_dir: RunDir | None = None,
    limits: LoadLimits | None = None,
) -> MemoryData | None:
    """The memory data :func:`rank_memory` analyses (its best input, read, with the allocator statistics and the
    trace's device sizes), or None."""
    inputs = memory_inputs(trace, mode, run_dir)
    if not inputs:
        return None
    from aiprof.memory import load_memory
    from aiprof.memory.load import _stats
    from aiprof.memory.model import MemoryInputError

    try:
        data = load_memory(inputs[0], limits)
    except MemoryInputError as err:
        if notes is not None:
            notes.append(f"memory section left out: {err}")
        return None
    stats = inputs[0].parent / STATS_FILE
    if inputs[0] != trace.path and stats.is_file():
        data.stats = _stats(stats)
    capacity = {d.index: d.total_memory_bytes for d in trace.devices if d.total_memory_bytes}
    for device, size in capacity.items():
        data.capacity_bytes.setdefault(device, size)
    return data


def analyze_and_diagnose(
    paths: Sequence[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    options: RuleOptions | None = None,
    rank_rules: list[RankRule] | None = None,
    run_rules: list[RunRule] | None = None,
    memory: MemoryMode = "auto",
    timeline: int = 0,
    executor: Executor | None = None,
    cache_dir: Path | None = None,
    on_failed: FailureCallback | None = None,
    reader: ReaderOptions | None = None,
) -> tuple[RunAnalysis, list[Finding]]:
    """Analyse every trace behind ``paths`` and diagnose the run; findings ranked by saving.
    ``rank_rules`` / ``run_rules`` replace ``DEFAULT_RANK_RULES`` / ``DEFAULT_RUN_RULES``; ``memory`` says
    which memory inputs make the memory section and findings (:data:`MemoryMode`); ``timeline`` > 0 adds
    up to that many of each rank's events to its diagnosis, for an HTML report's interactive timeline;
    ``executor`` is where the ranks are analysed (:mod:`aiprof.trace.executors`; None: this machine);
    ``cache_dir`` the rank cache's folder (:mod:`aiprof.analysis.rankcache`; None: no cache); ``on_failed``
    hears of each rank file of a folder that fails, when it does (:mod:`aiprof.analysis.failures`); ``reader``
    what the readers are told (the step range, the load limits; None: the defaults)."""
    opts = options or DEFAULT_OPTIONS
    reader = reader or ReaderOptions()
    if opts == DEFAULT_OPTIONS and rank_rules is None and memory == "auto" and timeline <= 0 and reader == ReaderOptions():
        hook: Any = diagnose_hook
    else:
        limits = reader.limits if reader.limits != LoadLimits() else None
        hook = functools.partial(diagnose_hook, options=opts, rules=rank_rules, memory=memory, timeline=timeline,
                                 limits=limits)
    run = analyze_paths(paths, workers=workers, progress=progress, rank_hook=hook, executor=executor,
                        cache_dir=cache_dir, on_failed=on_failed, reader=reader)
    return run, diagnose_run(run, opts, run_rules)


def diagnose_run(
    run: RunAnalysis, options: RuleOptions = DEFAULT_OPTIONS, run_rules: list[RunRule] | None = None
) -> list[Finding]:
    """Merge the ranks' findings, add the cross-rank ones, rank by saving (the claim, else the formula). Rule
    failures become notes. The
    findings' evidence is in plain JSON types (:meth:`Finding.plain`), as the report holds it."""
    from aiprof.rules.registry import DEFAULT_RUN_RULES, rank_findings

    # The worker numbered its rank before the run's ranks were assigned: the final number is on ``r``.
    per_rank = [_of_rank(f, r) for r in run.ranks if r.diagnosis is not None for f in r.diagnosis.findings]
    for r in run.ranks:
        if r.diagnosis is not None:
            r.notes.extend(r.diagnosis.notes)
    merged = merge_ranks(per_rank, len(run.ranks))
    for rule in DEFAULT_RUN_RULES if run_rules is None else run_rules:
        merged.extend(rule(run, merged, options))
    merged = _with_run_replay(run, merged)
    merged = in_vendor_words(merged, _run_vendor(run))  # the run rules' words (the ranks' are done already)
    merged = _with_health(run, merged)
    return [f.plain() for f in memory_last(rank_findings(merged))]


def _with_run_replay(run: RunAnalysis, findings: list[Finding]) -> list[Finding]:
    """On a distributed run, the findings whose fix the ranks' joined replay predicts (docs/whatif.md 'Ranks
    together'), with the prediction in their evidence; the note on the fixes together is the first rank's, a
    failed replay a warning of the run."""
    if len(run.ranks) < 2:
        return findings
    from aiprof.analysis.whatif.findings import fix_ranks, predict_loaded_run

    replayed = predict_loaded_run(run, [(f.id, fix_ranks(f.id, f.ranks, f.evidence)) for f in findings])
    (run.run_notes if replayed.failed else run.ranks[0].notes).extend(replayed.notes)
    return [_with_evidence(f, replayed.evidence(f.id)) if f.id in replayed.fixes else f for f in findings]


def _run_vendor(run: RunAnalysis) -> Vendor:
    """The run's GPU vendor from its ranks' device names (:mod:`aiprof.rules.vendor`), ``""`` on a CPU run."""
    from aiprof.rules.vendor import vendor_of_names

    names = [d.name for r in run.ranks for d in r.devices_info]
    names += [d.name for r in run.ranks for d in r.devices if d.kind == "gpu"]
    return vendor_of_names(names)


def _with_health(run: RunAnalysis, findings: list[Finding]) -> list[Finding]:
    """The findings against the run's trace health (:mod:`aiprof.rules.health`); the health, with the findings
    it changed, is kept on ``run`` for the report. A shared machine is known here from the ``noisy_neighbour``
    finding (the report adds the whole-run telemetry's verdict)."""
    import msgspec

    from aiprof.analysis.health import clock_offsets, run_health
    from aiprof.rules.health import apply_health
    from aiprof.rules.registry import RULE_SPECS

    cores = next((f.evidence.get("others_cores") for f in findings if f.id == "noisy_neighbour"), None)
    shared = float(cores) if isinstance(cores, (int, float)) and not isinstance(cores, bool) else None
    health = run_health([r.health for r in run.ranks if r.health is not None], clock_offsets(run.cross_rank),
                        shared, "telemetry during the steps" if shared is not None else "")
    adjusted, changes = apply_health(findings, health, RULE_SPECS)
    run.health = msgspec.structs.replace(health, findings=changes)
    return adjusted


def memory_last(ranked: list[Finding]) -> list[Finding]:
    """The memory findings (``mem_*``: they save bytes, not time) after every other finding: those of
    ``rules.memory_findings.MEMORY_FIRST`` first, then the largest ``evidence['est_saving_bytes']``; the others
    keep their order."""
    from aiprof.rules.memory_findings import memory_rank

    time = [f for f in ranked if not f.id.startswith(MEMORY_PREFIX)]
    memory = [f for f in ranked if f.id.startswith(MEMORY_PREFIX)]
    return time + sorted(memory, key=lambda f: (memory_rank(f.id), -_saving_bytes(f)))


def _saving_bytes(f: Finding) -> int:
    value = f.evidence.get("est_saving_bytes")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _of_rank(f: Finding, rank: RankAnalysis) -> Finding:
    """A rank's finding with the rank's final number; on a partial trace, the steps its numbers leave
    out (no device record) are part of its evidence."""
    if not rank.incomplete_steps:
        return dataclasses.replace(f, ranks=(rank.rank,))
    left_out = [s.name for s in rank.incomplete_steps]
    evidence = {**f.evidence, "incomplete_steps_left_out": left_out}
    note = f"computed from the steps with a device record; {len(left_out)} incomplete step(s) left out"
    return dataclasses.replace(f, ranks=(rank.rank,), evidence=evidence, notes=(*f.notes, note))


def merge_ranks(findings: list[Finding], rank_count: int) -> list[Finding]:
    """One finding per id: the rank with the largest saving speaks for all ranks that have it (a run is
    as slow as its slowest rank); the others are listed in ``ranks`` and ``evidence['per_rank_saving_ns']``."""
    if rank_count <= 1:
        return list(findings)
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f)
    out: list[Finding] = []
    for group in by_id.values():
        worst = max(group, key=lambda f: f.est_saving_ns_per_step)
        ranks = tuple(sorted({r for f in group for r in f.ranks}))
        evidence = dict(worst.evidence)
        evidence["worst_rank"] = worst.ranks[0] if worst.ranks else None
        evidence["per_rank_saving_ns"] = {str(f.ranks[0]): f.est_saving_ns_per_step for f in group if f.ranks}
        out.append(_replace(worst, ranks=ranks, evidence=evidence))
    return out


def _replace(f: Finding, **changes: Any) -> Finding:
    return dataclasses.replace(f, **changes)

