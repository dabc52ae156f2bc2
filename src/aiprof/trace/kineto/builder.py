"""The column builder shared by every Kineto path: events (undecoded ``msgspec.Raw`` views, or a run of
JSON text) in, the columns and side tables of a :class:`~aiprof.trace.model.Trace` out.

Chunks of ~20k events are decoded into slim structs, turned into numpy column pieces (args decoded per
kind in one batch) and dropped before the next chunk. Nothing keeps a dict or a struct per event, so peak
memory is the text plus the columns plus one chunk. The whole-file path (:mod:`.loader`), the streaming
reader (:mod:`.stream`) and its helper processes (:mod:`.parallel`) all feed a :class:`Builder`.

Faster still, where it is built: the native columniser (``_columnar.c``) turns a run of events into the
same columns in one C pass, or hands the run back to the msgspec path (:meth:`Builder.feed_array`);
the two give bit-identical traces (docs/architecture.md).
"""

from __future__ import annotations

from operator import attrgetter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from aiprof.errors import TraceError
from aiprof.trace.model import (
    DEVICE_KINDS,
    ArgsStore,
    Columns,
    DeviceInfo,
    Flows,
    Kind,
    Trace,
    kind_of_category,
)
from aiprof.trace import suspect
from aiprof.trace.kineto.schema import ABSENT, NO_ARGS, Event, GpuArgs, Header, MemoryArgs, MetaArgs, OpArgs, ShapeArgs, TraceFile

T = TypeVar("T", bound=msgspec.Struct)
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

CHUNK_EVENTS = 20_000  # ~10 MB of structs per chunk; smaller saves little, larger costs RSS
_FLOW_CATEGORIES = {"ac2g", "async", "async_cpu_to_gpu", "async_gpu", "fwdbwd", "launch"}
_ANNOTATION_PREFIXES = ("ProfilerStep#", "enumerate(DataLoader)", "Optimizer.step#", "Optimizer.zero_grad#")
_MAX_ABS_US = 9.0e15  # beyond this, ns no longer fit in int64
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CPU_KINDS = np.array([Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME, Kind.DRIVER], dtype=np.int8)
_DEV_KINDS = np.array([int(k) for k in DEVICE_KINDS], dtype=np.int8)
_NAME_EVENTS = frozenset(("process_name", "thread_name"))
_PH_OTHER, _PH_META, _PH_FLOW, _PH_SPAN, _PH_INSTANT = 0, 1, 2, 3, 4


class _PhaseCodes(dict[str, int]):
    """``ph`` → a small code; unknown phases (B/E, C counters, ...) map to ``_PH_OTHER``."""

    def __missing__(self, key: str) -> int:
        return _PH_OTHER


_PH_CODES = _PhaseCodes(
    {"X": _PH_SPAN, "i": _PH_INSTANT, "I": _PH_INSTANT, "M": _PH_META, "s": _PH_FLOW, "f": _PH_FLOW, "t": _PH_FLOW}
)


def _native_module() -> Any:
    """The native columniser (``_columnar.c``), or None: not built, or ``AIPROF_NATIVE=0``."""
    from aiprof.native import optional

    return optional("aiprof.trace.kineto._columnar")


_native = _native_module()


def native_enabled() -> bool:
    """Whether runs are read by the native columniser (else by msgspec and numpy only)."""
    return _native is not None


def _kind_code(cat: str) -> int:
    """The native columniser's question: the kind of a complete event of category ``cat``."""
    found = kind_of_category(cat)
    return int(found) if found is not None else int(Kind.OTHER)


# What columnize returns: (count, strings, timed, meta, flows, shape rows, shapes, stacks, CPU comm rows,
# CPU comm args, device comm rows, device comm args); columns are bytearrays (order: _columnar.c).
Columnized = tuple[
    int, list[str], tuple[bytearray, ...], tuple[bytearray, ...], tuple[bytearray, ...], bytearray,
    list[bytes], list[tuple[int, str]], bytearray, list[bytes], bytearray, list[bytes],
]  # fmt: skip
_TIMED_NAMES = [
    "kind", "instant", "cat", "name", "pid", "tid", "ts", "dur", "pid_str", "tid_str",
    "external_id", "external_id_legacy", "correlation", "seq", "fwd_tid", "python_id", "python_parent_id",
    "device", "stream", "nbytes", "grid", "block", "registers", "shared_memory", "total_allocated",
    "total_reserved", "device_type", "device_id", "blocks_per_sm", "warps_per_sm", "occupancy_pct",
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
]  # fmt: skip
_TIMED_DTYPES = (
    [np.int8, np.int8, np.int32, np.int32, np.int64, np.int64, np.float64, np.float64, np.int32, np.int32]
    + [np.int64] * 18
    + [np.float64] * 3
    + [np.int32] * 6
)
_T_KIND, _T_INSTANT, _T_CAT, _T_NAME, _T_PID, _T_TID, _T_TS, _T_DUR, _T_PID_STR, _T_TID_STR = range(10)
_T_INT = {name: i for i, name in enumerate(_TIMED_NAMES) if 10 <= i < 28}
_T_FLOAT = {name: i for i, name in enumerate(_TIMED_NAMES) if 28 <= i < 31}
_DIM_COLUMNS = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]  # int32, -1 unknown
_T_DIMS = {name: _TIMED_NAMES.index(name) for name in _DIM_COLUMNS}


