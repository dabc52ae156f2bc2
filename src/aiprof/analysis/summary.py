"""Rank summaries: one analysed trace file as compact, language-neutral bytes (the rank cache's entries).

A summary is what the map step of a many-rank analysis keeps of a file: everything ``aiprof analyze`` needs
from the rank afterwards, none of its events. The file is a zlib stream (RFC 1950: ``zlib.decompress`` in
Python, ``inflate`` anywhere) of one MessagePack map (:class:`SummaryFile`):

- ``format`` (``"aiprof-rank-summary"``), ``version`` (:data:`VERSION`), ``aiprof`` (the version that wrote it);
- ``ranks``: one :class:`RankEntry` per rank the trace file holds (an Nsight Systems report of an MPI job holds
  several), with the nested results as MessagePack of aiprof's own typed records (the findings, the sections,
  the metadata; the same field names as the JSON report) and
- ``tables``: the tabular parts, one :class:`Table` each, as an Arrow IPC stream when pyarrow is installed
  (``aiprof[arrow]``, part of ``aiprof[dask]``), else a MessagePack map of column name → array:

  ``steps`` — one row per step and device: ``device`` (name, dictionary-encoded), ``name``, ``number``,
  ``start_ns``, ``duration_ns``, ``breakdown_ns`` and ``idle_causes_ns`` (map bucket → ns, in report order);
  ``arrivals`` — one row per collective (:class:`aiprof.analysis.arrival.ArrivalTable`): ``group`` (process
  group), ``collective`` (both dictionary-encoded over one shared dictionary), ``step``, ``ordinal`` (the n-th of
  its step, group and collective on the rank), ``arrive_ns`` (enqueue: the kernel's start on the device, or the
  CPU op's), ``end_ns`` and ``message_bytes`` (-1: unknown);
  ``kernels`` — one row per kernel name and device (the kernels section's
  :class:`aiprof.analysis.kernels.KernelNameStats`, ``device`` first);
  ``timeline`` and ``flows`` — the HTML report's timeline events when it gathered them
  (:class:`aiprof.analysis.explore.RankTimeline`: ``track`` int32, ``row`` int16, ``start_ns``, ``dur_ns``,
  ``name`` int32 into ``strings``, ``cat`` int8; ``flow_src``, ``flow_dst``: event indices).

  In the MessagePack form a dictionary-encoded column is ``{"dictionary": [...], "indices": [...]}`` and a map
  column a list of ``[key, value]`` pair lists.

Nothing in a summary is executable: decoding it builds only aiprof's typed records, so a planted file can
mislead a report but never run code. :func:`encode` returns None for a result the format cannot carry exactly
(a section it does not know, a value of another type): such a rank is analysed again on the next run.
"""

from __future__ import annotations

import functools
import zlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import numpy as np

from aiprof.analysis.coverage import Coverage
from aiprof.analysis.graphs import GraphRole
from aiprof.analysis.health import RankHealth
from aiprof.analysis.steps import StepWindow
from aiprof.analysis.timeline import Totals
from aiprof.trace.cycles import Identity
from aiprof.trace.model import DeviceInfo

if TYPE_CHECKING:
    from aiprof.analysis.arrival import ArrivalTable
    from aiprof.analysis.explore import RankTimeline
    from aiprof.analysis.kernels import KernelNameStats, KernelStats
    from aiprof.analysis.run import _Loaded
    from aiprof.analysis.timeline import DeviceAccount

FORMAT = "aiprof-rank-summary"
VERSION = 1
MAX_BYTES = 1 << 28  # decompressed; a summary is a few MB at most, a larger one is damaged

Encoding = Literal["arrow-ipc", "msgpack"]
Kind = Literal["i64", "i32", "i16", "i8", "f64", "f64?", "bool", "str", "dict", "map"]
_INTS: dict[str, np.dtype[Any]] = {"i64": np.dtype(np.int64), "i32": np.dtype(np.int32), "i16": np.dtype(np.int16),
                                   "i8": np.dtype(np.int8)}


