"""The merged trace for Perfetto / chrome://tracing: every rank's Kineto events, telemetry counters and
aiprof's step windows and findings as annotation tracks, in one Chrome-trace JSON file.

Ranks keep their own events; their process ids are renumbered (two ranks both have a "GPU 0" pid) and
their process names get a ``rank N`` prefix. Traces whose timestamps are relative to a
``baseTimeNanoseconds`` are shifted onto the earliest base, which the file keeps as its own.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from aiprof.errors import AiprofError
from aiprof.trace.model import Kind, Trace
from aiprof.trace.readers.base import ReaderOptions

from aiprof.report.common import fmt_ms, saving_text
from aiprof.report.model import RankReport, Report

ANNOTATION_PID = 999_999_001
TELEMETRY_PID = 999_999_002


def read_raw_trace(path: Path, index: int = 0, options: ReaderOptions | None = None) -> dict[str, Any]:
    """The Kineto JSON as written (``.json``, ``.json.gz``, or a bare event list). A file the loader had
    to salvage (cut off mid-write, a truncated gzip stream, NaN literals) is read the same way the
    analysis read it: its complete events and the header fields written before them. A file of another
    format (an Nsight Systems report) is read through the reader interface and its ``index``-th rank
    written as Chrome-trace events (:func:`trace_events`). ``options``: what the reader is told (the analysis'
    step range and load limits; None: the defaults)."""
    from aiprof.trace.kineto.loader import read_bytes
    from aiprof.trace.readers import ReaderOptions, load_ranks, reader_for

    options = options or ReaderOptions()
    if reader_for(path).name != "kineto":
        traces = load_ranks(path, options)
        return trace_events(traces[min(index, len(traces) - 1)])

    data, _ = read_bytes(path, options.limits)  # sniffed and size-bounded like every trace read (trace.kineto.source)
    try:
        raw = msgspec.json.decode(data)
    except (ValueError, msgspec.DecodeError):
        return _salvaged_raw_trace(path, options)
    except RecursionError:
        raise AiprofError(f"{path}: JSON nested deeper than the decoder allows; not a trace") from None
    if isinstance(raw, list):
        return {"traceEvents": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not a trace")
    return raw


# The Chrome-trace category of each kind when the reader kept none (Kineto's names).
_KIND_CATEGORY = {
    Kind.CPU_OP: "cpu_op", Kind.USER_ANNOTATION: "user_annotation", Kind.PYTHON: "python_function",
    Kind.RUNTIME: "cuda_runtime", Kind.DRIVER: "cuda_driver", Kind.KERNEL: "kernel", Kind.MEMCPY: "gpu_memcpy",
    Kind.MEMSET: "gpu_memset", Kind.GPU_ANNOTATION: "gpu_user_annotation", Kind.SYNC: "cuda_sync",
    Kind.GPU_OTHER: "gpu_other", Kind.OTHER: "cpu_instant_event",
}
_SKIPPED_KINDS = (Kind.MEMORY, Kind.SPAN)


def trace_events(trace: Trace) -> dict[str, Any]:
    """A loaded trace of any format as a Chrome-trace document: one complete (``X``) or instant (``i``)
    event per row (timestamps in µs with ns decimals, the reader's category or Kineto's name for the
    kind), correlation / External id / grid / block / bytes as args where known, and a ``process_name``
    for each device (``GPU N``). Memory events and profiler bookkeeping are left out."""
    c = trace.columns
    keep = ~np.isin(c.kind, [int(k) for k in _SKIPPED_KINDS])
    rows = np.flatnonzero(keep)
    strings = trace.strings
    events: list[dict[str, Any]] = []
    columns = zip(rows.tolist(), c.kind[rows].tolist(), c.cat[rows].tolist(), c.name[rows].tolist(),
                  c.ts[rows].tolist(), c.dur[rows].tolist(), c.pid[rows].tolist(), c.tid[rows].tolist(),
                  c.correlation[rows].tolist(), c.external_id[rows].tolist(), c.grid[rows].tolist(),
                  c.block[rows].tolist(), c.nbytes[rows].tolist())
    for _, kind, cat, name, ts, dur, pid, tid, corr, ext, grid, block, nbytes in columns:
        category = strings[cat] if 0 <= cat < len(strings) and strings[cat] else _KIND_CATEGORY.get(Kind(kind), "other")
        event: dict[str, Any] = {"ph": "X" if dur > 0 or kind != int(Kind.INSTANT) else "i", "cat": category,
                                 "name": strings[name] if 0 <= name < len(strings) else "", "pid": pid, "tid": tid,
                                 "ts": ts / 1000.0}
        if event["ph"] == "X":
            event["dur"] = dur / 1000.0
        args = {k: v for k, v in (("correlation", corr), ("External id", ext), ("grid", grid), ("block", block),
                                  ("bytes", nbytes)) if v is not None and v >= 0}
        if args:
            event["args"] = args
        events.append(event)
    for device in sorted(trace.device_ids):
        events.append({"ph": "M", "name": "process_name", "pid": int(device), "tid": 0,
                       "args": {"name": f"GPU {int(device)}"}})
    return {"traceEvents": events}


def _salvaged_raw_trace(path: Path, options: ReaderOptions) -> dict[str, Any]:
    """The loader's slow path (``trace.kineto.loader.decode``): every complete event before a cut, as dicts."""
    from aiprof.errors import TraceError
    from aiprof.trace.kineto.loader import decode, read_bytes

    try:
        data, _ = read_bytes(path, options.limits)
        salvaged = decode(path, data)
    except TraceError as err:
        raise ValueError(str(err)) from None
    events: list[Any] = []
    for item in salvaged.events:
        try:
            events.append(msgspec.json.decode(item))
        except msgspec.DecodeError:
            continue
    header = {k: v for k, v in msgspec.structs.asdict(salvaged.header).items() if v is not None}
    return {**header, "traceEvents": events}