MAX_NAME_CHARS = 65_536  # longer names are shortened at load (classifiers scan every name); real ones reach ~5k
_NAME_HASH_CHARS = 12
_NAME_KEPT_CHARS = MAX_NAME_CHARS - _NAME_HASH_CHARS - 1


def cap_name(text: str) -> str:
    """``text`` itself, or when longer than :data:`MAX_NAME_CHARS`: its start, ``…`` and a short hash of
    the whole text, so that two long names that differ only past the start stay distinct."""
    if len(text) <= MAX_NAME_CHARS:
        return text
    import hashlib

    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_NAME_HASH_CHARS // 2)
    return f"{text[:_NAME_KEPT_CHARS]}…{digest.hexdigest()}"


def is_capped(text: str) -> bool:
    """Whether a name is one :func:`cap_name` shortened."""
    return len(text) == MAX_NAME_CHARS and text[_NAME_KEPT_CHARS] == "…"


def _raw_ids(values: I64, local: npt.NDArray[np.int32], strings: list[str]) -> list[int | str]:
    """A pid/tid/id column as the JSON had it: ints, and strings where ``local`` names one."""
    return [strings[s] if s >= 0 else v for v, s in zip(values.tolist(), local.tolist(), strict=True)]


@dataclass
class RawTrace:
    """What the first pass produced: undecoded events plus the typed header."""

    events: list[msgspec.Raw]
    header: TraceFile
    warnings: list[str]



# ---------------------------------------------------------------------------------------------------
# Decoders and the header
# ---------------------------------------------------------------------------------------------------
HEADER_DECODER = msgspec.json.Decoder(Header)
_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_EVENT_DECODER = msgspec.json.Decoder(Event)


def typed_header(header: Header, path: Path) -> tuple[TraceFile, list[str]]:
    """Decode each header field on its own; a field of the wrong type is dropped with a note."""
    values: dict[str, Any] = {}
    bad: list[str] = []
    for info in msgspec.structs.fields(TraceFile):
        raw = getattr(header, info.name, ABSENT)
        if not len(raw):
            continue
        try:
            values[info.name] = msgspec.json.decode(raw, type=info.type)
        except msgspec.MsgspecError:
            bad.append(info.name)
    notes = [f"{path.name}: ignored top-level field(s) of an unexpected type: {', '.join(bad)}"] if bad else []
    return TraceFile(**values), notes


def encode_json(value: Any) -> bytes:
    """JSON bytes; NaN/Infinity become ``null`` (so that event is later skipped as malformed)."""
    try:
        return msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError):
        return b"null"


def short_error(err: Exception) -> str:
    return str(err).splitlines()[0][:160]


# ---------------------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------------------
def _to_ns(values: F64) -> I64:
    """µs floats with 3 decimals → int64 ns without the rounding error of ``round(ts*1000)``.

    The integer part converts exactly; the fraction carries at most half an ulp of error, so rounding it
    alone recovers the nanosecond that Kineto wrote (for |ts| < 2^43 µs, i.e. every relative timestamp).
    """
    whole = np.floor(values)
    frac = np.rint((values - whole) * 1000.0)
    return whole.astype(np.int64) * 1000 + frac.astype(np.int64)


def _int64(values: Sequence[int]) -> I64:
    """Python ints as int64; values outside int64 (hostile or corrupt input) become -1."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array([v if _INT64_MIN <= v <= _INT64_MAX else -1 for v in values], dtype=np.int64)


def _column(items: Sequence[Any], attr: str) -> I64:
    """One int attribute of many structs as int64 (C-level map; out-of-range ints become -1)."""
    try:
        return np.fromiter(map(attrgetter(attr), items), dtype=np.int64, count=len(items))
    except (OverflowError, TypeError, ValueError):
        return _int64([getattr(item, attr) for item in items])


def _floats(items: Sequence[Any], attr: str, dtype: Any = np.float64) -> npt.NDArray[Any]:
    return np.fromiter(map(attrgetter(attr), items), dtype=dtype, count=len(items))


_INT32_MAX = (1 << 31) - 1


def _dims3(dims: list[int] | None) -> tuple[int, int, int]:
    """A grid or block as (x, y, z): the list's 1 to 3 entries (missing ones 1, as CUDA's and HIP's
    ``dim3``) when each is in [0, 2^31), else (-1, -1, -1) (absent, empty, longer, or out of range)."""
    if not dims or len(dims) > 3 or any(not 0 <= d <= _INT32_MAX for d in dims):
        return (-1, -1, -1)
    return (dims[0], dims[1] if len(dims) > 1 else 1, dims[2] if len(dims) > 2 else 1)


def _prod3(dims: list[int] | None) -> int:
    if not dims:
        return -1
    total = 1
    for d in dims:
        total *= d
    return total if 0 <= total <= _INT64_MAX else -1


def _decode_args(raws: list[msgspec.Raw], type_: type[T], decoder: msgspec.json.Decoder[list[T]]) -> list[T]:
    """Decode many args objects with one call; on a bad one, fall back to row-by-row, key-by-key."""
    if not raws:
        return []
    try:
        return decoder.decode(b"[" + b",".join(raws) + b"]")
    except msgspec.MsgspecError:
        return [_decode_args_one(r, type_) for r in raws]


def _decode_args_one(raw: msgspec.Raw, type_: type[T]) -> T:
    """Keep every well-typed key we know; drop the others (a wrong-typed arg costs only itself)."""
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.MsgspecError:
        pass
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return type_()
    if not isinstance(value, dict):
        return type_()
    good: dict[str, Any] = {}
    raw_keys = _raw_keys(type_)
    for key, item in value.items():
        if key in raw_keys:  # any value is a valid Raw (convert takes only Raw objects, not the value)
            good[key] = msgspec.Raw(encode_json(item))
            continue
        try:
            msgspec.convert({key: item}, type_)
        except msgspec.ValidationError:
            continue
        good[key] = item
    return msgspec.convert(good, type_)


def _raw_keys(type_: type[msgspec.Struct]) -> frozenset[str]:
    """The JSON names of a struct's fields kept undecoded (``msgspec.Raw``)."""
    return frozenset(f.encode_name for f in msgspec.structs.fields(type_) if f.type is msgspec.Raw)


