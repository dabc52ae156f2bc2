"""Read one Kineto / Chrome-trace JSON file into a :class:`~aiprof.trace.model.Trace`.

Well-formed Kineto files are streamed (:mod:`.stream`: decompressed and decoded a run of events at a
time, on several cores); everything else comes here whole. Fast path, bounded memory: gunzip; one
msgspec pass that splits ``traceEvents`` into undecoded ``msgspec.Raw`` views; then the column builder
(:class:`~aiprof.trace.kineto.builder.Builder`) turns them into columns a chunk at a time.

Slow paths, taken only when the fast one fails: a file cut off mid-write is salvaged up to its last
complete event; JSON with NaN/Infinity is decoded generically and re-encoded; events of the wrong shape
are decoded one by one and the bad ones skipped. Each of these leaves a warning on the trace.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from aiprof.errors import TraceError
from aiprof.heap import release_free_memory
from aiprof.trace.model import Trace
from aiprof.trace.kineto import stream
from aiprof.trace.kineto.builder import HEADER_DECODER, Builder, RawTrace, encode_json, short_error, typed_header
from aiprof.trace.kineto.schema import Header, TraceFile
from aiprof.trace.kineto.source import GZIP_TRUNCATED, LoadLimits, not_a_trace, read_all, too_many_events

_NON_SPACE = re.compile(rb"[^ \t\r\n]")

# The words of the salvage warnings: a trace that carries one is partial (``is_cut_off``).
CUT_OFF = "cut off mid-write"


def is_cut_off(warnings: Sequence[str]) -> bool:
    """Whether a trace's load warnings say its file was cut off and salvaged (only a prefix was read)."""
    return any(CUT_OFF in w or GZIP_TRUNCATED in w for w in warnings)


# ---------------------------------------------------------------------------------------------------
# Reading bytes
# ---------------------------------------------------------------------------------------------------
def read_bytes(path: Path, limits: LoadLimits | None = None) -> tuple[bytes, list[str]]:
    """The file's JSON bytes, gunzipped when compressed, sniffed and size-bounded (:mod:`.source`).
    A truncated gzip yields what it holds."""
    try:
        return read_all(path, limits)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file; check the path") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder; pass the folder itself to load every trace in it") from None
    except PermissionError:
        raise TraceError(f"{path}: permission denied; make the file readable (chmod +r) and retry") from None
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror}); check the file and retry") from None


# ---------------------------------------------------------------------------------------------------
# First pass: split traceEvents into raw views
# ---------------------------------------------------------------------------------------------------
_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])


def _first_byte(data: bytes) -> int:
    """Offset of the first non-whitespace byte (no copy of the 100 MB buffer, unlike ``lstrip``)."""
    match = _NON_SPACE.search(data)
    return match.start() if match else len(data)


def decode(path: Path, data: bytes) -> RawTrace:
    """Split the JSON into undecoded events plus the header, salvaging what can be salvaged."""
    start = _first_byte(data)
    if start >= len(data):
        raise TraceError(f"{path}: the file is empty; re-record the trace")
    first = data[start : start + 1]
    if first not in (b"{", b"["):
        _reject_non_container(path, data, start)
    try:
        return _split(path, data, start)
    except msgspec.DecodeError:
        pass
    try:
        return _decode_generic(path, data)
    except TraceError as err:
        salvaged = _salvage_truncated(path, data, start)
        if salvaged is None:
            raise err from None
        return salvaged


def _reject_non_container(path: Path, data: bytes, start: int) -> None:
    """Text that does not open an object or a list. The message says what the file is not, never what
    it holds (its first bytes could be anything: binary, a secret, terminal escapes)."""
    raise not_a_trace(path, data[start:start + 4])


def _split(path: Path, data: bytes, start: int) -> RawTrace:
    if data[start : start + 1] == b"[":
        return RawTrace(_LIST_DECODER.decode(data), TraceFile(), [])
    try:
        header = HEADER_DECODER.decode(data)
    except msgspec.ValidationError:
        raise TraceError(f"{path}: 'traceEvents' is not a list; this is not a Kineto/Chrome trace") from None
    if header.traceEvents is None:
        raise TraceError(_no_events_message(path, data))
    events, header.traceEvents = header.traceEvents, None
    typed, notes = typed_header(header, path)
    return RawTrace(events, typed, notes)


def _no_events_message(path: Path, data: bytes) -> str:
    """Say what the JSON is when it is a well-known neighbour of a Kineto trace."""
    head = bytes(data[:4096])
    if b'"nodes"' in head and (b'"schema"' in head or b'"finish_ts"' in head):
        return (
            f"{path}: this is a PyTorch execution trace (Chakra ET), not a Kineto trace; pass the "
            "torch.profiler trace recorded with it (the *.pt.trace.json file)"
        )
    return f"{path}: JSON without a 'traceEvents' list; this is not a Kineto/Chrome trace"