def merged_trace(doc: Report, raws: list[dict[str, Any]]) -> dict[str, Any]:
    """``raws[i]`` is the raw trace of ``doc.ranks[i]``."""
    bases = [int(r.get("baseTimeNanoseconds") or 0) for r in raws]
    base = min(bases) if bases else 0
    events: list[Any] = []
    next_pid = 1
    for rank, raw, rank_base in zip(doc.ranks, raws, bases):
        shift_us = (rank_base - base) / 1000.0
        pids: dict[Any, int] = {}
        for e in raw.get("traceEvents") or []:
            if not isinstance(e, dict):
                continue
            pid = e.get("pid")
            if not isinstance(pid, (int, float, str)) or isinstance(pid, bool):
                pid = repr(pid)  # a list or object where a pid belongs: one process per distinct value
            if pid not in pids:
                pids[pid] = next_pid
                next_pid += 1
            e = dict(e)
            e["pid"] = pids[pid]
            if shift_us and isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + shift_us
            if e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict):
                e["args"] = {**e["args"], "name": f"rank {rank.rank} · {e['args'].get('name', pid)}"}
            events.append(e)
        events += _steps(rank, (rank_base - base) / 1000.0, len(doc.ranks) > 1)
    events += _findings(doc, base, bases)
    events += _telemetry(doc, base)
    out = {k: v for k, v in (raws[0] if raws else {}).items() if k not in ("traceEvents",)}
    out["baseTimeNanoseconds"] = base
    out["traceEvents"] = events
    out["aiprof"] = {
        "generator": doc.generator,
        "sources": list(doc.sources),
        "findings": len(doc.findings),
        "partial": doc.summary.partial,
        "partial_note": doc.summary.partial_note,
        "warnings": list(doc.warnings),
    }
    return out


def _steps(rank: RankReport, shift_us: float, multi: bool) -> list[dict[str, Any]]:
    """One span per step on the annotation process, with its breakdown as args."""
    tid = rank.rank + 1
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": ANNOTATION_PID, "tid": tid,
         "args": {"name": f"aiprof steps (rank {rank.rank}, {rank.primary_device})" if multi else f"aiprof steps ({rank.primary_device})"}},
    ]
    for s in rank.steps:
        args = {f"{k} (ms)": round(v / 1e6, 3) for k, v in s.breakdown_ns.items()}
        args.update({f"idle: {k} (ms)": round(v / 1e6, 3) for k, v in s.idle_causes_ns.items() if v})
        out.append(
            {"ph": "X", "cat": "aiprof", "name": f"{s.name} · {fmt_ms(s.duration_ns)}", "pid": ANNOTATION_PID, "tid": tid,
             "ts": s.start_ns / 1000.0 + shift_us, "dur": s.duration_ns / 1000.0, "args": args}
        )
    for i in rank.incomplete_steps:  # a partial trace: no device side, left out of the numbers
        out.append(
            {"ph": "X", "cat": "aiprof.incomplete", "name": f"{i.name} · incomplete (no device record)",
             "pid": ANNOTATION_PID, "tid": tid, "ts": i.start_ns / 1000.0 + shift_us, "dur": i.duration_ns / 1000.0,
             "args": {"why": i.detail or i.reason, "left out of the numbers": True}}
        )
    return out


def _findings(doc: Report, base: int, bases: list[int]) -> list[dict[str, Any]]:
    """Each finding as a span over the steps it describes (the slowest rank's), on its own track."""
    from aiprof.report.common import findings, focus_rank

    items = findings(doc)
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": ANNOTATION_PID, "args": {"name": "aiprof: steps and findings"}},
        {"ph": "M", "name": "process_sort_index", "pid": ANNOTATION_PID, "args": {"sort_index": -1}},
    ]
    if not items or not doc.ranks:
        return out
    focus = focus_rank(doc)
    steps = focus.steps
    if not steps:
        return out
    index = next((i for i, r in enumerate(doc.ranks) if r is focus), 0)
    shift_us = ((bases[index] if index < len(bases) else base) - base) / 1000.0
    start = min(s.start_ns for s in steps) / 1000.0 + shift_us
    end = max(s.start_ns + s.duration_ns for s in steps) / 1000.0 + shift_us
    for i, f in enumerate(items):
        tid = 10_000 + i
        title = f"[{f.severity.upper()}] {f.title or f.id}"
        out.append({"ph": "M", "name": "thread_name", "pid": ANNOTATION_PID, "tid": tid, "args": {"name": f"finding: {f.id}"}})
        out.append(
            {"ph": "X", "cat": "aiprof.finding", "name": title, "pid": ANNOTATION_PID, "tid": tid, "ts": start, "dur": end - start,
             "args": {"saving": saving_text(f), "fix": f.fix, "evidence": f.evidence, "ranks": list(f.ranks)}}
        )
    return out


def _telemetry(doc: Report, base: int) -> list[dict[str, Any]]:
    """Counter tracks ("ph": "C") from the run directory's telemetry."""
    tel = doc.telemetry
    if tel is None:
        return []
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": TELEMETRY_PID, "args": {"name": "aiprof telemetry"}},
    ]
    times = tel.t_unix_ns
    for name, values in tel.series.items():
        for t, v in zip(times, values):
            if v is not None:
                out.append({"ph": "C", "name": name, "pid": TELEMETRY_PID, "tid": 0, "ts": (int(t) - base) / 1000.0, "args": {name: v}})
    return out


def encode(trace: dict[str, Any], gz: bool) -> bytes:
    data = msgspec.json.encode(trace)
    return gzip.compress(data, compresslevel=6) if gz else data
