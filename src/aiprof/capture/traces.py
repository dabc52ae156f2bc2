"""Turn a process's profiler cycles into its final trace file, with telemetry as counter tracks.

torch.profiler writes one file per recorded cycle. We combine them into one file per rank (one
process, one Kineto clock: ``baseTimeNanoseconds`` is a per-process constant, so events concatenate),
and add the telemetry samples that fall inside the trace's time span as Chrome counter events
(``ph: "C"``) on the same clock, so Perfetto draws CPU, memory, I/O and GPU next to the ops.
The final file appears under its real name only once it is complete.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from aiprof.capture.rundir import atomic_write

_GIB = 2.0**-30  # memory in binary units (docs/numbers.md "Units"); rates in decimal MB/s, as disks and links are rated
# (counter track name, [(series label, column, scale)]); rates are computed from consecutive rows.
_COUNTERS: list[tuple[str, list[tuple[str, str, float]]]] = [
    ("CPU utilisation (%)", [("system", "cpu_pct", 1.0), ("profiled processes", "proc_cpu_pct", 1.0)]),
    ("Memory (GiB)", [("system used", "mem_used_bytes", _GIB), ("process RSS", "proc_rss_bytes", _GIB),
                      ("process tree RSS", "tree_rss_bytes", _GIB)]),
]
_RATES: list[tuple[str, list[tuple[str, str]]]] = [
    ("Disk I/O (MB/s)", [("read", "disk_read_bytes"), ("write", "disk_write_bytes")]),
    ("Network (MB/s)", [("received", "net_recv_bytes"), ("sent", "net_sent_bytes")]),
]
_GPU_FIELDS: list[tuple[str, str, float]] = [
    ("utilisation (%)", "util_pct", 1.0),
    ("memory used (GiB)", "mem_used_bytes", _GIB),
    ("SM clock (MHz)", "sm_clock_mhz", 1.0),
    ("power (W)", "power_w", 1.0),
    ("throttle reasons (bitmask)", "throttle_reasons", 1.0),
]


def read_trace(path: Path) -> dict[str, Any]:
    """A Kineto JSON trace (gzipped or not) as a dict; a bare event list is wrapped."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = _loads(raw)
    if isinstance(doc, list):
        return {"traceEvents": doc}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a trace")
    return doc


def _loads(raw: bytes) -> Any:
    try:
        import msgspec

        return msgspec.json.decode(raw)
    except ImportError:
        return json.loads(raw)
    except msgspec.DecodeError:
        return json.loads(raw)  # Kineto may write NaN, which only the stdlib parser accepts


def combine(parts: Sequence[Path]) -> dict[str, Any]:
    """One trace from a process's cycle files, in order: the header of the first, all events."""
    doc = read_trace(parts[0])
    events: list[Any] = list(doc.get("traceEvents") or [])
    for part in parts[1:]:
        other = read_trace(part)
        events.extend(other.get("traceEvents") or [])
    doc["traceEvents"] = events
    return doc


def event_span_us(events: Iterable[Any]) -> tuple[float, float] | None:
    """First start and last end (trace µs) of the timed events, ignoring bookkeeping processes."""
    lo = float("inf")
    hi = float("-inf")
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") not in ("X", "i", "I"):
            continue
        ts = ev.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        dur = ev.get("dur", 0)
        lo = min(lo, ts)
        hi = max(hi, ts + (dur if isinstance(dur, (int, float)) else 0))
    return (lo, hi) if lo <= hi else None


def counter_events(
    rows: Sequence[dict[str, float]], base_ns: int, pid: int | str
) -> list[dict[str, Any]]:
    """Chrome counter events for telemetry rows; ``ts`` is µs relative to ``base_ns`` (0 = absolute)."""
    events: list[dict[str, Any]] = []
    previous: dict[str, float] | None = None
    gpus = sorted({k.split("_", 1)[0] for row in rows for k in row if k.startswith("gpu") and "_" in k})
    for row in rows:
        ts = (int(row["t_unix_ns"]) - base_ns) / 1000.0
        for name, series in _COUNTERS:
            _add(events, name, ts, pid, {label: row[col] * scale for label, col, scale in series if col in row})
        cores = {k[:-4].replace("cpu", "core "): row[k] for k in row if k.startswith("cpu") and k[3:-4].isdigit()}
        _add(events, "CPU per core (%)", ts, pid, cores)
        if previous is not None:
            dt = (row["t_unix_ns"] - previous["t_unix_ns"]) / 1e9
            for name, pairs in _RATES:
                _add(events, name, ts, pid, _rates(row, previous, pairs, dt))
        for gpu in gpus:
            for label, field, scale in _GPU_FIELDS:
                col = f"{gpu}_{field}"
                if col in row:
                    _add(events, f"{gpu.upper()} {label}", ts, pid, {"value": row[col] * scale})
        previous = row
    return events


def _rates(row: dict[str, float], previous: dict[str, float], pairs: list[tuple[str, str]], dt: float) -> dict[str, float]:
    if dt <= 0:
        return {}
    return {
        label: max(0.0, (row[col] - previous[col]) / dt / 1e6)
        for label, col in pairs
        if col in row and col in previous
    }


def _add(events: list[dict[str, Any]], name: str, ts: float, pid: int | str, args: dict[str, float]) -> None:
    if args:
        events.append({"ph": "C", "cat": "aiprof_telemetry", "name": name, "pid": pid, "tid": 0, "ts": ts, "args": args})


def main_pid(events: Iterable[Any]) -> int | str:
    """The OS pid of the profiled process: the pid of the first ``cpu_op`` (else the first int pid)."""
    fallback: int | str = 0
    for ev in events:
        if isinstance(ev, dict) and ev.get("cat") in ("cpu_op", "user_annotation"):
            return ev.get("pid", 0)  # type: ignore[no-any-return]
    return fallback


def add_telemetry(doc: dict[str, Any], rows_for: Any, margin_us: float) -> int:
    """Append counter events for the rows inside the trace's span (± ``margin_us``); return how many rows.

    ``rows_for(start_ns, end_ns)`` yields telemetry rows in that unix-ns window.
    """
    events = doc.get("traceEvents") or []
    span = event_span_us(events)
    if span is None:
        return 0
    base = int(doc.get("baseTimeNanoseconds") or 0)
    start_ns = base + int((span[0] - margin_us) * 1000)
    end_ns = base + int((span[1] + margin_us) * 1000)
    rows = list(rows_for(start_ns, end_ns))
    if not rows:
        return 0
    events.extend(counter_events(rows, base, main_pid(events)))
    doc["traceEvents"] = events
    return len(rows)


def write_trace(doc: dict[str, Any], path: Path) -> None:
    """Gzip-compressed JSON, written atomically (``path`` appears only when complete)."""
    try:
        import msgspec

        body = msgspec.json.encode(doc)
    except (ImportError, TypeError, ValueError):
        body = json.dumps(doc).encode()
    atomic_write(path, gzip.compress(body, compresslevel=5))