def _decode_generic(path: Path, data: bytes) -> RawTrace:
    """Generic decode (accepts NaN/Infinity), then re-encode each event so the fast pass can read it."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as err:
        raise TraceError(f"{path}: not valid JSON ({short_error(err)}); re-copy or re-record the trace") from None
    notes: list[str] = []
    header = TraceFile()
    if isinstance(doc, list):
        items: list[Any] = doc
    elif isinstance(doc, dict):
        found = doc.get("traceEvents")
        if not isinstance(found, list):
            raise TraceError(_no_events_message(path, data))
        items = found
        header_raw = Header()
        for key, value in doc.items():
            if key != "traceEvents" and key in Header.__struct_fields__:
                setattr(header_raw, key, msgspec.Raw(encode_json(value)))
        header, notes = typed_header(header_raw, path)
    else:
        raise TraceError(f"{path}: JSON {type(doc).__name__}, not a trace (expected an object or a list)")
    return RawTrace([msgspec.Raw(encode_json(item)) for item in items], header, notes)


def _salvage_truncated(path: Path, data: bytes, start: int) -> RawTrace | None:
    """A file cut off mid-write: keep every complete event before the cut."""
    key = data.find(b'"traceEvents"')
    if key >= 0:
        begin = data.find(b"[", key)
    elif data[start : start + 1] == b"[":
        begin = start
    else:
        return None
    if begin < 0:
        return None
    end = len(data)
    for _ in range(200):
        end = data.rfind(b"}", begin, end)
        if end < 0:
            return None
        try:
            events = _LIST_DECODER.decode(data[begin : end + 1] + b"]")
        except msgspec.DecodeError:
            continue
        if not events:
            return None
        header = _salvage_header(path, data[:begin]) if key >= 0 else TraceFile()
        pct = 100.0 * (end + 1) / len(data)
        note = (
            f"{path.name}: the trace is {CUT_OFF}; salvaged {len(events):,} complete events "
            f"({pct:.1f}% of {len(data):,} bytes); results cover only what was recorded before the cut"
        )
        return RawTrace(events, header, [note])
    return None


def _salvage_header(path: Path, prefix: bytes) -> TraceFile:
    """Top-level fields written before ``traceEvents`` (Kineto writes its header first)."""
    text = prefix.rstrip()
    key = text.rfind(b'"traceEvents"')
    if key < 0:
        return TraceFile()
    head = text[:key].rstrip().rstrip(b",") + b"}"
    try:
        return typed_header(HEADER_DECODER.decode(head), path)[0]
    except msgspec.MsgspecError:
        return TraceFile()


def load_file(path: Path, rank: int = 0, rank_source: str = "file order", limits: LoadLimits | None = None) -> Trace:
    """Load one trace file. Raises :class:`TraceError` with a one-line message on bad input.

    The streaming reader handles well-formed Kineto files in bounded memory; anything it does not
    recognise (a bare list, a truncated or corrupt file, NaN literals…) goes through the whole-file path
    below, which salvages and explains. Both read through :mod:`aiprof.trace.kineto.source` (sniffed,
    size-bounded) under ``limits`` (:class:`~aiprof.trace.limits.LoadLimits`; None: the defaults)."""
    try:
        return _load_file(path, rank, rank_source, limits or LoadLimits())
    except RecursionError:
        raise TraceError(
            f"{path}: JSON nested deeper than the decoder allows; this is not a trace aiprof can read"
        ) from None
    except MemoryError:
        raise TraceError(
            f"{path}: too large for available memory; load fewer events (--max-events) or use a larger machine"
        ) from None


def _load_file(path: Path, rank: int, rank_source: str, limits: LoadLimits) -> Trace:
    streamed = stream.stream_load(path, rank, rank_source, limits=limits)  # looked up at call time (tests swap it)
    if streamed is not None:
        release_free_memory()
        return streamed
    data, notes = read_bytes(path, limits)
    raw = decode(path, data)
    del data
    raw.warnings[:0] = notes
    if not raw.events:
        raise TraceError(f"{path}: the trace holds no events; re-record it (is the profiler schedule active?)")
    limit = limits.max_events
    if limit and len(raw.events) > limit:
        raise too_many_events(path, limit)
    builder = Builder(raw, path)
    events, raw.events = raw.events, []
    trace = builder.run(events, rank, rank_source)
    release_free_memory()
    return trace


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


__all__ = ["RawTrace", "decode", "file_size", "is_cut_off", "load_file", "read_bytes"]