_OP_DECODER = msgspec.json.Decoder(list[OpArgs])
_SHAPE_DECODER = msgspec.json.Decoder(list[ShapeArgs])
_SHAPE_ENCODER = msgspec.json.Encoder()


def _canonical_shapes(raws: list[msgspec.Raw]) -> list[bytes]:
    """Only the record_shapes keys of each op's args, in one fixed order and without per-call ids
    (External id, Ev Idx…): two calls with the same inputs get the same bytes, so analyses can cache
    per distinct signature, and the store is smaller. Re-encoding the zero-copy struct is one C call
    per op (absent keys are omitted)."""
    encode = _SHAPE_ENCODER.encode
    out = [encode(args) for args in _decode_args(raws, ShapeArgs, _SHAPE_DECODER)]
    # Pretty-printed traces indent every shape over many lines: minify them (whitespace outside strings
    # goes; 3-4× smaller) in one C pass over all of them, then split them again (zero-copy slices).
    if out and any(b"\n" in blob for blob in out[:16]):
        compact = msgspec.json.format(b"[" + b",".join(out) + b"]", indent=-1)
        out = [bytes(raw) for raw in _RAW_LIST_DECODER.decode(compact)]
    return out


_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])


_GPU_DECODER = msgspec.json.Decoder(list[GpuArgs])
_MEM_DECODER = msgspec.json.Decoder(list[MemoryArgs])


# ---------------------------------------------------------------------------------------------------
# Columns, chunk by chunk
# ---------------------------------------------------------------------------------------------------
_INT_COLUMNS = [
    "correlation", "external_id", "seq", "fwd_tid", "python_id", "python_parent_id", "nbytes", "grid", "block",
    "registers", "shared_memory", "total_allocated", "total_reserved",
]  # fmt: skip
_FLOAT_COLUMNS = ["blocks_per_sm", "warps_per_sm", "occupancy_pct"]
# ids, starts, fwdbwd, pids, tids, ts: lists, or arrays where a helper packed them to send them back
FlowPart = tuple[Any, Any, Any, Any, Any, Any]


def _link_ids(cols: dict[str, npt.NDArray[Any]], rows: I64, args: Sequence[OpArgs | GpuArgs]) -> None:
    """The ids that link CPU and GPU rows: External id (or the legacy ``external id``) and correlation."""
    ext = _column(args, "external_id")
    legacy = _column(args, "external_id_legacy")
    cols["external_id"][rows] = np.where(ext != -1, ext, legacy)
    cols["correlation"][rows] = _column(args, "correlation")


@dataclass
class Piece:
    """Columns of one chunk's timed events, before concatenation."""

    cols: dict[str, npt.NDArray[Any]]
    run: int = 0  # which run of events (in file order) it came from
    op_rows: list[int] = field(default_factory=list)  # rows within the piece
    op_keys: list[int] | I64 = field(default_factory=list)  # per op row: its inputs' id in the builder's op_texts
    comm_rows: list[int] = field(default_factory=list)
    comm_chunks: list[bytes] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)


