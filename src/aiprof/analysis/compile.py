"""torch.compile seen in a trace: compilation work, compiled regions, guard checks, and what made Dynamo
compile again.

What PyTorch records (torch 2.x; the names are stable across 2.1-2.13, older ones kept):

* **Compilation** (Dynamo tracing, AOTAutograd, Inductor lowering and code generation, the wait for the
  compile workers, autotuning) is a nest of CPU spans, one per ``dynamo_timed`` phase: ``dynamo`` /
  ``entire_frame_compile`` / ``_compile.compile_inner (dynamo_timed)`` around a whole frame's compile,
  ``OutputGraph.call_user_compiler``, ``create_aot_dispatcher_function``, ``compile_fx…``, ``inductor_compile``,
  ``fx_codegen_and_compile``, ``async_compile.wait``, ``CachingAutotuner.benchmark_all_configs``… and beside
  them ``<phase>_data: compile_id=F/C`` annotations naming the compile (frame F, its C-th compile).
  :data:`COMPILE_WORK` matches them; their union per thread is the compile time.
* **Compiled code running**: ``Torch-Compiled Region: F/C`` (``Torch-Compiled Region`` before 2.4), the
  graph Dynamo compiled for frame F on its C-th compile, around ``CompiledFunction`` (AOTAutograd's forward,
  with the graph's inputs recorded) and ``## Call CompiledFxGraph <hash> ##``.
* **Guard checks**: ``TorchDynamo Cache Lookup`` before each call of a compiled frame: the guards of its
  cached graphs are evaluated; when none passes, Dynamo compiles again (a recompile: compile C ≥ 1).

A compile of id F/0 is a frame's first compile, paid once per process (a cold start); F/C with C ≥ 1 is a
recompile, whose cause the trace shows by comparing the inputs recorded for the graphs F/C−1 and F/C:
another shape (``shape``), another dtype (``dtype``), or the same tensors, so a guard on something else
failed — a Python number, a global, a module attribute, grad mode (``guard``).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.analysis import intervals as iv
from aiprof.analysis.inductor import CompiledKernels, compiled_kernels, compiled_kernels_section
from aiprof.trace.model import I64, Kind, Trace

# Spans of compilation work. Anchored names, so a user's "compile_data" range or a library's Python
# frame (python_function rows are never looked at) is not taken for Dynamo's.
COMPILE_WORK = (
    r"^(dynamo$|entire_frame_compile|_compile\.|compile_attempt_|backend_compile|OutputGraph\.call_user_compiler"
    r"|create_aot_dispatcher_function|aot_collect_metadata|aot_trace_joint_graph|compile_fx|inductor_compile"
    r"|fx_codegen_and_compile|async_compile\.|PyCodeCache\.|GraphLowering\.|Scheduler\.|code_gen$|compile_file"
    r"|CachingAutotuner\.|autotune_select_algorithm|select_algorithm|AlgorithmSelectorCache\."
    r"|TritonBundler\.|inductor_codecache|min_cut_rematerialization|_recursive_(pre|joint|post)_grad_passes"
    r"|bytecode_tracing|build_guards|.* \(dynamo_timed\)$|.*_data: .*compile_id=)"
)
COMPILED_REGION = r"^Torch-Compiled Region"
CACHE_LOOKUP = r"^TorchDynamo Cache Lookup"
COMPILED_FUNCTION = r"^CompiledFunction$"
_ID = re.compile(r"compile_id=\[?(\d+)/(\d+)|^Torch-Compiled Region: \[?(\d+)/(\d+)")
_HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION)
MAX_EVENTS = 200  # compile events kept in the report (the longest)


@dataclass(frozen=True)
class CompileEvent:
    """One span of compile work: a maximal stretch of it on one thread, with the compile it belongs to (a
    compile is one or more spans: :class:`Compilation`)."""

    row: int  # the outermost span it starts with
    start_ns: int
    end_ns: int
    pid: int
    tid: int
    frame: int | None  # Dynamo's frame id (F of F/C), None when the trace names no compile id
    attempt: int | None  # C of F/C: 0 is the frame's first compile, >= 1 a recompile
    cause: str  # "first compile" | "shape" | "dtype" | "guard" | "unknown"
    detail: str  # what changed ("input 2: [4, 16] -> [5, 16]"), '' when nothing is known
    guard: str = ""  # the guard that failed, as Dynamo words it, from the run's dynamo.rank<N>.json

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def recompile(self) -> bool:
        return self.attempt is not None and self.attempt >= 1

    @property
    def compile_id(self) -> str | None:
        return None if self.frame is None else f"{self.frame}/{self.attempt}"



class CompileRecord(msgspec.Struct, kw_only=True):
    """One compilation in the report (``compile.events``): when it started, its compile time (``dur_ns``:
    the union of its ``spans``), its compile id F/C and, for a recompile, why (``cause``: first compile,
    shape, dtype, guard, unknown) and what changed."""

    start_ns: int
    dur_ns: int
    compile_id: str | None
    recompile: bool
    cause: str
    detail: str
    spans: int = 1  # spans of compile work it is made of (forward, backward, first-call autotuning…)
    # The guard that failed, as Dynamo words it ("0/0: tensor 'x' size mismatch at index 0. expected 4,
    # actual 5"), when the run directory has Dynamo's compile records (aiprof.capture.dynamo)
    guard: str | UnsetType = UNSET


def compile_rows(trace: Trace) -> I64:
    """Rows of compile work (CPU ops and annotations named like Dynamo/Inductor phases), in time order."""
    rows = trace.rows_of(*_HOST_KINDS)
    return rows[trace.name_matches(rows, COMPILE_WORK)]


def compile_set(trace: Trace, pids: I64 | None = None) -> iv.IntervalSet:
    """The time spent compiling (of the given processes, else all), as one merged interval set (cached)."""
    key = "compile.set:" + ("all" if pids is None else ",".join(str(p) for p in np.sort(pids).tolist()))
    cached: iv.IntervalSet | None = trace.cache.get(key)
    if cached is None:
        c = trace.columns
        rows = compile_rows(trace)
        if pids is not None:
            rows = rows[np.isin(c.pid[rows], pids)]
        cached = trace.cache[key] = iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])
    return cached


def compile_events(trace: Trace) -> list[CompileEvent]:
    """Every span of compile work in the trace, by start time (cached): the compile spans merged per
    thread, each with its compile id and, for a recompile, what changed in the graph's inputs. One compile
    is several spans (Dynamo's trace, the backward graph's compile on the autograd thread, autotuning and
    CUDA-graph set-up at the graph's first call): :func:`compilations` groups them by compile id."""
    cached: list[CompileEvent] | None = trace.cache.get("compile.events")
    if cached is not None:
        return cached
    c = trace.columns
    rows = compile_rows(trace)
    regions = compiled_regions(trace)
    region_starts = np.array([r.start_ns for r in regions], dtype=np.int64)
    by_thread: dict[tuple[int, int], list[Region]] = {}
    for r in regions:
        by_thread.setdefault((r.pid, r.tid), []).append(r)
    events: list[CompileEvent] = []
    causes: dict[tuple[int, int], tuple[str, str]] = {}
    guards = recompile_reasons(trace)
    for pid, tid in sorted({(int(p), int(t)) for p, t in zip(c.pid[rows].tolist(), c.tid[rows].tolist())}):
        mine = rows[(c.pid[rows] == pid) & (c.tid[rows] == tid)]
        starts, ends = iv.merge(c.ts[mine], c.ts[mine] + c.dur[mine])
        first = np.searchsorted(c.ts[mine], starts, side="left")
        last = np.searchsorted(c.ts[mine], ends, side="left")
        for lo, hi, i, j in zip(starts.tolist(), ends.tolist(), first.tolist(), last.tolist()):
            ident = (_first_id(trace, mine[i:j])
                     or _enclosing_region_id(trace, by_thread.get((pid, tid), []), mine[i:j], lo, hi)
                     or _next_region_id(regions, region_starts, pid, tid, hi))
            frame, attempt = ident if ident else (None, None)
            key = (frame, attempt) if frame is not None and attempt is not None else None
            if key is not None and key not in causes:
                causes[key] = _cause(trace, regions, frame, attempt)
            cause, detail = causes[key] if key is not None else ("unknown", "")
            guard = guards.get(f"{frame}/{attempt}", "") if key is not None and attempt else ""
            if guard:
                cause = guard_cause(guard) if guard_cause(guard) != "unknown" else cause
            events.append(CompileEvent(int(mine[i]), lo, hi, pid, tid, frame, attempt, cause, detail, guard))
    events.sort(key=lambda e: e.start_ns)
    trace.cache["compile.events"] = events
    return events


@dataclass(frozen=True)
class Compilation:
    """One compile of a frame (compile id F/C in one process): every span of compile work that names it or
    runs for it, on any thread. A compiled training graph is compiled in several spans (the forward in
    Dynamo's trace, the backward on the autograd thread when the backward first runs, lazy autotuning and
    CUDA-graph set-up inside the graph's first call); they are one compilation, and their union its time.
    Spans the trace names no compile id for are each a compilation of their own."""

    spans: tuple[CompileEvent, ...]  # by start time

    @property
    def first(self) -> CompileEvent:
        return self.spans[0]

    @property
    def pid(self) -> int:
        return self.first.pid

    @property
    def frame(self) -> int | None:
        return self.first.frame

    @property
    def attempt(self) -> int | None:
        return self.first.attempt

    @property
    def cause(self) -> str:
        return self.first.cause

    @property
    def detail(self) -> str:
        return self.first.detail

    @property
    def recompile(self) -> bool:
        return self.first.recompile

    @property
    def guard(self) -> str:
        return self.first.guard

    @property
    def compile_id(self) -> str | None:
        return self.first.compile_id

    @property
    def start_ns(self) -> int:
        return self.first.start_ns

    def intervals(self) -> iv.IntervalSet:
        """Its compile time as a merged interval set (spans on several threads may overlap: counted once)."""
        return iv.merge(np.array([e.start_ns for e in self.spans], dtype=np.int64),
                        np.array([e.end_ns for e in self.spans], dtype=np.int64))

    @property
    def dur_ns(self) -> int:
        """Its compile time: the union of its spans (not first start to last end: the step runs between)."""
        return iv.total(self.intervals())

    def record(self) -> CompileRecord:
        """The report's row for this compilation."""
        return CompileRecord(start_ns=self.start_ns, dur_ns=self.dur_ns, compile_id=self.compile_id,
                             recompile=self.recompile, cause=self.cause, detail=self.detail, spans=len(self.spans),
                             guard=self.guard or UNSET)


def compilations(trace: Trace) -> list[Compilation]:
    """The compilations of the trace by first start (cached): :func:`compile_events` grouped by process and
    compile id, so a compile seen as several spans counts once."""
    cached: list[Compilation] | None = trace.cache.get("compile.compilations")
    if cached is not None:
        return cached
    groups: dict[tuple[int, int, int] | int, list[CompileEvent]] = {}
    for e in compile_events(trace):  # by start
        key = (e.pid, e.frame, e.attempt) if e.frame is not None and e.attempt is not None else e.row
        groups.setdefault(key, []).append(e)
    cached = sorted((Compilation(tuple(spans)) for spans in groups.values()), key=lambda k: k.start_ns)
    trace.cache["compile.compilations"] = cached
    return cached


@dataclass(frozen=True)
class Region:
    """One call of a compiled graph (a ``Torch-Compiled Region`` span) and the graph's compile id."""

    row: int
    pid: int
    tid: int
    start_ns: int
    end_ns: int
    frame: int | None
    attempt: int | None

    @property
    def compile_id(self) -> str | None:
        return None if self.frame is None else f"{self.frame}/{self.attempt}"


def compiled_regions(trace: Trace) -> list[Region]:
    """The compiled regions in time order, with their ids (cached)."""
    cached: list[Region] | None = trace.cache.get("compile.regions")
    if cached is None:
        c = trace.columns
        rows = trace.rows_of(*_HOST_KINDS)
        cached = []
        for row in rows[trace.name_matches(rows, COMPILED_REGION)].tolist():
            ident = _parse_id(trace.name_of(row))
            cached.append(Region(row, int(c.pid[row]), int(c.tid[row]), int(c.ts[row]), int(c.ts[row] + c.dur[row]),
                                 ident[0] if ident else None, ident[1] if ident else None))
        trace.cache["compile.regions"] = cached
    return cached


def _parse_id(name: str) -> tuple[int, int] | None:
    m = _ID.search(name)
    if not m:
        return None
    frame, attempt = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
    return int(frame), int(attempt)


def _first_id(trace: Trace, rows: I64) -> tuple[int, int] | None:
    for row in rows.tolist():
        ident = _parse_id(trace.name_of(row))
        if ident:
            return ident
    return None


def _next_region_id(regions: list[Region], starts: I64, pid: int, tid: int, after_ns: int) -> tuple[int, int] | None:
    """The id of the first compiled region on the thread after the compile: the graph it produced."""
    for r in regions[int(np.searchsorted(starts, after_ns, side="left")) :]:
        if r.pid == pid and r.tid == tid:
            return (r.frame, r.attempt) if r.frame is not None and r.attempt is not None else None
    return None


# Spans that compile a whole frame: run inside a compiled region they compile another frame (the resume
# function after a graph break), not the region's graph.
_FRAME_COMPILE = r"^(dynamo$|entire_frame_compile|_compile\.)"
_ENCLOSING_SCAN = 256  # earlier regions of the thread looked at for one that encloses a span


def _enclosing_region_id(trace: Trace, regions: list[Region], rows: I64, lo: int, hi: int) -> tuple[int, int] | None:
    """The id of the innermost compiled region of the thread (``regions``, by start) that encloses the span
    [lo, hi): work done lazily at a graph's first call (autotuning, ``cudagraphify`` and CUDA-graph
    recording) is that graph's compile. None for a span that compiles a frame (its own graph)."""
    if not regions or trace.name_matches(rows, _FRAME_COMPILE).any():
        return None
    at = bisect.bisect_right([r.start_ns for r in regions], lo)
    for r in reversed(regions[max(at - _ENCLOSING_SCAN, 0) : at]):
        if r.end_ns >= hi and r.frame is not None and r.attempt is not None:
            return r.frame, r.attempt
    return None


# Dynamo's guard-failure wording (torch 2.x guards.py): tensor checks name what failed; anything else is
# a guard on a Python value, an object's identity, a global or grad mode.
_SHAPE_GUARD = re.compile(r"size mismatch|stride mismatch|storage_offset mismatch|(dim|rank|ndim)\w* mismatch"
                          r"|\.size\(\)|\.stride\(\)|\bsize\[\d+\]|\bNe\(|\bEq\(", re.IGNORECASE)
_DTYPE_GUARD = re.compile(r"dtype mismatch|\.dtype\b", re.IGNORECASE)
_NO_REASON = re.compile(r"unable to find recompilation reasons", re.IGNORECASE)


def guard_cause(text: str) -> str:
    """The recompile cause a Dynamo guard failure names: ``shape``, ``dtype``, ``guard`` (any other
    guard), or ``unknown`` when Dynamo found none."""
    if not text.strip() or _NO_REASON.search(text):
        return "unknown"
    if _DTYPE_GUARD.search(text):
        return "dtype"
    if _SHAPE_GUARD.search(text):
        return "shape"
    return "guard"


def recompile_reasons(trace: Trace) -> dict[str, str]:
    """Compile id F/C -> the guard failure Dynamo recorded for it, from the run directory the trace is in
    (``dynamo.rank<N>.json``, written by ``aiprof run`` / ``aiprof.profile``); empty without one (cached)."""
    cached: dict[str, str] | None = trace.cache.get("compile.guards")
    if cached is None:
        from pathlib import Path

        from aiprof import rundir

        found = rundir.owner_of(Path(trace.path)) if trace.path else None
        path = found.dynamo_path(Path(trace.path)) if found is not None else None
        cached = trace.cache["compile.guards"] = rundir.read_recompile_reasons(path) if path is not None else {}
    return cached


def _cause(trace: Trace, regions: list[Region], frame: int | None, attempt: int | None) -> tuple[str, str]:
    """Why frame F compiled for the C-th time: compare the inputs of graph F/C with those of F/C−1."""
    if frame is None or attempt is None:
        return "unknown", ""
    if attempt == 0:
        return "first compile", ""
    new = _signature_of_graph(trace, regions, frame, attempt)
    old = next((x for a in range(attempt - 1, -1, -1) if (x := _signature_of_graph(trace, regions, frame, a))), None)
    if new is None or old is None:
        return "unknown", ""
    return _compare(old, new)


# A graph's inputs as recorded: (label, shapes, dtypes) per recorded call, in order. The label is '' for
# the graph's own inputs (``CompiledFunction``), else the name of the op whose inputs they are.
Signature = list[tuple[str, list[Any], list[Any]]]
MAX_SIGNATURE_OPS = 256  # ops of a graph's first call compared when the graph's own inputs are not recorded


def _compare(old: Signature, new: Signature) -> tuple[str, str]:
    """``shape`` / ``dtype`` with what changed, or ``guard`` (the same tensors: another guard failed), from
    the calls the two signatures share in order (up to the first that differs in name)."""
    shapes: dict[str, str] = {}  # what changed -> where it is first seen (one line per distinct change)
    dtypes: dict[str, str] = {}
    compared = 0
    for (name, dims_a, types_a), (other, dims_b, types_b) in zip(old, new):
        if name != other:
            break
        compared += 1
        where = f"{name} input" if name else "input"
        if len(dims_a) != len(dims_b):
            shapes.setdefault(f"{len(dims_a)} -> {len(dims_b)} inputs", name or "graph")
        for found, a, b in ((shapes, dims_a, dims_b), (dtypes, types_a, types_b)):
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    found.setdefault(f"{x} -> {y}", f"{where} {i}")
    for kind, found in (("shape", shapes), ("dtype", dtypes)):
        if found:
            return kind, "; ".join(f"{at}: {change}" for change, at in list(found.items())[:3])
    if not compared:
        return "unknown", ""
    return "guard", "same input shapes and dtypes"


def _signature_of_graph(trace: Trace, regions: list[Region], frame: int, attempt: int) -> Signature | None:
    for r in regions:
        if (r.frame, r.attempt) == (frame, attempt):
            found = _signature(trace, r)
            if found:
                return found
    return None


def _signature(trace: Trace, region: Region) -> Signature | None:
    """What ``record_shapes`` recorded for one call of a graph: the graph's inputs (its region's own args,
    else its ``CompiledFunction``, AOTAutograd's forward), else the inputs of the ops run in the call
    (inference graphs have no ``CompiledFunction``; with CUDA graph trees the first call runs the ops),
    compile work inside the call left out. None when nothing was recorded."""
    own = trace.op_inputs(region.row)
    if own.dims or own.types:
        return [("", list(own.dims), list(own.types))]
    c = trace.columns
    rows = trace.rows_of(*_HOST_KINDS)
    funcs = rows[trace.name_matches(rows, COMPILED_FUNCTION)]
    at = int(np.searchsorted(c.ts[funcs], region.start_ns, side="left"))
    for row in funcs[at : at + 8].tolist():  # the first on the region's thread, inside it
        if int(c.ts[row]) >= region.end_ns:
            break
        if int(c.pid[row]) == region.pid and int(c.tid[row]) == region.tid:
            recorded = trace.op_inputs(row)
            if recorded.dims or recorded.types:
                return [("", list(recorded.dims), list(recorded.types))]
            break
    ops = outside_compile(trace, _on_thread(trace, trace.rows_of(Kind.CPU_OP), region))
    out: Signature = []
    for row in ops.tolist():
        recorded = trace.op_inputs(row)
        if any(d for d in recorded.dims):  # an op with a tensor input (factories have only scalars)
            out.append((trace.name_of(row), list(recorded.dims), list(recorded.types)))
            if len(out) >= MAX_SIGNATURE_OPS:
                break
    return out or None


class GraphCalls(msgspec.Struct, kw_only=True):
    """The calls of one compiled graph (``Torch-Compiled Region: F/C``) and their host time."""

    compile_id: str | None
    calls: int
    total_ns: int


class CompiledRegions(msgspec.Struct, kw_only=True):
    """Every ``Torch-Compiled Region`` call, their host time, and the same per compiled graph."""

    calls: int
    total_ns: int
    graphs: list[GraphCalls]


class CacheLookups(msgspec.Struct, kw_only=True):
    """Dynamo's guard checks (``TorchDynamo Cache Lookup``) before each call of a compiled frame."""

    calls: int
    total_ns: int


class GraphLaunchStep(msgspec.Struct, kw_only=True):
    """One step's CUDA/HIP graph replays, eager kernel launches (outside capture) and graph captures."""

    name: str
    graph_replays: int
    eager_launches: int
    captures: int


class CudaGraphLaunches(msgspec.Struct, kw_only=True):
    """Graph replays against eager kernel launches (``compile.cuda_graphs``): what ``mode="reduce-overhead"``
    (CUDA graph trees) turns eager launches into. ``steps`` holds the first 200 steps; ``recaptured_steps``
    counts the steps after the first that capture a graph again (re-recording)."""

    graph_replays: int
    eager_launches: int
    captures: int
    replay_share: float
    steps: list[GraphLaunchStep]
    recaptured_steps: int


class CompileReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The report's ``compile`` section (``RankReport.compile``). Only ``compiled: false`` for a trace
    without torch.compile work, compiled regions, guard checks or Inductor kernels; else every field but
    ``cuda_graphs`` (absent without any kernel launch) is set. ``compiles``/``recompiles`` count
    compilations (:class:`Compilation`: one per compile id, however many spans it is seen as); ``events``
    keeps the :data:`MAX_EVENTS` longest, by start."""

    compiled: bool
    compile_ns: int | UnsetType = UNSET
    compiles: int | UnsetType = UNSET
    recompiles: int | UnsetType = UNSET
    frames: int | UnsetType = UNSET
    events: list[CompileRecord] | UnsetType = UNSET
    regions: CompiledRegions | UnsetType = UNSET
    cache_lookups: CacheLookups | UnsetType = UNSET
    kernels: CompiledKernels | UnsetType = UNSET
    cuda_graphs: CudaGraphLaunches | UnsetType = UNSET


def compile_section(trace: Trace) -> CompileReport:
    """The report's ``compile`` section: compilations, compiled regions and guard checks (only
    ``compiled: false`` when the trace shows no torch.compile)."""
    c = trace.columns
    rows = trace.rows_of(*_HOST_KINDS)
    regions = rows[trace.name_matches(rows, COMPILED_REGION)]
    lookups = rows[trace.name_matches(rows, CACHE_LOOKUP)]
    events = compile_events(trace)
    if not events and not regions.size and not lookups.size and not compiled_kernels(trace):
        return CompileReport(compiled=False)
    launches = graph_launches(trace)
    graphs: dict[str, GraphCalls] = {}
    for r in compiled_regions(trace):
        g = graphs.setdefault(r.compile_id or "?", GraphCalls(compile_id=r.compile_id, calls=0, total_ns=0))
        g.calls += 1
        g.total_ns += r.end_ns - r.start_ns
    compiles = compilations(trace)
    kept = sorted(compiles, key=lambda k: -k.dur_ns)[:MAX_EVENTS]
    return CompileReport(
        compiled=True,
        compile_ns=iv.total(compile_set(trace)),
        compiles=len(compiles),
        recompiles=sum(k.recompile for k in compiles),
        frames=len({e.frame for e in events if e.frame is not None} | {r.frame for r in compiled_regions(trace) if r.frame is not None}),
        events=[k.record() for k in sorted(kept, key=lambda k: k.start_ns)],
        regions=CompiledRegions(calls=int(regions.size), total_ns=int(c.dur[regions].sum()), graphs=list(graphs.values())),
        cache_lookups=CacheLookups(calls=int(lookups.size), total_ns=int(c.dur[lookups].sum())),
        kernels=compiled_kernels_section(trace),
        cuda_graphs=launches if launches is not None else UNSET,
    )


# ---------------------------------------------------------------------------------------------------
# Graph breaks
# ---------------------------------------------------------------------------------------------------
GRAPH_CALL = r"^(CompiledFunction$|## Call CompiledFxGraph)"
# Dynamo's own spans around and between graph calls: not the user's eager code.
_BOOKKEEPING = r"^(TorchDynamo Cache Lookup|Torch-Compiled Region|Pregraph bytecode|AOTDispatcher|CompiledFunction|## Call CompiledFxGraph)"
_RESUME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): torch_dynamo_resume_in_(?P<fn>.+)_at_(?P=line)$")


@dataclass(frozen=True)
class GraphBreak:
    """One boundary between two compiled graphs inside one call of a compiled frame: the eager code Dynamo
    could not compile ran in ``[start_ns, end_ns)`` (compile work inside it not counted in ``eager_ns``)."""

    region_row: int  # the outermost Torch-Compiled Region call it is in
    index: int  # 0 for the first boundary of that call, 1 for the next…
    start_ns: int
    end_ns: int
    eager_ns: int
    ops: tuple[int, ...]  # outermost CPU ops run at the break, by time (rows)
    resume_at: str  # "train.py:42 (forward)": where Dynamo resumed after the break (Python stacks), else ''


def graph_breaks(trace: Trace) -> list[GraphBreak]:
    """Every graph break of every call of a compiled frame (cached): the gaps between consecutive graph
    calls (``CompiledFunction`` / ``## Call CompiledFxGraph``) inside one outermost ``Torch-Compiled Region``
    call, on its thread. A frame compiled whole runs one graph per call and has none."""
    cached: list[GraphBreak] | None = trace.cache.get("compile.graph_breaks")
    if cached is not None:
        return cached
    c = trace.columns
    host = trace.rows_of(*_HOST_KINDS)
    calls = host[trace.name_matches(host, GRAPH_CALL)]
    ops = trace.rows_of(Kind.CPU_OP)
    eager = outside_compile(trace, ops[~trace.name_matches(ops, _BOOKKEEPING)])
    python = trace.rows_of(Kind.PYTHON)
    resumes = python[trace.name_matches(python, r"torch_dynamo_resume_in_")]
    compiling = compile_set(trace)
    out: list[GraphBreak] = []
    for region in _outermost(compiled_regions(trace)):
        mine = _on_thread(trace, calls, region)
        graphs = iv.merge(c.ts[mine], c.ts[mine] + c.dur[mine])
        for k in range(graphs[0].size - 1):
            lo, hi = int(graphs[1][k]), int(graphs[0][k + 1])
            gap_ops = _outermost_rows(trace, _on_thread(trace, eager, region, lo, hi))
            gap = iv.as_set([lo], [hi])
            out.append(GraphBreak(region.row, k, lo, hi, iv.total(iv.subtract(gap, compiling)), tuple(gap_ops.tolist()),
                                  _resume_at(trace, _on_thread(trace, resumes, region, lo, region.end_ns))))
    trace.cache["compile.graph_breaks"] = out
    return out


def _outermost(regions: list[Region]) -> list[Region]:
    """Regions not nested in another region of their thread (a resume function's region runs inside the
    region of the frame that broke)."""
    out: list[Region] = []
    open_end: dict[tuple[int, int], int] = {}
    for r in regions:  # time order
        key = (r.pid, r.tid)
        if r.start_ns >= open_end.get(key, -1):
            out.append(r)
            open_end[key] = r.end_ns
    return out


def _on_thread(trace: Trace, rows: I64, region: Region, lo: int | None = None, hi: int | None = None) -> I64:
    """``rows`` (time-ordered) of the region's thread starting in [lo, hi) (default: the region's span)."""
    c = trace.columns
    lo = region.start_ns if lo is None else lo
    hi = region.end_ns if hi is None else hi
    a, b = np.searchsorted(c.ts[rows], [lo, hi], side="left")
    cand = rows[a:b]
    found: I64 = cand[(c.pid[cand] == region.pid) & (c.tid[cand] == region.tid)]
    return found


def _outermost_rows(trace: Trace, rows: I64) -> I64:
    """Rows (time-ordered, one thread) not inside an earlier row of the set."""
    c = trace.columns
    keep = np.ones(rows.size, dtype=bool)
    end = -1
    for i, (ts, dur) in enumerate(zip(c.ts[rows].tolist(), c.dur[rows].tolist())):
        if ts < end:
            keep[i] = False
        else:
            end = ts + dur
    kept: I64 = rows[keep]
    return kept


def _resume_at(trace: Trace, resumes: I64) -> str:
    """``file.py:N (fn)`` from the first resume frame (``file.py(N): torch_dynamo_resume_in_fn_at_N``): the
    Python line where the graph broke."""
    for row in resumes.tolist():
        m = _RESUME.match(trace.name_of(row))
        if m:
            return f"{m.group('file')}:{m.group('line')} ({m.group('fn')})"
    return ""


def outside_compile(trace: Trace, rows: I64) -> I64:
    """The rows that do not start inside compile work: the model's own ops, not the compiler's."""
    starts, ends = compile_set(trace)
    if starts.size == 0:
        return rows
    ts = trace.columns.ts[rows]
    idx = np.searchsorted(starts, ts, side="right") - 1
    inside = (idx >= 0) & (ts < ends[np.maximum(idx, 0)])
    kept: I64 = rows[~inside]
    return kept


# ---------------------------------------------------------------------------------------------------
# CUDA / HIP graphs: replays against eager launches
# ---------------------------------------------------------------------------------------------------
GRAPH_REPLAY = r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)"
KERNEL_LAUNCH = r"(LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|ExtModuleLaunchKernel)"


def graph_launches(trace: Trace) -> CudaGraphLaunches | None:
    """Per step: graph replays (``cudaGraphLaunch``…) and eager kernel launches executed outside capture
    ranges (a launch recorded into a graph under capture is not executed), and graph captures: what
    ``mode="reduce-overhead"`` (CUDA graph trees) turns eager launches into. None without any launch."""
    from aiprof.analysis.graphs import BEGIN_CAPTURE, captured_mask, launch_rows
    from aiprof.analysis.steps import step_windows

    c = trace.columns
    rows = launch_rows(trace)
    if rows.size == 0:
        return None
    rows = rows[~captured_mask(trace, rows)]
    replays = rows[trace.name_matches(rows, GRAPH_REPLAY)]
    eager = rows[trace.name_matches(rows, KERNEL_LAUNCH) & ~trace.name_matches(rows, GRAPH_REPLAY)]
    runtime = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    captures = runtime[trace.name_matches(runtime, BEGIN_CAPTURE)]
    windows = step_windows(trace)
    starts = np.array([w.start_ns for w in windows], dtype=np.int64)
    ends = np.array([w.end_ns for w in windows], dtype=np.int64)

    def per_step(found: I64) -> list[int]:
        ts = c.ts[found]
        return [int(((ts >= a) & (ts < b)).sum()) for a, b in zip(starts.tolist(), ends.tolist())]

    steps = [GraphLaunchStep(name=w.name, graph_replays=r, eager_launches=e, captures=k)
             for w, r, e, k in zip(windows, per_step(replays), per_step(eager), per_step(captures))]
    total = int(replays.size + eager.size)
    return CudaGraphLaunches(
        graph_replays=int(replays.size),
        eager_launches=int(eager.size),
        captures=int(captures.size),
        replay_share=replays.size / total if total else 0.0,
        steps=steps[:200],
        recaptured_steps=sum(1 for s in steps[1:] if s.captures),
    )


# CUDA graph trees (``mode="reduce-overhead"``): a graph's container is set up at its first call
# (``cudagraphify.get_container``), which runs eagerly (warm-up); the second call records the graph
# (``CUDAGraphNode.record``, a stream capture) and replays it, later calls replay it.
GRAPH_TREES = r"^(cudagraphify|CUDAGraphNode\.|CUDAGraphTreeManager)"
GRAPH_SETUP = r"^(cudagraphify\.get_container|CUDAGraphNode\.record)"
_COMPILED_GRAPH = r"^(Torch-Compiled Region|CompiledFunctionBackward$)"


@dataclass(frozen=True)
class GraphUse:
    """How one window (a step) ran the CUDA/HIP graphs: ``replays`` (graph launches executed), ``eager``
    kernel launches executed outside capture, of them ``eager_in_compiled`` inside a compiled graph's call
    (a ``Torch-Compiled Region`` or its ``CompiledFunctionBackward``, compile work left out: the launches a
    replay of that graph would replace) and their host time ``eager_in_compiled_ns``,
    ``region_calls`` (outermost compiled-region calls) and ``setups``: new graphs set up or recorded (CUDA
    graph trees' ``cudagraphify.get_container`` / ``CUDAGraphNode.record`` spans, stream captures)."""

    replays: int
    eager: int
    eager_in_compiled: int
    eager_in_compiled_ns: int
    region_calls: int
    setups: int


def uses_graph_trees(trace: Trace) -> bool:
    """Whether the trace shows CUDA graph trees at work (``mode="reduce-overhead"`` took the graph)."""
    rows = trace.rows_of(*_HOST_KINDS)
    return bool(trace.name_matches(rows, GRAPH_TREES).any())


def graph_use(trace: Trace, windows: list[tuple[int, int]]) -> list[GraphUse]:
    """Per window [start, end): graph replays against eager launches, and new graphs set up (see
    :class:`GraphUse`). Launch calls recorded into a graph under capture are not executed: left out."""
    from aiprof.analysis.graphs import BEGIN_CAPTURE, captured_mask, launch_rows

    c = trace.columns
    rows = launch_rows(trace)
    rows = rows[~captured_mask(trace, rows)]
    replays = rows[trace.name_matches(rows, GRAPH_REPLAY)]
    eager = rows[trace.name_matches(rows, KERNEL_LAUNCH) & ~trace.name_matches(rows, GRAPH_REPLAY)]
    outer = _outermost(compiled_regions(trace))
    host = trace.rows_of(*_HOST_KINDS)
    graphs = host[trace.name_matches(host, _COMPILED_GRAPH)]  # a backward graph runs on the autograd thread
    inside = np.zeros(eager.size, dtype=bool)
    for pid, tid in {(int(p), int(t)) for p, t in zip(c.pid[graphs].tolist(), c.tid[graphs].tolist())}:
        sel = np.flatnonzero((c.pid[eager] == pid) & (c.tid[eager] == tid))
        mine = graphs[(c.pid[graphs] == pid) & (c.tid[graphs] == tid)]
        starts, ends = iv.merge(c.ts[mine], c.ts[mine] + c.dur[mine])
        k = np.searchsorted(starts, c.ts[eager[sel]], side="right") - 1
        inside[sel] = (k >= 0) & (c.ts[eager[sel]] < ends[np.maximum(k, 0)])
    compiled_launches = outside_compile(trace, eager[inside])  # not autotuning's benchmark launches
    runtime = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    setups = np.sort(np.concatenate([host[trace.name_matches(host, GRAPH_SETUP) & ~trace.name_matches(host, r"_data: ")],
                                     runtime[trace.name_matches(runtime, BEGIN_CAPTURE)]]))
    region_starts = np.array([r.start_ns for r in outer], dtype=np.int64)

    def count(found: I64, lo: int, hi: int) -> I64:
        a, b = np.searchsorted(c.ts[found], [lo, hi], side="left")
        picked: I64 = found[a:b]
        return picked

    out: list[GraphUse] = []
    for lo, hi in windows:
        mine = count(compiled_launches, lo, hi)
        a, b = np.searchsorted(region_starts, [lo, hi], side="left")
        setup_rows = setups[(c.ts[setups] >= lo) & (c.ts[setups] < hi)]
        out.append(GraphUse(replays=int(count(replays, lo, hi).size), eager=int(count(eager, lo, hi).size),
                            eager_in_compiled=int(mine.size), eager_in_compiled_ns=int(c.dur[mine].sum()),
                            region_calls=int(b - a), setups=_distinct_setups(trace, setup_rows)))
    return out


def _distinct_setups(trace: Trace, rows: I64) -> int:
    """New graphs among set-up rows: nested spans of one set-up (``cudagraphify.get_container`` around its
    ``(dynamo_timed)`` span) count once."""
    c = trace.columns
    end = -1
    n = 0
    for ts, dur in zip(c.ts[rows].tolist(), c.dur[rows].tolist()):
        if ts >= end:
            n += 1
        end = max(end, ts + dur)
    return n


def compiled_call_set(trace: Trace) -> iv.IntervalSet:
    """The time inside calls of compiled graphs (``Torch-Compiled Region``, ``CompiledFunctionBackward``),
    on any thread, compile work left out: what a CUDA graph replay of those graphs would stand in for."""
    c = trace.columns
    host = trace.rows_of(*_HOST_KINDS)
    rows = host[trace.name_matches(host, _COMPILED_GRAPH)]
    return iv.subtract(iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows]), compile_set(trace))


def graph_launch_ns(trace: Trace) -> int | None:
    """The median host time of one executed graph launch (``cudaGraphLaunch``…), None without any."""
    from aiprof.analysis.graphs import captured_mask, launch_rows

    rows = launch_rows(trace)
    rows = rows[trace.name_matches(rows, GRAPH_REPLAY)]
    rows = rows[~captured_mask(trace, rows)]
    return int(np.median(trace.columns.dur[rows])) if rows.size else None
