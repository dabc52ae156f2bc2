"""Find the trace files behind a path, load them (in parallel processes when there are several), and
number the ranks: from ``distributedInfo``, else from the file name, else by file order. Two files that
claim the same rank are never merged: they are numbered by file order and a warning says so. A single
file is numbered the same way (a lone ``rank-34`` trace is rank 34, never 0).
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aiprof.errors import AiprofWarning, NoTracesError, TraceError
from aiprof.trace.cycles import MergeRanks, merge_cycle_sets
from aiprof.trace.executors import Executor, Watch, local_map

from aiprof.trace.model import RunSet, Trace
from aiprof.trace.readers import ReaderOptions, load_ranks

_TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz", ".sqlite", ".nsys-rep")
# Files an aiprof run directory (or a peer tool's output folder) holds that are not traces.
_NOT_TRACES = {"meta.json", "report.json", "telemetry.json", "dataloader.json", "findings.json"}
_NOT_TRACE_PATTERN = re.compile(r"dynamo\.rank\d+(-pid\d+)?\.json")  # Dynamo's compile records (capture/dynamo.py)
_RANK_PATTERNS = [
    re.compile(r"rank[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"worker[-_]?(\d+)", re.IGNORECASE),
]

ProgressCallback = Callable[[Path, int, int], None]


def find_trace_files(path: Path) -> list[Path]:
    """Trace files under ``path`` (itself when it is a file), sorted by name."""
    if not path.exists():
        if path.is_symlink():
            raise NoTracesError(f"{path}: a symbolic link to nothing, or a loop of links; check the path")
        raise NoTracesError(f"{path}: no such file or folder; check the path")
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise NoTracesError(f"{path}: not a regular file or folder (a FIFO, socket or device is not a trace)")
    if not os.access(path, os.R_OK | os.X_OK):
        raise NoTracesError(f"{path}: permission denied; make the folder readable and retry")
    found: list[Path] = []
    for p in path.rglob("*"):
        if p.name == "meta.json" and p.is_file():
            found.extend(_salvaged_cycles(p.parent))
        elif (p.is_file() and p.name.lower().endswith(_TRACE_SUFFIXES) and p.name not in _NOT_TRACES
              and not _NOT_TRACE_PATTERN.fullmatch(p.name)):
            found.append(p)
    if not found:
        from aiprof.rundir import no_trace_message

        raise NoTracesError(
            no_trace_message(path)
            or f"{path}: no trace files (*.json, *.json.gz, *.sqlite) in this folder; pass a trace file or a run directory"
        )
    return sorted(found)


def _salvaged_cycles(folder: Path) -> list[Path]:
    """In an aiprof run directory, the profiler cycles ``aiprof run`` could not combine into a trace (it
    was killed, the disk was full): read as traces of their own, each with a warning (:func:`_load_one`)."""
    from aiprof.rundir import META, leftover_cycles, read_run_meta

    meta, _ = read_run_meta(folder / META)
    return leftover_cycles(folder) if meta is not None else []


def rank_from_name(path: Path) -> int | None:
    for pattern in _RANK_PATTERNS:
        match = pattern.search(path.name)
        if match:
            return int(match.group(1))
    return None


def _load_one(args: tuple[Path, bool, ReaderOptions]) -> list[Trace] | str:
    path, tolerate, options = args
    try:
        return load_ranks(path, options)  # the reader its content asks for; an nsys report may hold several ranks
    except TraceError as err:
        if tolerate:
            return str(err)
        raise


def load_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    merge: MergeRanks = merge_cycle_sets,
    options: ReaderOptions | None = None,
) -> Trace | RunSet:
    """Load traces. One file → a :class:`Trace`; a folder or several files → a :class:`RunSet`. ``options``:
    what the readers are told (None: the defaults).

    In a folder, files that are not traces are skipped with a warning; a named file that is not a
    trace is an error. ``merge`` makes ranks of the loaded traces (default: the cycles of one process are one
    rank; ``aiprof.load`` also folds a graph capture into its replay, :func:`aiprof.analysis.graphs.pair_and_merge`).
    """
    if not paths:
        raise NoTracesError("no path given; pass a trace file or a folder of traces")
    reader = options or ReaderOptions()
    files: list[tuple[Path, bool, ReaderOptions]] = []
    single_file = len(paths) == 1 and Path(paths[0]).is_file()
    for raw in paths:
        path = Path(raw)
        for found in find_trace_files(path):
            files.append((found, path.is_dir(), reader))
    results = _load_all(files, workers, progress)
    traces: list[Trace] = []
    skipped: list[str] = []
    for result in results:
        if isinstance(result, str):
            skipped.append(result)
        else:
            traces.extend(result)
    single_file = single_file and len(traces) == 1
    check_one_program(traces)
    traces, _ = merge(traces)  # cycles of one process are one rank (aiprof.trace.cycles)
    for message in skipped:
        warnings.warn(f"skipped: {message}", AiprofWarning, stacklevel=2)
    if not traces:
        raise NoTracesError(f"{paths[0]}: none of the {len(files)} JSON file(s) is a readable trace")
    for trace in traces:
        for note in trace.warnings:
            warnings.warn(note, AiprofWarning, stacklevel=2)
    notes = assign_ranks(traces)  # one file too: a lone rank-34 trace is rank 34, as in its folder
    for note in notes:
        warnings.warn(note, AiprofWarning, stacklevel=2)
    if single_file:
        return traces[0]
    root = Path(paths[0]) if len(paths) == 1 else None
    return RunSet(sorted(traces, key=lambda t: t.rank), root=root, warnings=notes + skipped)


class _Programmed(Protocol):
    path: Path
    program: str


def check_one_program(traces: Sequence[Trace] | Sequence[_Programmed]) -> None:
    """Several Nsight Systems reports are ranks of one run only when they record the same program: reports
    of different programs (or a mix of formats) are refused, never merged into one run."""
    from aiprof.trace.readers import program_of

    programs: dict[str, Path] = {}
    for trace in traces:
        program = program_of(trace) if isinstance(trace, Trace) else trace.program
        programs.setdefault(program, trace.path)
    named = [p for p in programs if p != "nsys"]  # a report that names no process conflicts with none
    mixed = "kineto" in programs and len(programs) > 1
    if mixed or (len(named) > 1 and any(p.startswith("nsys") for p in named)):
        listed = ", ".join(f"{p.name} ({prog})" for prog, p in programs.items())
        raise TraceError(
            f"these files record different programs and are not the ranks of one run: {listed}; "
            "analyze each file on its own (aiprof analyze FILE)"
        )


def _load_all(
    files: list[tuple[Path, bool, ReaderOptions]], workers: int | None, progress: ProgressCallback | None
) -> list[list[Trace] | str]:
    return map_files(_load_one, files, workers, progress)


J = TypeVar("J", bound=tuple[Any, ...])
O = TypeVar("O")


def map_files(
    fn: Callable[[J], O],
    jobs: list[J],
    workers: int | None,
    progress: ProgressCallback | None,
    executor: Executor | None = None,
    watch: Watch[J, O] | None = None,
) -> list[O]:
    """``fn`` over jobs whose first item is a file path, on ``executor`` (None: this machine's process
    pool, :func:`local_map`), in order, reporting progress (and, with ``watch``, failed files: its
    ``progress`` is ``progress`` when it has none)."""
    if watch is None:
        watch = Watch(progress=progress)
    elif watch.progress is None:
        watch = dataclasses.replace(watch, progress=progress)
    if executor is None or executor.name == "local":
        return local_map(fn, jobs, workers, watch)
    return executor.map(fn, jobs, workers, watch)


class Rankable(Protocol):
    """What rank numbering needs: a Trace, or a lighter record of one loaded in another process."""

    path: Path
    distributed: dict[str, Any]
    rank: int
    rank_source: str


R = TypeVar("R", bound=Rankable)


def assign_ranks(traces: list[R]) -> list[str]:
    """Number ranks in place; return warnings. Sources, in order: distributedInfo, file name, order."""
    from_info = [_info_rank(t) for t in traces]
    if all(r is not None for r in from_info) and _unique(from_info):
        for trace, rank in zip(traces, from_info):
            trace.rank, trace.rank_source = int(rank or 0), "distributedInfo"
        return []
    from_name = [rank_from_name(t.path) for t in traces]
    if all(r is not None for r in from_name) and _unique(from_name):
        for trace, rank in zip(traces, from_name):
            trace.rank, trace.rank_source = int(rank or 0), "file name"
        return []
    for i, trace in enumerate(traces):
        trace.rank, trace.rank_source = i, "file order"
    notes: list[str] = []
    for label, values in (("distributedInfo", from_info), ("file names", from_name)):
        dupes = _duplicates(values)
        if dupes:
            rank, count = dupes[0]
            notes.append(
                f"{count} files claim rank {rank} in their {label}; they are kept apart and numbered "
                f"0..{len(traces) - 1} by file order"
            )
            break
    return notes


def _info_rank(trace: Rankable) -> int | None:
    rank = trace.distributed.get("rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None


def _unique(values: list[int | None]) -> bool:
    return len(set(values)) == len(values)


def _duplicates(values: list[int | None]) -> list[tuple[int, int]]:
    counts: dict[int, int] = {}
    for v in values:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    return [(v, c) for v, c in sorted(counts.items()) if c > 1]