class Builder:
    """Turns raw events into :class:`Columns` plus the side tables of a :class:`Trace`, chunk by chunk."""

    def __init__(self, raw: RawTrace, path: Path) -> None:
        self.path = path
        self.header = raw.header
        self.warnings = list(raw.warnings)
        self.strings: dict[str, int] = {}
        self.string_runs: list[int] = []  # per string id: the run it was first seen in
        self.kind_of_cat: dict[str, int] = {}
        self.meta: dict[tuple[str, int, int], tuple[int, bytes]] = {}  # → (run, raw args)
        self.flow_parts: list[tuple[int, FlowPart]] = []  # (run, part)
        self.run_index = 0  # the run of events being fed (set by a reader that decodes runs out of order)
        self.pieces: list[Piece] = []
        self.piece_sizes: list[int] = []
        self.op_texts: dict[bytes, int] = {}  # distinct canonical op inputs → id, numbered as first met
        self.rows = 0
        self.skipped = 0
        self.skip_reason = ""
        self.negative = 0
        self.bad_time = 0
        self.native_fallbacks = 0  # runs the native columniser left to the pure path

    # --- driving ------------------------------------------------------------------------------
    def run(self, events: list[msgspec.Raw], rank: int, rank_source: str) -> Trace:
        count = len(events)
        for begin in range(0, count, CHUNK_EVENTS):
            chunk = events[begin : begin + CHUNK_EVENTS]
            events[begin : begin + CHUNK_EVENTS] = [None] * len(chunk)  # type: ignore[list-item]
            self._chunk(self._decode_chunk(chunk))
        del events
        return self.finish(rank, rank_source, count)

    def feed_text(self, text: bytes) -> int:
        """Decode a run of complete events (``{…},{…}`` text, no brackets) and add them; return how many.
        Raises ``msgspec.DecodeError`` when the text is not a run of complete JSON values."""
        return self.feed_array(b"[" + text + b"]")

    def feed_array(self, blob: bytes | memoryview) -> int:
        """Like :meth:`feed_text` for a whole JSON array (a zero-copy view is fine)."""
        native = _native is not None
        if native:
            found: Columnized | None = _native.columnize(blob, _kind_code)
            if found is not None and self._native_chunk(found, blob):
                return found[0]
        try:
            events = _EVENTS_DECODER.decode(blob)
        except msgspec.ValidationError:
            events = self._decode_chunk(_LIST_DECODER.decode(blob))
        self.native_fallbacks += native  # a run the native path left to this one (not a bad cut: that raised)
        self._chunk(events)
        return len(events)

    def finish(self, rank: int, rank_source: str, count: int) -> Trace:
        """After the last chunk: warnings, the empty-trace checks, and the trace itself."""
        if count == 0:
            raise TraceError(
                f"{self.path}: the trace holds no events; re-record it (is the profiler schedule active?)"
            )
        self._note_problems()
        if not self.rows:
            if self.skipped and self.skipped == count:
                raise TraceError(
                    f"{self.path}: none of its {count:,} events is usable ({self.skip_reason}); "
                    "this is not a Kineto/Chrome trace"
                )
            raise TraceError(f"{self.path}: the trace holds no timed events (only metadata); re-record it")
        trace = self._trace(rank, rank_source, count)
        note = suspect.warning(trace)  # device events a clock glitch put far outside the host activity
        if note:
            trace.warnings.append(note)
        return trace

    def _decode_chunk(self, chunk: list[msgspec.Raw]) -> list[Event]:
        try:
            return _EVENTS_DECODER.decode(b"[" + b",".join(chunk) + b"]")
        except msgspec.MsgspecError:
            pass
        good: list[Event] = []
        for raw in chunk:
            try:
                good.append(_EVENT_DECODER.decode(raw))
            except msgspec.MsgspecError as err:
                self.skipped += 1
                self.skip_reason = self.skip_reason or f"event: {short_error(err)}"
        return good

    def _note_problems(self) -> None:
        if self.skipped:
            self.warnings.append(
                f"{self.path.name}: skipped {self.skipped:,} malformed event(s) ({self.skip_reason})"
            )
        if self.negative:
            self.warnings.append(
                f"{self.path.name}: {self.negative:,} event(s) with a negative duration were treated as instants"
            )
        if self.bad_time:
            self.warnings.append(
                f"{self.path.name}: ignored {self.bad_time:,} event(s) with a missing, NaN or out-of-range time"
            )
        capped = sum(1 for text in self.strings if is_capped(text))
        if capped:
            self.warnings.append(
                f"{self.path.name}: shortened {capped:,} name(s) longer than {MAX_NAME_CHARS:,} characters "
                "(kept: the start, then a hash that keeps distinct names apart)"
            )

    # --- one chunk ----------------------------------------------------------------------------
    def _chunk(self, events: list[Event]) -> None:
        codes = np.fromiter(map(_PH_CODES.__getitem__, map(attrgetter("ph"), events)), np.int8, len(events))
        meta = np.flatnonzero(codes == _PH_META).tolist()
        if meta:
            self._meta([events[i] for i in meta])
        flows = np.flatnonzero(codes == _PH_FLOW).tolist()
        if flows:
            self._flows([events[i] for i in flows])
        timed = np.flatnonzero(codes >= _PH_SPAN)
        if len(timed):
            self._timed([events[i] for i in timed.tolist()], codes[timed] == _PH_INSTANT)

    def _native_chunk(self, found: Columnized, blob: bytes | memoryview) -> bool:
        """Add a run the native columniser read (``_columnar.c``); the same pieces, names and flows as
        :meth:`_chunk` builds from the same text. False, with nothing changed, when a row has a bad time
        (the pure path counts and drops those)."""
        _, strings, timed, meta, flows, shape_rows, shapes, stacks, cpu_rows, cpu_comm, dev_rows, dev_comm = found
        t = [np.frombuffer(col, dtype=dtype) for col, dtype in zip(timed, _TIMED_DTYPES, strict=True)]
        ts_f, dur_f = t[_T_TS], t[_T_DUR]
        ok = np.isfinite(ts_f) & np.isfinite(dur_f) & (np.abs(ts_f) < _MAX_ABS_US) & (np.abs(dur_f) < _MAX_ABS_US)
        if not ok.all():
            return False
        if len(meta[0]):
            self._native_meta(meta, strings, blob)
        if len(flows[0]):
            self._native_flows(flows, strings)
        n = len(ts_f)
        if not n:
            return True
        kind, instant = t[_T_KIND], t[_T_INSTANT].view(np.bool_)
        negative = dur_f < 0
        self.negative += int(negative.sum())
        dur_f[negative | instant] = 0.0
        cols: dict[str, npt.NDArray[Any]] = {
            "kind": kind,
            "cat": self._intern_local(t[_T_CAT], strings),
            "name": self._intern_local(t[_T_NAME], strings),
            "ts": _to_ns(ts_f),
            "dur": np.rint(dur_f * 1000.0).astype(np.int64),
        }
        # String pids/tids ("Spans", "stream 7") are numbered as the pure path numbers them, pids first.
        pid, tid = t[_T_PID], t[_T_TID]
        if (t[_T_PID_STR] >= 0).any():
            pid = self._ids(_raw_ids(pid, t[_T_PID_STR], strings))
        if (t[_T_TID_STR] >= 0).any():
            tid = self._ids(_raw_ids(tid, t[_T_TID_STR], strings))
        cols["pid"] = pid
        ext, legacy = t[_T_INT["external_id"]], t[_T_INT["external_id_legacy"]]
        for name in _INT_COLUMNS:
            cols[name] = np.where(ext != -1, ext, legacy) if name == "external_id" else t[_T_INT[name]]
        for name in _FLOAT_COLUMNS:
            cols[name] = t[_T_FLOAT[name]].astype(np.float32)
        for name in _DIM_COLUMNS:
            cols[name] = t[_T_DIMS[name]]
        device = np.full(n, -1, dtype=np.int32)
        dev = np.flatnonzero((kind >= _DEV_KINDS.min()) & (kind <= _DEV_KINDS.max()))
        if len(dev):  # as _device_args: pid is the device index; args.stream, where present, the stream
            dev_pid = pid[dev]
            device_arg = t[_T_INT["device"]][dev]
            device[dev] = np.where((dev_pid >= 0) & (dev_pid < 1 << 16), dev_pid, np.clip(device_arg, 0, 1 << 16))
        cols["device"] = device
        stream = t[_T_INT["stream"]]
        cols["tid"] = np.where(stream >= 0, stream, tid)
        device_type, device_id = t[_T_INT["device_type"]], t[_T_INT["device_id"]]
        cols["mem_device"] = np.where(device_type == 0, -1, np.clip(device_id, -1, 1 << 16)).astype(np.int32)
        piece = Piece(cols, self.run_index)
        piece.op_rows = np.frombuffer(shape_rows, dtype=np.int64).tolist()
        table = self.op_texts
        add = table.setdefault
        piece.op_keys = [add(text, len(table)) for text in shapes]
        piece.comm_rows = np.frombuffer(cpu_rows, dtype=np.int64).tolist() + np.frombuffer(dev_rows, dtype=np.int64).tolist()
        piece.comm_chunks = cpu_comm + dev_comm
        piece.stacks = dict(stacks)
        self.pieces.append(piece)
        self.rows += n
        return True

    def _intern_local(self, local: npt.NDArray[np.int32], strings: list[str]) -> npt.NDArray[np.int32]:
        """Local string ids → this builder's, numbering new strings in the order the rows meet them
        (as :meth:`_intern` does)."""
        seen, first = np.unique(local, return_index=True)
        remap = np.zeros(len(strings), dtype=np.int32)
        ordered = seen[np.argsort(first)]
        remap[ordered] = [self._string_id(strings[i]) for i in ordered.tolist()]
        return remap[local]

    def _native_meta(self, meta: tuple[bytearray, ...], strings: list[str], blob: bytes | memoryview) -> None:
        """As :meth:`_meta`: per (name, pid, tid), in first-seen order, the args of its last event."""
        names = np.frombuffer(meta[0], dtype=np.int32)
        pids, tids = np.frombuffer(meta[1], dtype=np.int64), np.frombuffer(meta[2], dtype=np.int64)
        at, size = np.frombuffer(meta[3], dtype=np.int64), np.frombuffer(meta[4], dtype=np.int64)
        pid_str, tid_str = np.frombuffer(meta[5], dtype=np.int32), np.frombuffer(meta[6], dtype=np.int32)
        keys = np.stack([names.astype(np.int64), pids, pid_str.astype(np.int64), tids, tid_str.astype(np.int64)], axis=1)
        _, first = np.unique(keys, axis=0, return_index=True)
        _, first_reversed = np.unique(keys[::-1], axis=0, return_index=True)
        last = len(keys) - 1 - first_reversed
        view = memoryview(blob)
        for j in np.argsort(first).tolist():
            row, final = int(first[j]), int(last[j])
            pid = strings[pid_str[row]] if pid_str[row] >= 0 else int(pids[row])
            tid = strings[tid_str[row]] if tid_str[row] >= 0 else int(tids[row])
            key = (strings[names[row]], self._id(pid), self._id(tid))
            if key not in self.meta:
                raw = bytes(view[at[final] : at[final] + size[final]]) if at[final] >= 0 else bytes(NO_ARGS)
                self.meta[key] = (self.run_index, raw)

    def _native_flows(self, flows: tuple[bytearray, ...], strings: list[str]) -> None:
        """As :meth:`_flows`, from columns."""
        ids, has_id = np.frombuffer(flows[0], dtype=np.int64), np.frombuffer(flows[1], dtype=np.bool_)
        start, cats = np.frombuffer(flows[2], dtype=np.bool_), np.frombuffer(flows[3], dtype=np.int32)
        flow_cat = np.array([text.lower() in _FLOW_CATEGORIES for text in strings], dtype=bool)
        fwdbwd = np.array([text == "fwdbwd" for text in strings], dtype=bool)
        kept = np.flatnonzero(has_id & flow_cat[cats])

        def column(values: I64, local: npt.NDArray[np.int32]) -> Any:
            # ints as an array; with strings, the raw values for _flow_table's _ids (as the pure path)
            values, local = values[kept], local[kept]
            return _raw_ids(values, local, strings) if (local >= 0).any() else values

        pids, tids = np.frombuffer(flows[4], dtype=np.int64), np.frombuffer(flows[5], dtype=np.int64)
        id_str, pid_str, tid_str = (np.frombuffer(flows[i], dtype=np.int32) for i in (7, 8, 9))
        part = (
            column(ids, id_str), start[kept], fwdbwd[cats[kept]], column(pids, pid_str), column(tids, tid_str),
            np.frombuffer(flows[6], dtype=np.float64)[kept],
        )  # fmt: skip
        self.flow_parts.append((self.run_index, part))

    def _meta(self, events: list[Event]) -> None:
        """Process and thread names. Kineto repeats them many times (310k of 456k events in one MTIA
        trace): dedupe on the raw values first, convert only the unique ones."""
        unique = {(e.name, e.pid, e.tid): e.args for e in events if e.name in _NAME_EVENTS}
        for (name, pid, tid), args in unique.items():
            key = (name, self._id(pid), self._id(tid))
            if key not in self.meta:
                self.meta[key] = (self.run_index, bytes(args))

    def _id(self, value: int | str) -> int:
        """A pid/tid as an int: ints as they are, ``"stream 7"``/``"1234"`` as their number, other strings
        (``"Spans"``) a negative id unique within the trace."""
        if isinstance(value, int):
            return value if -(2**62) < value < 2**62 else -1
        text = value.strip()
        digits = text[7:] if text.startswith("stream ") else text
        if digits.lstrip("-").isdecimal() and len(digits) < 18:
            return int(digits)
        return -1000 - self._string_id("\0pid:" + text)

    def _string_id(self, text: str) -> int:
        found = self.strings.get(text)
        if found is None:
            text = cap_name(text)
            found = self.strings.get(text)
            if found is None:
                found = self.strings[text] = len(self.strings)
                self.string_runs.append(self.run_index)
        return found

    def _ids(self, values: list[int | str]) -> I64:
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return np.array([self._id(v) for v in values], dtype=np.int64)

    def _flows(self, flows: list[Event]) -> None:
        kept = [e for e in flows if e.id is not None and e.cat.lower() in _FLOW_CATEGORIES]
        self.flow_parts.append(
            (
                self.run_index,
                (
                    [e.id for e in kept],
                    [e.ph == "s" for e in kept],
                    [e.cat == "fwdbwd" for e in kept],
                    [e.pid for e in kept],
                    [e.tid for e in kept],
                    [e.ts for e in kept],
                ),
            )
        )

    def _intern(self, values: list[str]) -> npt.NDArray[np.int32]:
        table = self.strings
        distinct = dict.fromkeys(values)
        if any(len(text) > MAX_NAME_CHARS for text in distinct):
            values = [cap_name(text) for text in values]
            distinct = dict.fromkeys(values)
        for text in distinct:
            if text not in table:
                table[text] = len(table)
                self.string_runs.append(self.run_index)
        return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values))

    def _kinds(self, cats: list[str], names: list[str], instant: npt.NDArray[np.bool_]) -> npt.NDArray[np.int8]:
        lookup = self.kind_of_cat
        for cat in set(cats):
            if cat not in lookup:
                found = kind_of_category(cat)
                lookup[cat] = int(found) if found is not None else int(Kind.OTHER)
        kind = np.array([lookup[c] for c in cats], dtype=np.int8)
        op = np.flatnonzero(kind == int(Kind.CPU_OP))
        if len(op):  # legacy traces file ProfilerStep and DataLoader annotations under "Operator"
            annotated = np.array([names[i].startswith(_ANNOTATION_PREFIXES) for i in op.tolist()], dtype=bool)
            kind[op[annotated]] = int(Kind.USER_ANNOTATION)
        if instant.any():
            rows = np.flatnonzero(instant)
            memory = np.array([names[i] == "[memory]" for i in rows.tolist()], dtype=bool)
            kind[rows] = np.where(memory, int(Kind.MEMORY), int(Kind.INSTANT))
        return kind

    def _timed(self, events: list[Event], instant: npt.NDArray[np.bool_]) -> None:
        ts_f = _floats(events, "ts")
        dur_f = _floats(events, "dur")
        ok = np.isfinite(ts_f) & np.isfinite(dur_f) & (np.abs(ts_f) < _MAX_ABS_US) & (np.abs(dur_f) < _MAX_ABS_US)
        if not ok.all():
            self.bad_time += int((~ok).sum())
            keep = np.flatnonzero(ok)
            events = [events[i] for i in keep.tolist()]
            ts_f, dur_f, instant = ts_f[keep], dur_f[keep], instant[keep]
        if not events:
            return
        negative = dur_f < 0
        self.negative += int(negative.sum())
        dur_f[negative | instant] = 0.0
        n = len(events)
        names = list(map(attrgetter("name"), events))
        cats = list(map(attrgetter("cat"), events))
        cols: dict[str, npt.NDArray[Any]] = {
            "kind": self._kinds(cats, names, instant),
            "cat": self._intern(cats),
            "name": self._intern(names),
            "ts": _to_ns(ts_f),
            "dur": np.rint(dur_f * 1000.0).astype(np.int64),
            "pid": self._ids(list(map(attrgetter("pid"), events))),
            "tid": self._ids(list(map(attrgetter("tid"), events))),
            "device": np.full(n, -1, dtype=np.int32),
            "mem_device": np.full(n, -1, dtype=np.int32),
        }
        for name in _INT_COLUMNS:
            cols[name] = np.full(n, -1, dtype=np.int64)
        for name in _FLOAT_COLUMNS:
            cols[name] = np.full(n, np.nan, dtype=np.float32)
        for name in _DIM_COLUMNS:
            cols[name] = np.full(n, -1, dtype=np.int32)
        piece = Piece(cols, self.run_index)
        self._cpu_args(events, names, piece)
        self._device_args(events, piece)
        self._memory_args(events, piece)
        self.pieces.append(piece)
        self.rows += n

    def _cpu_args(self, events: list[Event], names: list[str], piece: Piece) -> None:
        cols = piece.cols
        rows = np.flatnonzero(np.isin(cols["kind"], _CPU_KINDS))
        if not len(rows):
            return
        index = rows.tolist()
        args = _decode_args([events[i].args for i in index], OpArgs, _OP_DECODER)
        _link_ids(cols, rows, args)
        cols["seq"][rows] = _column(args, "seq")
        cols["fwd_tid"][rows] = _column(args, "fwd_tid")
        cols["python_id"][rows] = _column(args, "python_id")
        cols["python_parent_id"][rows] = _column(args, "python_parent_id")
        with_dims = [i for i, a in zip(index, args) if a.input_dims or a.input_dims_legacy]
        piece.op_rows = with_dims
        table = self.op_texts
        add = table.setdefault
        piece.op_keys = [add(text, len(table)) for text in _canonical_shapes([events[i].args for i in with_dims])]
        comm = [i for i, a in zip(index, args) if a.collective_name is not None or names[i] == "record_param_comms"]
        piece.comm_rows += comm
        piece.comm_chunks += [bytes(events[i].args) for i in comm]
        piece.stacks.update((i, a.call_stack) for i, a in zip(index, args) if a.call_stack)

    def _device_args(self, events: list[Event], piece: Piece) -> None:
        cols = piece.cols
        rows = np.flatnonzero(np.isin(cols["kind"], _DEV_KINDS))
        if not len(rows):
            return
        index = rows.tolist()
        args = _decode_args([events[i].args for i in index], GpuArgs, _GPU_DECODER)
        _link_ids(cols, rows, args)
        cols["nbytes"][rows] = _column(args, "bytes")
        cols["grid"][rows] = _int64([_prod3(a.grid) for a in args])
        cols["block"][rows] = _int64([_prod3(a.block) for a in args])
        for prefix, dims in (("grid", [_dims3(a.grid) for a in args]), ("block", [_dims3(a.block) for a in args])):
            xyz = np.array(dims, dtype=np.int32).reshape(-1, 3)
            for axis, suffix in enumerate("xyz"):
                cols[f"{prefix}_{suffix}"][rows] = xyz[:, axis]
        cols["registers"][rows] = _column(args, "registers")
        cols["shared_memory"][rows] = _column(args, "shared_memory")
        cols["blocks_per_sm"][rows] = _floats(args, "blocks_per_sm", np.float32)
        cols["warps_per_sm"][rows] = _floats(args, "warps_per_sm", np.float32)
        cols["occupancy_pct"][rows] = _floats(args, "occupancy", np.float32)
        # pid is the device index in every Kineto version; args.device only when pid is not one.
        pid = cols["pid"][rows]
        device_arg = _column(args, "device")
        device = np.where((pid >= 0) & (pid < 1 << 16), pid, np.clip(device_arg, 0, 1 << 16))
        cols["device"][rows] = device.astype(np.int32)
        # The stream is args.stream where present: MTIA writes a row id as tid (tid 4 for stream 1).
        stream = _column(args, "stream")
        cols["tid"][rows] = np.where(stream >= 0, stream, cols["tid"][rows])
        for i, a in zip(index, args):
            if a.collective_name is not None:
                piece.comm_rows.append(i)
                piece.comm_chunks.append(bytes(events[i].args))

    def _memory_args(self, events: list[Event], piece: Piece) -> None:
        cols = piece.cols
        rows = np.flatnonzero(cols["kind"] == int(Kind.MEMORY))
        if not len(rows):
            return
        args = _decode_args([events[i].args for i in rows.tolist()], MemoryArgs, _MEM_DECODER)
        cols["nbytes"][rows] = _column(args, "nbytes")
        cols["total_allocated"][rows] = _column(args, "total_allocated")
        cols["total_reserved"][rows] = _column(args, "total_reserved")
        device_id = _column(args, "device_id")
        device_type = _column(args, "device_type")
        cols["mem_device"][rows] = np.where(device_type == 0, -1, np.clip(device_id, -1, 1 << 16)).astype(np.int32)

    # --- assembling ---------------------------------------------------------------------------
    def _trace(self, rank: int, rank_source: str, count: int) -> Trace:
        # One column at a time: concatenate the chunks' pieces (freeing them as we go), then put the rows
        # in time order, so at most one extra column is alive — not three copies of all of them.
        self.piece_sizes = [len(p.cols["ts"]) for p in self.pieces]
        order = np.argsort(np.concatenate([p.cols["ts"] for p in self.pieces]), kind="stable")
        sorted_columns: dict[str, npt.NDArray[Any]] = {}
        # The pieces are joined into one scratch buffer reused for every column (fresh memory for each
        # join would be page-faulted in each time: ~0.2 s for a million rows of 25 columns).
        scratch = np.empty(len(order) * 8, dtype=np.uint8)
        for name in Columns.__dataclass_fields__:
            parts = [p.cols.pop(name) for p in self.pieces]
            merged = scratch[: len(order) * parts[0].dtype.itemsize].view(parts[0].dtype)
            np.concatenate(parts, out=merged)
            del parts
            sorted_columns[name] = merged[order]
        del scratch, merged
        columns = Columns(**sorted_columns)
        del sorted_columns
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        op_args, comm_args, stacks = self._side_tables(inverse)
        process_names, thread_names = self._names()
        header = self.header
        props = header.deviceProperties or header.computeProperties or []
        strings = [""] * len(self.strings)
        for text, index in self.strings.items():
            strings[index] = text
        return Trace(
            path=self.path,
            rank=rank,
            rank_source=rank_source,
            columns=columns,
            strings=strings,
            flows=self._flow_table(),
            base_time_ns=int(header.baseTimeNanoseconds or 0),
            devices=[DeviceInfo.from_properties(p, i) for i, p in enumerate(props) if isinstance(p, dict)],
            distributed=dict(header.distributedInfo or {}),
            metadata=_header_metadata(header),
            process_names=process_names,
            thread_names=thread_names,
            op_args=op_args,
            comm_args_raw=comm_args,
            stacks=stacks,
            warnings=self.warnings,
            event_count=count,
        )

    def _side_tables(self, inverse: I64) -> tuple[ArgsStore, ArgsStore, dict[int, str]]:
        op_rows: list[I64] = []
        op_keys: list[I64] = []
        comm_rows: list[int] = []
        comm_chunks: list[bytes] = []
        stacks: dict[int, str] = {}
        start = 0
        for piece, size in zip(self.pieces, self.piece_sizes, strict=True):
            op_rows.append(np.asarray(piece.op_rows, dtype=np.int64) + start)
            op_keys.append(np.asarray(piece.op_keys, dtype=np.int64))
            comm_rows += [start + r for r in piece.comm_rows]
            comm_chunks += piece.comm_chunks
            stacks.update((start + r, text) for r, text in piece.stacks.items())
            start += size
        self.pieces = []
        none = np.zeros(0, dtype=np.int64)
        rows = inverse[np.concatenate(op_rows)] if op_rows else none
        op = ArgsStore.from_keys(rows, np.concatenate(op_keys) if op_keys else none, list(self.op_texts))
        comm = ArgsStore.build(inverse[np.asarray(comm_rows, dtype=np.int64)].tolist(), comm_chunks)
        stack_rows = inverse[np.fromiter(stacks, dtype=np.int64, count=len(stacks))].tolist()
        return op, comm, dict(zip(stack_rows, stacks.values(), strict=True))

    def _names(self) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
        keys = list(self.meta)
        args = _decode_args([msgspec.Raw(v) for _, v in self.meta.values()], MetaArgs, msgspec.json.Decoder(list[MetaArgs]))
        processes: dict[int, str] = {}
        threads: dict[tuple[int, int], str] = {}
        for (kind, pid, tid), arg in zip(keys, args):
            if not isinstance(arg.name, str) or not arg.name:
                continue
            arg.name = cap_name(arg.name)
            if kind == "process_name":
                processes.setdefault(pid, arg.name)
            else:
                threads.setdefault((pid, tid), arg.name)
        return processes, threads

    def _flow_table(self) -> Flows:
        parts = [part for _, part in self.flow_parts]
        if not parts:
            parts = [([], [], [], [], [], [])]

        def column(i: int, convert: Callable[[Any], npt.NDArray[Any]]) -> npt.NDArray[Any]:
            # Column by column, parts in file order: string ids are numbered as in one pass over the file.
            return np.concatenate([p[i] if isinstance(p[i], np.ndarray) else convert(p[i]) for p in parts])

        ids, pids, tids = column(0, self._ids), column(3, self._ids), column(4, self._ids)
        ts_f = column(5, lambda v: np.array(v, dtype=np.float64))
        ok = np.isfinite(ts_f) & (np.abs(ts_f) < _MAX_ABS_US)
        keep = np.flatnonzero(ok)
        return Flows(
            flow_id=ids[keep],
            is_start=column(1, lambda v: np.array(v, dtype=bool))[keep],
            is_fwdbwd=column(2, lambda v: np.array(v, dtype=bool))[keep],
            pid=pids[keep],
            tid=tids[keep],
            ts=_to_ns(ts_f[keep]) if len(keep) else np.zeros(0, dtype=np.int64),
        )


def _header_metadata(header: TraceFile) -> dict[str, Any]:
    """Top-level facts worth reporting. Never environment variables or free-form metadata blocks."""
    out: dict[str, Any] = {}
    for key in (
        "schemaVersion",
        "cuda_driver_version",
        "cuda_runtime_version",
        "hip_runtime_version",
        "record_shapes",
        "profile_memory",
        "with_stack",
        "with_flops",
        "trace_id",
        "displayTimeUnit",
        "host_name",
    ):
        value = getattr(header, key)
        if value is not None:
            out[key] = value
    return out



__all__ = [
    "CHUNK_EVENTS", "HEADER_DECODER", "MAX_NAME_CHARS", "Builder", "Columnized", "FlowPart", "Piece", "RawTrace",
    "cap_name", "encode_json", "is_capped", "native_enabled", "short_error", "typed_header",
]  # fmt: skip
