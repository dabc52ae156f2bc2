"""Read one Kineto / Chrome-trace JSON file into a :class:`~aiprof.trace.model.Trace`.

Fast path: gunzip, one typed msgspec decode into slim event structs, then numpy columns built with list
comprehensions; each kind's ``args`` are decoded in one batch. Nothing keeps a dict per event.

Slow paths, taken only when the fast one fails: a file cut off mid-write is salvaged up to its last
complete event (with a warning saying how much was read); a file with events of the wrong shape, or
with NaN, is decoded generically and the bad events are skipped with a warning.
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np

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
from aiprof.trace.schema import NO_ARGS, Event, GpuArgs, MemoryArgs, MetaArgs, OpArgs, TraceFile

T = TypeVar("T")

_FLOW_CATEGORIES = {"ac2g", "async", "async_cpu_to_gpu", "async_gpu", "fwdbwd", "launch"}
_ANNOTATION_PREFIXES = ("ProfilerStep#", "enumerate(DataLoader)", "Optimizer.step#", "Optimizer.zero_grad#")
_MAX_ABS_US = 9.0e15  # beyond this, ns no longer fit in int64
_DIGITS = re.compile(r"-?\d+")


class RawTrace(msgspec.Struct):
    """What the decoder produced, before columns are built."""

    events: list[Event]
    header: TraceFile
    warnings: list[str]


# ---------------------------------------------------------------------------------------------------
# Reading bytes
# ---------------------------------------------------------------------------------------------------
def read_bytes(path: Path) -> tuple[bytes, list[str]]:
    """The file's JSON bytes, gunzipped when compressed. A truncated gzip yields what it holds."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file; check the path") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder; pass the folder itself to load every trace in it") from None
    except PermissionError:
        raise TraceError(f"{path}: permission denied; make the file readable (chmod +r) and retry") from None
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror}); check the file and retry") from None
    if data[:2] != b"\x1f\x8b":
        return data, []
    return _gunzip(path, data)


def _gunzip(path: Path, data: bytes) -> tuple[bytes, list[str]]:
    decomp = zlib.decompressobj(wbits=31)
    try:
        out = decomp.decompress(data)
    except zlib.error as err:
        raise TraceError(f"{path}: corrupt gzip data ({err}); re-copy or re-record the trace") from None
    if decomp.eof:
        return out, []
    if not out:
        raise TraceError(f"{path}: the gzip file is truncated before any data; re-copy or re-record the trace")
    return out, [f"{path.name}: the gzip stream is truncated ({len(data):,} compressed bytes); salvaging what it holds"]


# ---------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------
_FILE_DECODER = msgspec.json.Decoder(TraceFile)
_LIST_DECODER = msgspec.json.Decoder(list[Event])


def decode(path: Path, data: bytes) -> RawTrace:
    """Decode JSON bytes into events plus the top-level header, salvaging what can be salvaged."""
    body = data.lstrip()
    if not body:
        raise TraceError(f"{path}: the file is empty; re-record the trace")
    if body[:1] not in (b"{", b"["):
        raise TraceError(f"{path}: not JSON (starts with {body[:12]!r}); expected a Kineto/Chrome trace")
    try:
        return _decode_fast(body)
    except msgspec.ValidationError:
        return _decode_lenient(path, body)
    except msgspec.DecodeError:
        pass
    try:
        return _decode_lenient(path, body)
    except TraceError as err:
        salvaged = _salvage_truncated(path, body)
        if salvaged is None:
            raise err from None
        return salvaged


def _decode_fast(body: bytes) -> RawTrace:
    if body[:1] == b"[":
        return RawTrace(_LIST_DECODER.decode(body), TraceFile(), [])
    header = _FILE_DECODER.decode(body)
    if not header.traceEvents and b'"traceEvents"' not in body:
        raise msgspec.ValidationError("no traceEvents")
    events, header.traceEvents = header.traceEvents, []
    return RawTrace(events, header, [])


