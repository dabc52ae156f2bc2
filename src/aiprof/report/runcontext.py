"""What an ``aiprof run`` directory holds beside its traces: telemetry counters and run metadata.

Read here, in the report layer, because they describe the run rather than any trace: the analysis
never sees them. The format is the capture's (``telemetry.csv``: a ``t_unix_ns`` column, then one
column per counter, empty cells where a probe had no value; ``meta.json``), read without importing
the capture package so the report never depends on torch-side code.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

TELEMETRY = "telemetry.csv"
META = "meta.json"
MAX_POINTS = 600

# Counters worth plotting, by column name; per-core CPU columns are left out (too many lines).
_KEEP = re.compile(
    r"^(cpu_pct|proc_cpu_pct|mem_used_bytes|tree_rss_bytes|proc_rss_bytes|gpu\d+_(util_pct|mem_util_pct|mem_used_bytes|power_w|sm_clock_mhz))$"
)
# Cumulative byte counters since the sampler started: plotted as rates.
_RATES = ("disk_read_bytes", "disk_write_bytes", "net_recv_bytes", "net_sent_bytes")


def run_dir_of(sources: list[str]) -> Path | None:
    """The run directory when every analysed trace sits in one folder that has telemetry or metadata."""
    parents = {Path(s).resolve().parent for s in sources}
    if len(parents) != 1:
        return None
    folder = parents.pop()
    return folder if (folder / TELEMETRY).is_file() or (folder / META).is_file() else None


def read_meta(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_telemetry(path: Path, max_points: int = MAX_POINTS) -> dict[str, Any] | None:
    """Counters as columns over time, at most ``max_points`` samples (means over equal chunks)."""
    header, rows = _read_csv(path)
    if not header or not rows:
        return None
    table = np.array(rows, dtype=np.float64)
    t = table[:, 0].astype(np.int64)
    order = np.argsort(t, kind="stable")
    table, t = table[order], t[order]
    series: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = {}
    for i, name in enumerate(header[1:], start=1):
        if _KEEP.match(name):
            series[name] = table[:, i]
        elif name in _RATES:
            series[f"{name}_per_s"] = _rate(t, table[:, i])
    keep = [k for k, v in series.items() if np.isfinite(v).any()]
    t_out, chunks = _downsample_times(t, max_points)
    return {
        "path": str(path),
        "samples": int(t.size),
        "t_unix_ns": t_out.tolist(),
        "series": {k: _round_list(_chunk_mean(series[k], chunks)) for k in keep},
    }


def _read_csv(path: Path) -> tuple[list[str], list[list[float]]]:
    """Numbers only; a row cut short by a crash or with a bad cell is skipped, blanks become NaN."""
    rows: list[list[float]] = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            for raw in reader:
                if len(raw) != len(header) or not raw[0]:
                    continue
                try:
                    rows.append([float(v) if v != "" else float("nan") for v in raw])
                except ValueError:
                    continue
    except OSError:
        return [], []
    return header, rows


def _rate(t: np.ndarray[Any, np.dtype[np.int64]], cumulative: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Bytes per second between consecutive samples (the first sample has no rate)."""
    out = np.full(cumulative.shape, np.nan)
    if cumulative.size > 1:
        dt = np.diff(t).astype(np.float64) / 1e9
        with np.errstate(divide="ignore", invalid="ignore"):
            out[1:] = np.where(dt > 0, np.diff(cumulative) / dt, np.nan)
    return out


def _downsample_times(t: np.ndarray[Any, np.dtype[np.int64]], max_points: int) -> tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.int64]]]:
    """Chunk start indices and each chunk's mid time."""
    n = t.size
    count = min(n, max_points)
    starts = (np.arange(count, dtype=np.int64) * n) // count
    ends = np.append(starts[1:], n) - 1
    return (t[starts] + t[ends]) // 2, starts


def _chunk_mean(values: np.ndarray[Any, np.dtype[np.float64]], starts: np.ndarray[Any, np.dtype[np.int64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    finite = np.isfinite(values)
    sums = np.add.reduceat(np.where(finite, values, 0.0), starts)
    counts = np.add.reduceat(finite.astype(np.int64), starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _round_list(values: np.ndarray[Any, np.dtype[np.float64]]) -> list[float | None]:
    return [None if not np.isfinite(v) else round(float(v), 3) for v in values]


def run_context(sources: list[str]) -> dict[str, Any]:
    """``{"run_metadata": …, "telemetry": …}`` for the document, with only the keys that exist."""
    run_dir = run_dir_of(sources)
    if run_dir is None:
        return {}
    out: dict[str, Any] = {}
    meta = read_meta(run_dir)
    if meta is not None:
        out["run_metadata"] = meta
    if (run_dir / TELEMETRY).is_file():
        telemetry = read_telemetry(run_dir / TELEMETRY)
        if telemetry is not None:
            out["telemetry"] = telemetry
    return out