class Table(msgspec.Struct):
    """One table: ``data`` is an Arrow IPC stream (``encoding`` ``"arrow-ipc"``) or a MessagePack map of column
    name → column (``"msgpack"``)."""

    encoding: Encoding
    data: bytes


class DeviceEntry(msgspec.Struct):
    """A :class:`aiprof.analysis.timeline.DeviceAccount` without its steps (they are the ``steps`` table)."""

    device: str
    device_index: int
    kind: str
    name: str
    totals: Totals


class RunDirEntry(msgspec.Struct):
    """The run directory holding the trace: its path and decoded ``meta.json`` (aiprof.runmeta.RunMeta)."""

    path: str
    meta: msgspec.Raw


class CoverageRow(msgspec.Struct):
    """An :class:`aiprof.analysis.explore.RowCoverage`; ``busy_ns`` little-endian float32 values, one per bin."""

    track: int
    row: int
    start_ns: int
    bin_ns: int
    busy_ns: bytes
    events: int


class TimelineEntry(msgspec.Struct, kw_only=True):
    """The HTML report's timeline of the rank (:class:`aiprof.analysis.explore.RankTimeline`) without its event
    columns (the ``timeline`` and ``flows`` tables)."""

    rank: int
    strings: list[str]
    track_kind: list[str]
    track_label: list[str]
    coverage: list[CoverageRow]
    total_events: int
    left_out: list[str]
    clock: str
    base_time_ns: int


class RankEntry(msgspec.Struct, kw_only=True):
    """One rank: how it was loaded (rank numbering, identity) and its analysis (the fields of
    :class:`aiprof.analysis.run.RankAnalysis`; ``sections`` by report key, each one the section's record)."""

    path: str
    distributed: dict[str, Any]
    rank: int
    rank_source: str
    warnings: list[str]
    program: str
    identity: Identity | None
    graph_role: GraphRole
    analysis_rank: int
    analysis_rank_source: str
    analysis_distributed: dict[str, Any]
    devices_info: list[DeviceInfo]
    metadata: dict[str, Any]
    event_count: int
    windows: list[StepWindow]
    devices: list[DeviceEntry]
    sections: dict[str, msgspec.Raw]
    notes: list[str]
    diagnosis: msgspec.Raw  # aiprof.rules.diagnosis.RankDiagnosis without its timeline, or nil
    timeline: TimelineEntry | None  # the diagnosis' timeline (None: none gathered)
    coverage: Coverage | None
    health: RankHealth | None
    run_dir: RunDirEntry | None
    arrival_source: str | None  # the ArrivalTable's source; None: the rank has no arrival table
    tables: dict[str, Table]


class SummaryFile(msgspec.Struct):
    """A rank summary file (see the module's docstring)."""

    format: str
    version: int
    aiprof: str
    ranks: list[RankEntry]


# The fields of RankAnalysis, and of a worker's result around it (aiprof.analysis.run._Loaded), a summary
# carries (a test checks it is all of them; ``error`` and ``stage`` are those of a rank that loaded).
LOADED_FIELDS = frozenset({"path", "distributed", "rank", "rank_source", "analysis", "error", "warnings", "program",
                           "identity", "stage", "graph_role"})
ANALYSIS_FIELDS = frozenset({
    "rank", "rank_source", "path", "distributed", "devices_info", "metadata", "event_count", "windows", "devices",
    "sections", "notes", "diagnosis", "coverage", "arrivals", "health", "run_dir"})

_STEP_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("device", "dict"), ("name", "str"), ("number", "i64"), ("start_ns", "i64"), ("duration_ns", "i64"),
    ("breakdown_ns", "map"), ("idle_causes_ns", "map"))
_TIMELINE_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("track", "i32"), ("row", "i16"), ("start_ns", "i64"), ("dur_ns", "i64"), ("name", "i32"), ("cat", "i8"))
_FLOW_COLUMNS: tuple[tuple[str, Kind], ...] = (("flow_src", "i64"), ("flow_dst", "i64"))
_ARRIVAL_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("group", "dict"), ("collective", "dict"), ("step", "i64"), ("ordinal", "i64"), ("arrive_ns", "i64"),
    ("end_ns", "i64"), ("message_bytes", "i64"))