def _decode_lenient(path: Path, body: bytes) -> RawTrace:
    """Generic decode (accepts NaN/Infinity); keep the events that have a usable shape."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise TraceError(f"{path}: not valid JSON ({_short(err)})") from None
    if isinstance(doc, list):
        items, header = doc, TraceFile()
    elif isinstance(doc, dict):
        items = doc.get("traceEvents")
        if not isinstance(items, list):
            raise TraceError(
                f"{path}: JSON without a 'traceEvents' list; this is not a Kineto/Chrome trace"
            )
        header = _lenient_header(doc)
    else:
        raise TraceError(f"{path}: JSON {type(doc).__name__}, not a trace (expected an object or a list)")
    events: list[Event] = []
    bad: list[str] = []
    for index, item in enumerate(items):
        event = _lenient_event(item)
        if isinstance(event, str):
            bad.append(f"event {index}: {event}")
        else:
            events.append(event)
    warnings = []
    if bad:
        warnings.append(f"{path.name}: skipped {len(bad):,} malformed event(s) ({bad[0]})")
    return RawTrace(events, header, warnings)


def _lenient_header(doc: dict[str, Any]) -> TraceFile:
    fields = {k: v for k, v in doc.items() if k != "traceEvents"}
    try:
        return msgspec.convert(fields, TraceFile, strict=False)
    except msgspec.ValidationError:
        header = TraceFile()
        for name in TraceFile.__struct_fields__:
            if name in fields:
                try:
                    header = msgspec.structs.replace(header, **{name: fields[name]})
                    msgspec.convert(msgspec.to_builtins(header), TraceFile)
                except (msgspec.ValidationError, TypeError):
                    header = msgspec.structs.replace(header, **{name: getattr(TraceFile(), name)})
        return header


def _lenient_event(item: Any) -> Event | str:
    if not isinstance(item, dict):
        return f"not an object ({type(item).__name__})"
    args = item.get("args")
    fields = {k: v for k, v in item.items() if k != "args" and k in Event.__struct_fields__}
    try:
        event = msgspec.convert(fields, Event, strict=False)
    except msgspec.ValidationError as err:
        return _short(err)
    if not (math.isfinite(event.ts) and math.isfinite(event.dur)):
        return "ts or dur is not a finite number"
    if isinstance(args, dict):
        try:
            event.args = msgspec.Raw(msgspec.json.encode(args))
        except (TypeError, ValueError, OverflowError):
            return "args cannot be re-encoded"
    return event


def _salvage_truncated(path: Path, body: bytes) -> RawTrace | None:
    """A file cut off mid-write: keep every complete event before the cut."""
    start = body.find(b'"traceEvents"')
    if start >= 0:
        start = body.find(b"[", start)
    elif body[:1] == b"[":
        start = 0
    if start < 0:
        return None
    end = len(body)
    for _ in range(200):
        end = body.rfind(b"}", start, end)
        if end < 0:
            return None
        candidate = body[start : end + 1] + b"]"
        try:
            events = _LIST_DECODER.decode(candidate)
        except msgspec.DecodeError:
            continue
        except msgspec.ValidationError:
            try:
                lenient = _decode_lenient(path, candidate)
            except TraceError:
                continue
            events = lenient.events
        if not events:
            return None
        header = _salvage_header(body[:start])
        pct = 100.0 * (end + 1) / len(body)
        note = (
            f"{path.name}: the trace is cut off mid-write; salvaged {len(events):,} complete events "
            f"({pct:.1f}% of {len(body):,} bytes); results cover only what was recorded before the cut"
        )
        return RawTrace(events, header, [note])
    return None


def _salvage_header(prefix: bytes) -> TraceFile:
    """Top-level fields written before ``traceEvents`` (Kineto writes its header first)."""
    text = prefix.rstrip()
    key = text.rfind(b'"traceEvents"')
    if key < 0:
        return TraceFile()
    head = text[:key].rstrip().rstrip(b",") + b"}"
    try:
        return msgspec.json.decode(head, type=TraceFile)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return TraceFile()


def _short(err: Exception) -> str:
    return str(err).splitlines()[0][:160]


# ---------------------------------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------------------------------
def _to_ns(values: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """µs floats with 3 decimals → int64 ns without the rounding error of ``round(ts*1000)``.

    The integer part converts exactly; the fraction carries at most half an ulp of error, so rounding it
    alone recovers the nanosecond that Kineto wrote (for |ts| < 2^43 µs, i.e. every relative timestamp).
    """
    whole = np.floor(values)
    frac = np.rint((values - whole) * 1000.0)
    return whole.astype(np.int64) * 1000 + frac.astype(np.int64)


def _ids(values: Sequence[int | str], strings: dict[str, int]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """pid/tid values as int64; strings like ``"stream 7"`` or ``"1234"`` become their number, other
    strings (``"Spans"``) a negative id unique within the trace."""
    try:
        return np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        if isinstance(value, int) and not isinstance(value, bool) and -(2**62) < value < 2**62:
            out[i] = value
            continue
        text = str(value)
        match = _DIGITS.search(text) if not text.lstrip("-").isdigit() else None
        if text.lstrip("-").isdigit() and len(text) < 18:
            out[i] = int(text)
        elif match is not None and len(match.group()) < 18 and text.startswith("stream"):
            out[i] = int(match.group())
        else:
            out[i] = -1000 - strings.setdefault("\0pid:" + text, len(strings))
    return out


def _batch_decode(raws: list[msgspec.Raw], type_: type[T]) -> list[T | None]:
    """Decode many args objects with one call: join them into one JSON array."""
    if not raws:
        return []
    blob = b"[" + b",".join(raws) + b"]"  # type: ignore[arg-type]
    try:
        return msgspec.json.decode(blob, type=list[type_ | None])  # type: ignore[valid-type]
    except msgspec.ValidationError:
        return [_decode_one(r, type_) for r in raws]


def _decode_one(raw: msgspec.Raw, type_: type[T]) -> T | None:
    try:
        value = msgspec.json.decode(raw, type=dict[str, Any] | None)  # type: ignore[arg-type]
        return None if value is None else msgspec.convert(value, type_, strict=False)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _fill(
    column: np.ndarray[Any, Any], rows: np.ndarray[Any, Any], args: list[Any], get: Callable[[Any], Any]
) -> None:
    values = [get(a) if a is not None else None for a in args]
    fill = column.dtype.type(-1) if column.dtype.kind == "i" else np.nan
    column[rows] = np.array([fill if v is None else v for v in values], dtype=column.dtype)


def _first(a: Any, b: Any) -> Any:
    return a if a is not None else b


def _prod(dims: list[int] | None) -> int | None:
    if not dims:
        return None
    total = 1
    for d in dims:
        total *= int(d)
    return total


class _Builder:
    """Turns decoded events into :class:`Columns` plus the side tables of a :class:`Trace`."""

    def __init__(self, raw: RawTrace) -> None:
        self.raw = raw
        self.strings: dict[str, int] = {}
        self.warnings = list(raw.warnings)

    def build(self, path: Path, rank: int, rank_source: str) -> Trace:
        events = self.raw.events
        ph = [e.ph for e in events]
        is_span = np.array([p == "X" for p in ph], dtype=bool)
        is_instant = np.array([p in ("i", "I") for p in ph], dtype=bool)
        is_flow = np.array([p in ("s", "f", "t") for p in ph], dtype=bool)
        process_names, thread_names = self._metadata([e for e, p in zip(events, ph) if p == "M"])
        flows = self._flows([events[i] for i in np.flatnonzero(is_flow)])
        keep = np.flatnonzero(is_span | is_instant)
        kept = [events[i] for i in keep]
        columns, arg_rows = self._columns(kept, is_instant[keep])
        order = np.argsort(columns.ts, kind="stable")
        columns = Columns(**{name: getattr(columns, name)[order] for name in Columns.__dataclass_fields__})
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        op_args, comm_args, stacks = self._side_tables(kept, arg_rows, inverse)
        header = self.raw.header
        props = header.deviceProperties or header.computeProperties or []
        strings = [""] * len(self.strings)
        for text, index in self.strings.items():
            strings[index] = text
        trace = Trace(
            path=path,
            rank=rank,
            rank_source=rank_source,
            columns=columns,
            strings=strings,
            flows=flows,
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
            event_count=len(events),
        )
        return trace

    # --- pieces -------------------------------------------------------------------------------
    def _intern(self, values: list[str]) -> np.ndarray[Any, np.dtype[np.int32]]:
        table = self.strings
        return np.array([table.setdefault(v, len(table)) for v in values], dtype=np.int32)

    def _metadata(self, meta: list[Event]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
        named = [e for e in meta if e.name in ("process_name", "thread_name")]
        args = _batch_decode([e.args for e in named], MetaArgs)
        pids = _ids([e.pid for e in named], self.strings)
        tids = _ids([e.tid for e in named], self.strings)
        processes: dict[int, str] = {}
        threads: dict[tuple[int, int], str] = {}
        for event, arg, pid, tid in zip(named, args, pids.tolist(), tids.tolist()):
            if arg is None or not arg.name:
                continue
            if event.name == "process_name":
                processes[pid] = arg.name
            else:
                threads[(pid, tid)] = arg.name
        return processes, threads

    def _flows(self, flows: list[Event]) -> Flows:
        flows = [e for e in flows if e.cat.lower() in _FLOW_CATEGORIES and e.id is not None]
        ids = _ids([e.id if e.id is not None else -1 for e in flows], self.strings)
        ts = np.array([e.ts for e in flows], dtype=np.float64)
        return Flows(
            flow_id=ids,
            is_start=np.array([e.ph == "s" for e in flows], dtype=bool),
            is_fwdbwd=np.array([e.cat == "fwdbwd" for e in flows], dtype=bool),
            pid=_ids([e.pid for e in flows], self.strings),
            tid=_ids([e.tid for e in flows], self.strings),
            ts=_to_ns(ts) if len(ts) else np.zeros(0, dtype=np.int64),
        )

    def _columns(self, events: list[Event], instant: np.ndarray[Any, Any]) -> tuple[Columns, dict[str, Any]]:
        n = len(events)
        names = [e.name for e in events]
        cats = [e.cat for e in events]
        kind = self._kinds(cats, names, instant)
        ts_f = np.array([e.ts for e in events], dtype=np.float64)
        dur_f = np.array([e.dur for e in events], dtype=np.float64)
        ok = np.isfinite(ts_f) & np.isfinite(dur_f) & (np.abs(ts_f) < _MAX_ABS_US) & (dur_f < _MAX_ABS_US)
        negative = dur_f < 0
        if negative.any():
            self.warnings.append(f"{int(negative.sum()):,} event(s) with a negative duration were treated as instants")
        if not ok.all():
            self.warnings.append(f"{int((~ok).sum()):,} event(s) with unusable timestamps were ignored")
            kind[~ok] = int(Kind.SPAN)
            ts_f[~ok] = 0.0
            dur_f[~ok] = 0.0
        dur_f[negative | instant] = 0.0
        minus1 = lambda: np.full(n, -1, dtype=np.int64)  # noqa: E731
        nan = lambda: np.full(n, np.nan, dtype=np.float32)  # noqa: E731
        pid = _ids([e.pid for e in events], self.strings)
        tid = _ids([e.tid for e in events], self.strings)
        cols = Columns(
            kind=kind,
            cat=self._intern(cats),
            name=self._intern(names),
            ts=_to_ns(ts_f),
            dur=np.rint(dur_f * 1000.0).astype(np.int64),
            pid=pid,
            tid=tid,
            device=np.full(n, -1, dtype=np.int32),
            correlation=minus1(),
            external_id=minus1(),
            seq=minus1(),
            fwd_tid=minus1(),
            python_id=minus1(),
            python_parent_id=minus1(),
            nbytes=minus1(),
            grid=minus1(),
            block=minus1(),
            registers=minus1(),
            shared_memory=minus1(),
            blocks_per_sm=nan(),
            warps_per_sm=nan(),
            occupancy_pct=nan(),
            total_allocated=minus1(),
            total_reserved=minus1(),
            mem_device=np.full(n, -1, dtype=np.int32),
        )
        arg_rows = self._args(events, cols)
        return cols, arg_rows

    def _kinds(self, cats: list[str], names: list[str], instant: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        lookup: dict[str, int] = {}
        for cat in set(cats):
            found = kind_of_category(cat)
            lookup[cat] = int(found) if found is not None else int(Kind.OTHER)
        kind = np.array([lookup[c] for c in cats], dtype=np.int8)
        # Legacy traces file ProfilerStep and DataLoader annotations under "Operator".
        annotations = np.array([n.startswith(_ANNOTATION_PREFIXES) for n in names], dtype=bool)
        kind[annotations & (kind == int(Kind.CPU_OP))] = int(Kind.USER_ANNOTATION)
        memory = np.array([n == "[memory]" for n in names], dtype=bool)
        kind[instant] = int(Kind.INSTANT)
        kind[instant & memory] = int(Kind.MEMORY)
        return kind

    def _args(self, events: list[Event], cols: Columns) -> dict[str, Any]:
        kind = cols.kind
        cpu = np.flatnonzero(np.isin(kind, [Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME, Kind.DRIVER]))
        cpu_args = _batch_decode([events[i].args for i in cpu], OpArgs)
        _fill(cols.external_id, cpu, cpu_args, lambda a: _first(a.external_id, a.external_id_legacy))
        _fill(cols.correlation, cpu, cpu_args, lambda a: a.correlation)
        _fill(cols.seq, cpu, cpu_args, lambda a: a.seq)
        _fill(cols.fwd_tid, cpu, cpu_args, lambda a: a.fwd_tid)
        _fill(cols.python_id, cpu, cpu_args, lambda a: a.python_id)
        _fill(cols.python_parent_id, cpu, cpu_args, lambda a: a.python_parent_id)

        dev = np.flatnonzero(np.isin(kind, [int(k) for k in DEVICE_KINDS]))
        dev_args = _batch_decode([events[i].args for i in dev], GpuArgs)
        _fill(cols.external_id, dev, dev_args, lambda a: _first(a.external_id, a.external_id_legacy))
        _fill(cols.correlation, dev, dev_args, lambda a: a.correlation)
        _fill(cols.nbytes, dev, dev_args, lambda a: a.bytes)
        _fill(cols.grid, dev, dev_args, lambda a: _prod(a.grid))
        _fill(cols.block, dev, dev_args, lambda a: _prod(a.block))
        _fill(cols.registers, dev, dev_args, lambda a: a.registers)
        _fill(cols.shared_memory, dev, dev_args, lambda a: a.shared_memory)
        _fill(cols.blocks_per_sm, dev, dev_args, lambda a: a.blocks_per_sm)
        _fill(cols.warps_per_sm, dev, dev_args, lambda a: a.warps_per_sm)
        _fill(cols.occupancy_pct, dev, dev_args, lambda a: a.occupancy)
        device_arg = np.full(len(dev), -1, dtype=np.int64)
        _fill(device_arg, np.arange(len(dev)), dev_args, lambda a: a.device)
        # Device rows: pid is the device index in every Kineto version; args.device when pid is not.
        dev_pid = cols.pid[dev]
        cols.device[dev] = np.where((dev_pid >= 0) & (dev_pid < 1 << 16), dev_pid, np.maximum(device_arg, 0))
        # The stream is args.stream where present: MTIA writes a row id as tid (tid 4 for stream 1).
        stream_arg = np.full(len(dev), -1, dtype=np.int64)
        _fill(stream_arg, np.arange(len(dev)), dev_args, lambda a: a.stream)
        cols.tid[dev] = np.where(stream_arg >= 0, stream_arg, cols.tid[dev])

        mem = np.flatnonzero(kind == int(Kind.MEMORY))
        mem_args = _batch_decode([events[i].args for i in mem], MemoryArgs)
        _fill(cols.nbytes, mem, mem_args, lambda a: a.nbytes)
        _fill(cols.total_allocated, mem, mem_args, lambda a: a.total_allocated)
        _fill(cols.total_reserved, mem, mem_args, lambda a: a.total_reserved)
        mem_dev = np.full(len(mem), -1, dtype=np.int64)
        mem_type = np.full(len(mem), -1, dtype=np.int64)
        _fill(mem_dev, np.arange(len(mem)), mem_args, lambda a: a.device_id)
        _fill(mem_type, np.arange(len(mem)), mem_args, lambda a: a.device_type)
        cols.mem_device[mem] = np.where(mem_type == 0, -1, mem_dev)
        return {"cpu": cpu, "cpu_args": cpu_args, "dev": dev, "dev_args": dev_args}

    def _side_tables(
        self, events: list[Event], arg_rows: dict[str, Any], inverse: np.ndarray[Any, Any]
    ) -> tuple[ArgsStore, ArgsStore, dict[int, str]]:
        op_rows: list[int] = []
        op_chunks: list[bytes] = []
        comm_rows: list[int] = []
        comm_chunks: list[bytes] = []
        stacks: dict[int, str] = {}
        names = [events[i].name for i in arg_rows["cpu"]]
        for i, args, name in zip(arg_rows["cpu"].tolist(), arg_rows["cpu_args"], names):
            raw = events[i].args
            if raw is NO_ARGS:
                continue
            blob = bytes(raw)
            if b'"Input' in blob:
                op_rows.append(int(inverse[i]))
                op_chunks.append(blob)
            if name == "record_param_comms" or (args is not None and args.collective_name):
                comm_rows.append(int(inverse[i]))
                comm_chunks.append(blob)
            if args is not None and args.call_stack:
                stacks[int(inverse[i])] = args.call_stack
        for i, args in zip(arg_rows["dev"].tolist(), arg_rows["dev_args"]):
            if args is not None and args.collective_name:
                comm_rows.append(int(inverse[i]))
                comm_chunks.append(bytes(events[i].args))
        return ArgsStore.build(op_rows, op_chunks), ArgsStore.build(comm_rows, comm_chunks), stacks


def _header_metadata(header: TraceFile) -> dict[str, Any]:
    """Top-level facts worth reporting. Never environment variables or free-form metadata blocks."""
    out: dict[str, Any] = {}
    for key in (
        "schemaVersion",
        "cuda_driver_version",
        "cuda_runtime_version",
        "record_shapes",
        "profile_memory",
        "with_stack",
        "with_flops",
        "trace_id",
        "displayTimeUnit",
    ):
        value = getattr(header, key)
        if value is not None:
            out[key] = value
    return out


def load_file(path: Path, rank: int = 0, rank_source: str = "file order") -> Trace:
    """Load one trace file. Raises :class:`TraceError` with a one-line message on bad input."""
    data, notes = read_bytes(path)
    raw = decode(path, data)
    del data
    raw.warnings[:0] = notes
    if not raw.events:
        raise TraceError(f"{path}: the trace holds no events; re-record it (is the profiler schedule active?)")
    trace = _Builder(raw).build(path, rank, rank_source)
    if len(trace) == 0:
        raise TraceError(f"{path}: the trace holds no timed events (only metadata); re-record it")
    return trace


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
