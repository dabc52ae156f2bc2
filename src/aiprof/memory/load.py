"""Find and read the memory input at a path: a snapshot pickle, a Kineto trace with ``[memory]`` events, an
``export_memory_timeline`` raw file, or a run directory holding any of these (capture writes
``memory/``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from aiprof.memory.model import MemoryData, MemoryInputError
from aiprof.trace.limits import LoadLimits

PICKLE_SUFFIXES = (".pickle", ".pkl", ".pickle.gz")
STATS_FILE = "memory_stats.jsonl"


def _read(path: Path, limits: LoadLimits | None = None) -> tuple[bytes, list[str]]:
    """The file's bytes, gunzipped: a pickle as it is (bounded like a trace's text), JSON through the
    trace reader's sniffing and size-bounded source."""
    from aiprof.trace.kineto.loader import read_bytes

    try:
        pickled = _read_pickle(path, limits)
        if pickled is not None:
            return pickled, []
        return read_bytes(path, limits)
    except MemoryInputError:
        raise
    except Exception as err:  # TraceError from the shared reader: re-raise as ours, one line
        raise MemoryInputError(str(err)) from None


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(1)
    except OSError:
        return b""


def _read_pickle(path: Path, limits: LoadLimits | None = None) -> bytes | None:
    """A pickle's bytes (protocol 2+ starts with PROTO 0x80; gzip-compressed ones too), or None when the
    file is not one. Decompression stops past the trace size limit (``trace.kineto.source``), like a trace's."""
    import zlib

    with open(path, "rb") as fh:
        head = fh.read(2)
        if head != b"\x1f\x8b":
            return head + fh.read() if head[:1] == b"\x80" else None
        allowed = (limits or LoadLimits()).max_bytes
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        first = inflate.decompress(head + fh.read(1 << 16), 1 << 16)
        if first[:1] != b"\x80":
            return None
        parts, total, pending = [first], len(first), inflate.unconsumed_tail
        while not inflate.eof:
            if not pending:
                pending = fh.read(1 << 20)
                if not pending:
                    raise MemoryInputError(f"{path}: the gzip file is truncated; re-copy or re-dump the snapshot")
            out = inflate.decompress(pending, 1 << 24)
            pending = inflate.unconsumed_tail
            total += len(out)
            if total > allowed:
                raise MemoryInputError(
                    f"{path}: the snapshot inflates past {allowed // (1 << 20):,} MiB; raise the limit with --max-trace-mb"
                )
            parts.append(out)
        return b"".join(parts)


def load_memory(path: Path, limits: LoadLimits | None = None) -> MemoryData:
    """Read the memory input at ``path`` (a file, or a run directory: its snapshot, else its traces), within
    the trace load ``limits`` (None: the defaults)."""
    if path.is_dir():
        return _load_dir(path, limits)
    if not path.exists():
        raise MemoryInputError(f"{path}: no such file or folder; check the path")
    if _head(path) == b"\x80":  # an uncompressed pickle
        from aiprof.memory.snapshot import read_snapshot

        return read_snapshot(path)  # read (or streamed) there: a large snapshot is never held twice
    data, notes = _read(path, limits)
    stripped = data.lstrip()[:1]
    if data[:1] == b"\x80" or path.name.endswith(PICKLE_SUFFIXES):
        from aiprof.memory.snapshot import read_snapshot

        result = read_snapshot(path, data)
    elif stripped == b"[" and data.lstrip()[1:64].lstrip()[:1] == b"[":
        from aiprof.memory.timeline import read_timeline

        result = read_timeline(path, data)
    elif stripped in (b"{", b"["):
        from aiprof.memory.kineto import read_kineto

        result = read_kineto(path, data)
    else:
        raise MemoryInputError(
            f"{path}: neither an allocator snapshot (pickle) nor a JSON trace or memory timeline"
        )
    result.warnings[:0] = notes
    return result


def _load_dir(folder: Path, limits: LoadLimits | None = None) -> MemoryData:
    mem = folder / "memory"
    candidates = sorted(mem.glob("*.pickle")) if mem.is_dir() else []
    candidates += sorted(folder.glob("*.pickle"))
    candidates = candidates or iteration_snapshots(folder)
    if not candidates:
        traces = sorted(p for p in folder.rglob("*.json*") if "trace" in p.name and p.is_file())
        candidates = traces
    if not candidates:
        from aiprof.rundir import no_trace_message

        run = no_trace_message(folder)  # an aiprof run that wrote nothing: say why, not only what is absent
        raise MemoryInputError(
            run if run else
            f"{folder}: no memory snapshot (*.pickle) or trace (*trace*.json[.gz]) in this folder; record with "
            "aiprof run --memory"
        )
    data = load_memory(candidates[0], limits)
    if len(candidates) > 1:
        data.warnings.append(f"{folder}: {len(candidates)} memory inputs; read {candidates[0].name}")
    stats = mem / STATS_FILE
    if stats.is_file():
        data.stats = _stats(stats)
    return data


_ITERATION = re.compile(r"^iteration_(\d+)(_exit)?$")
_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def iteration_snapshots(folder: Path) -> list[Path]:
    """Snapshots as torchtitan and torchtune write them: ``<folder>/[…/]iteration_<N>[_exit]/[…/]rank<R>_
    memory_snapshot.pickle``, one folder per dump. The one to read first: an OOM dump (``_exit``), else the
    latest iteration; rank 0 first."""

    def key(path: Path) -> tuple[bool, int, int]:
        parts = path.relative_to(folder).parts
        found = next((m for part in parts if (m := _ITERATION.match(part))), None)
        rank = _RANK.search(path.name)
        return (found is None or not found.group(2), -int(found.group(1)) if found else 0, int(rank.group(1)) if rank else 0)

    found = [p for p in folder.rglob("*.pickle") if p.is_file() and any(_ITERATION.match(q) for q in p.relative_to(folder).parts)]
    return sorted(found, key=key)


def _stats(path: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
