"""What an aiprof run directory holds beside its traces: telemetry counters and run metadata.

Read here, in the report layer, because they describe the run rather than any trace: the analysis
never sees them. The run directory is found and read through :mod:`aiprof.rundir` (its one owner: the
same answer the rules get), so only aiprof's own ``meta.json`` is embedded, size-capped and decoded into
:class:`aiprof.rundir.RunMeta`: the report shows its fields (the allow-list), with the command line
redacted, never whatever else a file beside a trace holds. A foreign or oversized ``meta.json`` is ignored
with a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import UnsetType

from aiprof import rundir
from aiprof.runmeta import RunMeta, RunTelemetry

MAX_POINTS = 600

# Counters worth plotting, by column name; per-core CPU columns are left out (too many lines).
_KEEP = re.compile(
    r"^(cpu_pct|proc_cpu_pct|mem_used_bytes|tree_rss_bytes|proc_rss_bytes|gpu\d+_(util_pct|mem_util_pct|mem_used_bytes|power_w|sm_clock_mhz))$"
)
# Cumulative byte counters since the sampler started: plotted as rates.
_RATES = ("disk_read_bytes", "disk_write_bytes", "net_recv_bytes", "net_sent_bytes")


def run_dir_of(sources: list[str], notes: list[str] | None = None) -> rundir.RunDir | None:
    """The run directory when every trace of a report read back from a file belongs to the same one
    (:func:`aiprof.rundir.find_run_dir`); an analysis finds it once, at its root (``RunAnalysis.run_dir``)."""
    return rundir.find_run_dir([Path(s) for s in sources], notes)


def read_telemetry(path: Path, max_points: int = MAX_POINTS) -> RunTelemetry | None:
    """Counters as columns over time, at most ``max_points`` samples (means over equal chunks)."""
    columns = rundir.read_telemetry(path)
    times = columns.pop("t_unix_ns", [])
    if not times:
        return None
    t = np.array(times, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    t = t[order]
    series: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = {}
    for name, values in columns.items():
        if _KEEP.match(name):
            series[name] = np.array(values, dtype=np.float64)[order]
        elif name in _RATES:
            series[f"{name}_per_s"] = _rate(t, np.array(values, dtype=np.float64)[order])
    keep = [k for k, v in series.items() if np.isfinite(v).any()]
    t_out, chunks = _downsample_times(t, max_points)
    return RunTelemetry(
        path=str(path),
        samples=int(t.size),
        t_unix_ns=t_out.tolist(),
        series={k: _round_list(_chunk_mean(series[k], chunks)) for k in keep},
    )


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


SHARED_PCT = 20.0  # other processes' mean CPU, in % of the machine, above which a run counts as shared


def shared_cores(telemetry: RunTelemetry | None, run_metadata: RunMeta | None) -> float | None:
    """Cores other processes used on average over the run (``aiprof run`` telemetry: the machine's CPU minus
    the profiled tree's), when that is at least ``SHARED_PCT`` % of the machine; else None."""
    if telemetry is None or run_metadata is None:
        return None
    host = run_metadata.host
    cores = None if isinstance(host, UnsetType) else host.cores_logical
    machine, tree = telemetry.series.get("cpu_pct"), telemetry.series.get("proc_cpu_pct")
    if not isinstance(cores, int) or cores <= 0 or machine is None or tree is None:
        return None
    others = [max(m - t / cores, 0.0) for m, t in zip(machine, tree) if m is not None and t is not None]
    if not others:
        return None
    pct = sum(others) / len(others)
    return pct / 100.0 * cores if pct >= SHARED_PCT else None


@dataclass(frozen=True)
class RunContext:
    """What the document embeds of the run directory its traces are in: ``meta.json`` and the telemetry
    counters (None: traces outside a run directory, or a run without telemetry)."""

    run_metadata: RunMeta | None = None
    telemetry: RunTelemetry | None = None


def run_context(found: rundir.RunDir | None) -> RunContext:
    """The run context of the document of a run in the run directory ``found`` (found at the analysis'
    root); empty for traces outside one."""
    if found is None:
        return RunContext()
    telemetry = read_telemetry(found.telemetry_path) if found.telemetry_path is not None else None
    return RunContext(run_metadata=found.meta, telemetry=telemetry)