@functools.cache
def _kernel_columns() -> tuple[tuple[str, Kind], ...]:
    """``device`` then KernelNameStats' fields, each with its column kind (from the record's annotations)."""
    from aiprof.analysis.kernels import KernelNameStats

    mi = msgspec.inspect
    info = mi.type_info(KernelNameStats)
    assert isinstance(info, mi.StructType)
    out: list[tuple[str, Kind]] = [("device", "i64")]
    for f in info.fields:
        t = f.type
        nullable_float = isinstance(t, mi.UnionType) and {type(x) for x in t.types} == {mi.FloatType, mi.NoneType}
        kind: Kind = ("i64" if isinstance(t, mi.IntType) else "f64" if isinstance(t, mi.FloatType) else
                      "bool" if isinstance(t, mi.BoolType) else "str" if isinstance(t, mi.StrType) else
                      "f64?" if nullable_float else _unknown(f.name))
        out.append((f.name, kind))
    return tuple(out)


def _unknown(name: str) -> Kind:
    raise TypeError(f"KernelNameStats.{name}: a field type the kernels table has no column kind for")


@functools.cache
def _section_types() -> dict[str, Any]:
    """The record type of each default section, by report key (aiprof.analysis.run.DEFAULT_SECTIONS)."""
    from aiprof.analysis.comm import CommunicationSection
    from aiprof.analysis.compat import Compat
    from aiprof.analysis.compile import CompileReport
    from aiprof.analysis.graphs import GraphCaptureSection
    from aiprof.analysis.inference import InferenceReport
    from aiprof.analysis.kernels import KernelStats
    from aiprof.analysis.ops import OpStats
    from aiprof.analysis.overview import TimelineOverview
    from aiprof.roofline.attention import AttentionReport
    from aiprof.roofline.mfu import MfuReport
    from aiprof.roofline.section import RooflineSection

    return {"kernels": KernelStats, "ops": OpStats, "communication": CommunicationSection, "compat": Compat,
            "roofline": RooflineSection, "timeline_overview": TimelineOverview, "graph_capture": GraphCaptureSection,
            "compile": CompileReport, "mfu": MfuReport, "attention": AttentionReport, "inference": InferenceReport}


def arrow() -> ModuleType | None:
    """pyarrow, when it is installed (imported on first use: a summary is written or read)."""
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401 - the stream reader and writer
    except ImportError:
        return None
    module: ModuleType = pyarrow
    return module


class _Unfit(Exception):
    """The result holds something a summary cannot carry exactly."""


# ---------------------------------------------------------------------------------------------------
# Results → bytes
# ---------------------------------------------------------------------------------------------------
def hook_result_type(hook: Any) -> Any:
    """The type a rank hook declares it returns (``RankAnalysis.diagnosis``: what a summary decodes it as), for a
    function or a ``functools.partial`` of one; None without a hook or a declared type."""
    import typing

    fn = hook.func if isinstance(hook, functools.partial) else hook
    if fn is None:
        return None
    try:
        kind = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no summary for its results
        return None
    return kind if isinstance(kind, type) and issubclass(kind, msgspec.Struct) else None


def encode(results: list[_Loaded], diagnosis: Any = None) -> bytes | None:
    """The summary of one file's results (every one loaded, none failed), or None when it cannot carry them
    exactly. ``diagnosis`` is the type of the rank hook's results (:func:`hook_result_type`; a result with a
    diagnosis and no type for it is not carried)."""
    from aiprof import __version__

    pa = arrow()
    try:
        if diagnosis is None and any(r.analysis is not None and r.analysis.diagnosis is not None for r in results):
            raise _Unfit("a diagnosis of no known type")
        if any(r.analysis is not None and type(r.analysis.diagnosis) not in (diagnosis, type(None)) for r in results):
            raise _Unfit("a diagnosis of another type")
        entries = [_entry(r, pa) for r in results]
        return zlib.compress(msgspec.msgpack.encode(SummaryFile(FORMAT, VERSION, __version__, entries)), 1)
    except (_Unfit, TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return None


def _entry(loaded: _Loaded, pa: ModuleType | None) -> RankEntry:
    from aiprof.analysis.kernels import KernelStats

    a = loaded.analysis
    if a is None or loaded.error is not None:
        raise _Unfit("a failed rank")
    raw = msgspec.msgpack.encode
    types = _section_types()
    sections: dict[str, msgspec.Raw] = {}
    tables: dict[str, Table] = {}
    for key, value in a.sections.items():
        if types.get(key) is not type(value):
            raise _Unfit(f"section {key}")
        if key == "kernels":
            assert isinstance(value, KernelStats)  # checked against ``types`` above
            value, tables["kernels"] = _kernels_out(value, pa)
        sections[key] = msgspec.Raw(raw(value))
    tables["steps"] = _table(_step_rows(a.devices), _STEP_COLUMNS, pa)
    if a.arrivals is not None:
        tables["arrivals"] = _table(_arrival_columns(a.arrivals), _ARRIVAL_COLUMNS, pa)
    run_dir = RunDirEntry(str(a.run_dir.path), msgspec.Raw(raw(a.run_dir.meta))) if a.run_dir is not None else None
    from aiprof.analysis.explore import RankTimeline

    diagnosis, timeline = a.diagnosis, None
    if diagnosis is not None and isinstance(tl := getattr(diagnosis, "timeline", None), RankTimeline):
        diagnosis = msgspec.structs.replace(diagnosis, timeline=None)
        timeline = TimelineEntry(
            rank=tl.rank, strings=tl.strings, track_kind=tl.track_kind, track_label=tl.track_label,
            coverage=[CoverageRow(c.track, c.row, c.start_ns, c.bin_ns, _float32_bytes(c.busy_ns), c.events)
                      for c in tl.coverage],
            total_events=tl.total_events, left_out=tl.left_out, clock=tl.clock, base_time_ns=tl.base_time_ns)
        tables["timeline"] = _table({name: getattr(tl, name) for name, _ in _TIMELINE_COLUMNS}, _TIMELINE_COLUMNS, pa)
        tables["flows"] = _table({name: getattr(tl, name) for name, _ in _FLOW_COLUMNS}, _FLOW_COLUMNS, pa)
    return RankEntry(
        path=str(loaded.path), distributed=loaded.distributed, rank=loaded.rank, rank_source=loaded.rank_source,
        warnings=loaded.warnings, program=loaded.program, identity=loaded.identity, graph_role=loaded.graph_role,
        analysis_rank=a.rank, analysis_rank_source=a.rank_source, analysis_distributed=a.distributed,
        devices_info=a.devices_info, metadata=a.metadata, event_count=a.event_count, windows=a.windows,
        devices=[DeviceEntry(d.device, d.device_index, d.kind, d.name, d.totals) for d in a.devices],
        sections=sections, notes=a.notes,
        diagnosis=msgspec.Raw(raw(diagnosis)), timeline=timeline,
        coverage=a.coverage, health=a.health, run_dir=run_dir,
        arrival_source=a.arrivals.source if a.arrivals is not None else None, tables=tables)


def _float32_bytes(values: np.ndarray) -> bytes:
    if values.dtype != np.float32 or values.ndim != 1:
        raise _Unfit("timeline coverage")
    return values.astype("<f4").tobytes()


def _step_rows(devices: list[DeviceAccount]) -> dict[str, Any]:
    names = tuple(dict.fromkeys(d.device for d in devices))
    steps = [(names.index(d.device), s) for d in devices for s in d.steps]
    return {"device": (np.array([i for i, _ in steps], dtype=np.int64), names),
            "name": [s.name for _, s in steps], "number": [s.number for _, s in steps],
            "start_ns": [s.start_ns for _, s in steps], "duration_ns": [s.duration_ns for _, s in steps],
            "breakdown_ns": [s.breakdown_ns for _, s in steps], "idle_causes_ns": [s.idle_causes_ns for _, s in steps]}


def _arrival_columns(t: ArrivalTable) -> dict[str, Any]:
    return {"group": (t.group, t.labels), "collective": (t.collective, t.labels), "step": t.step,
            "ordinal": t.ordinal, "arrive_ns": t.arrive_ns, "end_ns": t.end_ns, "message_bytes": t.message_bytes}


def _kernels_out(stats: KernelStats, pa: ModuleType | None) -> tuple[KernelStats, Table]:
    """The kernels section without its per-name rows, and those rows as a table."""
    spec = _kernel_columns()
    rows = [(d.device, k) for d in stats.devices for k in d.kernels]
    columns: dict[str, Any] = {"device": [dev for dev, _ in rows]}
    for name, _ in spec[1:]:
        columns[name] = [getattr(k, name) for _, k in rows]
    bare = msgspec.structs.replace(stats, devices=tuple(msgspec.structs.replace(d, kernels=()) for d in stats.devices))
    return bare, _table(columns, spec, pa)


_PY_TYPES: dict[str, tuple[type, ...]] = {"i64": (int,), "i32": (int,), "i16": (int,), "i8": (int,), "f64": (float,), "f64?": (float, type(None)),
                                          "bool": (bool,), "str": (str,)}


def _table(columns: dict[str, Any], spec: tuple[tuple[str, Kind], ...], pa: ModuleType | None) -> Table:
    """``columns`` (a list of Python values, an int64 array, or (indices, dictionary) for a dictionary column,
    a list of str → int dicts for a map column) as a table, checked against the column kinds first: a float that
    is an int, a numpy scalar, a bool among ints would not read back the same."""
    for name, kind in spec:
        col = columns[name]
        if isinstance(col, np.ndarray):
            if kind not in _INTS or col.dtype != _INTS[kind] or col.ndim != 1:
                raise _Unfit(f"column {name}")
        elif kind in _PY_TYPES and isinstance(col, list):
            want = _PY_TYPES[kind]
            if any(type(v) not in want for v in col):
                raise _Unfit(f"column {name}")
        elif kind == "map" and any(type(v) is not int for d in col for v in d.values()):
            raise _Unfit(f"column {name}")
    if pa is not None:
        return Table("arrow-ipc", _arrow_stream(pa, columns, spec))
    plain: dict[str, Any] = {}
    for name, kind in spec:
        col = columns[name]
        if kind == "dict":
            plain[name] = {"dictionary": list(col[1]), "indices": col[0].tolist()}
        elif kind == "map":
            plain[name] = [list(d.items()) for d in col]
        else:
            plain[name] = col.tolist() if isinstance(col, np.ndarray) else col
    return Table("msgpack", msgspec.msgpack.encode(plain))


def _arrow_stream(pa: ModuleType, columns: dict[str, Any], spec: tuple[tuple[str, Kind], ...]) -> bytes:
    types = {"i64": pa.int64(), "i32": pa.int32(), "i16": pa.int16(), "i8": pa.int8(), "f64": pa.float64(), "f64?": pa.float64(), "bool": pa.bool_(), "str": pa.string(),
             "map": pa.map_(pa.string(), pa.int64())}
    arrays = []
    for name, kind in spec:
        col = columns[name]
        if kind == "dict":
            indices, dictionary = col
            arrays.append(pa.DictionaryArray.from_arrays(pa.array(np.asarray(indices, dtype=np.int32)),
                                                         pa.array(list(dictionary), type=pa.string())))
        elif kind == "map":
            arrays.append(pa.array([list(d.items()) for d in col], type=types[kind]))
        else:
            arrays.append(pa.array(col, type=types[kind]))  # an int column's dtype is checked: no cast
    batch = pa.RecordBatch.from_arrays(arrays, names=[name for name, _ in spec])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


# ---------------------------------------------------------------------------------------------------
# Bytes → results
# ---------------------------------------------------------------------------------------------------
_FILE = msgspec.msgpack.Decoder(SummaryFile)


def decode(data: bytes, diagnosis: Any = None) -> list[_Loaded]:
    """The results a summary holds, diagnoses decoded as ``diagnosis`` (:func:`hook_result_type`). Raises
    ValueError (or a msgspec error) for bytes that are not a summary of this version, or an Arrow table
    without pyarrow; zlib.error for a damaged stream."""
    inflate = zlib.decompressobj()
    plain = inflate.decompress(data, MAX_BYTES)
    if inflate.unconsumed_tail or not inflate.eof:
        raise ValueError("not a whole summary (cut short, or larger than a summary ever is)")
    summary = _FILE.decode(plain)
    if summary.format != FORMAT or summary.version != VERSION:
        raise ValueError(f"not a version {VERSION} {FORMAT}")
    return [_loaded(e, diagnosis) for e in summary.ranks]


def _loaded(e: RankEntry, diagnosis_type: Any) -> _Loaded:
    from aiprof.analysis.arrival import ArrivalTable
    from aiprof.analysis.run import RankAnalysis, _Loaded
    from aiprof.analysis.timeline import DeviceAccount, StepAccount
    from aiprof.rundir import RunDir
    from aiprof.runmeta import RunMeta

    dec = _decode
    types = _section_types()
    sections: dict[str, Any] = {}
    for key, raw in e.sections.items():
        sections[key] = dec(raw, types[key])
    if "kernels" in sections:
        sections["kernels"] = _kernels_in(sections["kernels"], _read(e.tables["kernels"], _kernel_columns(), arrays=False))
    steps = _read(e.tables["steps"], _STEP_COLUMNS, arrays=False)
    dev_index, dev_names = steps["device"]
    by_device: dict[str, list[StepAccount]] = {name: [] for name in dev_names}
    for i, d in enumerate(dev_index.tolist()):
        by_device[dev_names[d]].append(StepAccount(
            steps["name"][i], steps["number"][i], steps["start_ns"][i], steps["duration_ns"][i],
            steps["breakdown_ns"][i], steps["idle_causes_ns"][i]))
    devices = [DeviceAccount(d.device, d.device_index, d.kind, d.name, by_device.get(d.device, []), d.totals)
               for d in e.devices]
    arrivals = None
    if e.arrival_source is not None:
        t = _read(e.tables["arrivals"], _ARRIVAL_COLUMNS)
        (group, labels), (collective, labels_c) = t["group"], t["collective"]
        if labels != labels_c:
            raise ValueError("arrivals: group and collective do not share one dictionary")
        arrivals = ArrivalTable(e.arrival_source, labels, group, collective, t["step"], t["ordinal"],
                                t["arrive_ns"], t["end_ns"], t["message_bytes"])
    run_dir = RunDir(Path(e.run_dir.path), dec(e.run_dir.meta, RunMeta)) if e.run_dir is not None else None
    diagnosis = dec(e.diagnosis, Any if diagnosis_type is None else diagnosis_type | None)
    if diagnosis is not None and diagnosis_type is None:
        raise ValueError("a diagnosis, and no type to decode it as")
    if e.timeline is not None:
        if diagnosis is None:
            raise ValueError("a timeline without a diagnosis")
        diagnosis = msgspec.structs.replace(diagnosis, timeline=_timeline_in(e.timeline, e.tables))
    analysis = RankAnalysis(
        rank=e.analysis_rank, rank_source=e.analysis_rank_source, path=Path(e.path),
        distributed=e.analysis_distributed, devices_info=e.devices_info, metadata=e.metadata,
        event_count=e.event_count, windows=e.windows, devices=devices, sections=sections, notes=e.notes,
        diagnosis=diagnosis,
        coverage=e.coverage, arrivals=arrivals, health=e.health, run_dir=run_dir)
    return _Loaded(Path(e.path), e.distributed, e.rank, e.rank_source, analysis, None, e.warnings, e.program,
                   e.identity, graph_role=e.graph_role)


@functools.cache
def _decoder(kind: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(kind)


def _decode(data: msgspec.Raw | bytes, kind: Any) -> Any:
    return _decoder(kind).decode(data)


def _timeline_in(tl: TimelineEntry, tables: dict[str, Table]) -> RankTimeline:
    from aiprof.analysis.explore import RankTimeline, RowCoverage

    events, flows = _read(tables["timeline"], _TIMELINE_COLUMNS), _read(tables["flows"], _FLOW_COLUMNS)
    coverage = [RowCoverage(c.track, c.row, c.start_ns, c.bin_ns, np.frombuffer(c.busy_ns, dtype="<f4").astype(
        np.float32), c.events) for c in tl.coverage]
    return RankTimeline(tl.rank, tl.strings, tl.track_kind, tl.track_label, events["track"], events["row"],
                        events["start_ns"], events["dur_ns"], events["name"], events["cat"], flows["flow_src"],
                        flows["flow_dst"], coverage, tl.total_events, tl.left_out, tl.clock, tl.base_time_ns)


def _kernels_in(stats: KernelStats, rows: dict[str, Any]) -> KernelStats:
    from aiprof.analysis.kernels import KernelNameStats

    names = [name for name, _ in _kernel_columns()[1:]]
    per: dict[int, list[KernelNameStats]] = {}
    for i, dev in enumerate(rows["device"]):
        per.setdefault(dev, []).append(KernelNameStats(**{n: rows[n][i] for n in names}))
    return msgspec.structs.replace(stats, devices=tuple(
        msgspec.structs.replace(d, kernels=tuple(per.get(d.device, ()))) for d in stats.devices))


def _read(table: Table, spec: tuple[tuple[str, Kind], ...], arrays: bool = True) -> dict[str, Any]:
    """A table's columns: dictionary columns as (int64 indices array, dictionary tuple), int64 columns as numpy
    arrays (``arrays``) or lists of int, the others as lists of Python values."""
    out = _columns(table, spec)
    if not arrays:
        out = {name: col.tolist() if isinstance(col, np.ndarray) else col for name, col in out.items()}
    return out


def _columns(table: Table, spec: tuple[tuple[str, Kind], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if table.encoding == "arrow-ipc":
        pa = arrow()
        if pa is None:
            raise ValueError("an Arrow table, and pyarrow is not installed")
        read = pa.ipc.open_stream(table.data).read_all().combine_chunks()
        if read.column_names != [name for name, _ in spec]:
            raise ValueError("unexpected columns")
        for (name, kind), column in zip(spec, read.columns):
            chunk = column.chunk(0) if column.num_chunks else pa.array([], type=column.type)
            if kind == "dict":
                out[name] = (np.array(chunk.indices.to_numpy(zero_copy_only=False), dtype=np.int64),
                             tuple(chunk.dictionary.to_pylist()))
            elif kind in _INTS:
                out[name] = np.array(chunk.to_numpy(zero_copy_only=False), dtype=_INTS[kind])
            elif kind == "map":
                out[name] = [dict(pairs) for pairs in chunk.to_pylist()]
            else:
                out[name] = chunk.to_pylist()
        return out
    plain = msgspec.msgpack.decode(table.data, type=dict[str, Any])
    for name, kind in spec:
        col = plain[name]
        if kind == "dict":
            out[name] = (np.array(col["indices"], dtype=np.int64), tuple(col["dictionary"]))
        elif kind in _INTS:
            out[name] = np.array(col, dtype=_INTS[kind])
        elif kind == "map":
            out[name] = [{k: v for k, v in pairs} for pairs in col]
        else:
            out[name] = col
    return out


__all__ = ["ANALYSIS_FIELDS", "FORMAT", "LOADED_FIELDS", "MAX_BYTES", "VERSION", "RankEntry", "SummaryFile", "Table", "arrow", "decode",
           "encode"]
