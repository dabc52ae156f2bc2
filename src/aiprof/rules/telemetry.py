"""Rules on system telemetry: ``cpu_saturation`` and ``io_bound``.

Telemetry is not in the trace: ``aiprof run`` / ``aiprof.profile`` write ``telemetry.csv`` next to the
traces in the run directory (one row per ~100 ms: ``t_unix_ns``, ``cpu_pct``, ``cpuN_pct``,
``disk_read_bytes`` cumulative since the start, optional ``cpu_iowait_pct``, ``gpuN_util_pct``…).
:func:`load_run_inputs` reads it in the worker, and the rules line it up with the steps through the
trace's ``baseTimeNanoseconds``.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding

TELEMETRY_FILE = "telemetry.csv"


def load_run_inputs(trace_path: Path) -> dict[str, Any]:
    """What the run directory around a trace adds to the trace: the telemetry table (column → list)."""
    for folder in (trace_path.parent, trace_path.parent.parent):
        csv_path = folder / TELEMETRY_FILE
        if csv_path.is_file() and (folder / "meta.json").is_file():
            return {"telemetry": read_telemetry(csv_path), "telemetry_path": str(csv_path)}
    return {}


def read_telemetry(path: Path) -> dict[str, list[float]]:
    """The CSV as columns of floats (NaN where a probe had no value)."""
    columns: dict[str, list[float]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            return {}
        for name in header:
            columns[name] = []
        for row in reader:
            if len(row) != len(header):
                continue  # a row cut by a crash
            for name, value in zip(header, row):
                columns[name].append(_float(value))
    return columns


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _window_rows(ctx: RankContext) -> tuple[dict[str, list[float]], list[int]] | None:
    """The telemetry table and the indices of its samples inside the steady steps (all samples when the
    trace has no wall-clock base time to line them up with)."""
    table = ctx.extras.get("telemetry")
    if not isinstance(table, dict) or not table.get("t_unix_ns"):
        return None
    times = table["t_unix_ns"]
    base = ctx.trace.base_time_ns
    lo, hi = ctx.window
    if base > 0 and hi > lo:
        idx = [i for i, t in enumerate(times) if base + lo <= t <= base + hi]
    else:
        idx = list(range(len(times)))
    return (table, idx) if idx else None


def _values(table: dict[str, list[float]], column: str, idx: list[int]) -> list[float]:
    col = table.get(column)
    if not col:
        return []
    return [col[i] for i in idx if not math.isnan(col[i])]


def _starved_share(ctx: RankContext) -> float:
    """Share of the step the device idled for host-side reasons (data loading, host overhead)."""
    return ctx.share(ctx.per_step("idle_causes_ns", "data_loading") + ctx.per_step("idle_causes_ns", "host"))


def cpu_saturation(ctx: RankContext) -> list[Finding]:
    """The host CPUs are saturated while the device starves: more loader workers will not help."""
    found = _window_rows(ctx)
    if found is None:
        return []
    table, idx = found
    cpu = _values(table, "cpu_pct", idx)
    if not cpu:
        return []
    busy = sum(1 for v in cpu if v >= ctx.options.cpu_saturation_pct) / len(cpu)
    starved = _starved_share(ctx)
    if busy < ctx.options.cpu_saturation_time_share or starved < ctx.options.medium_share:
        return []
    cores = sum(1 for name in table if name.startswith("cpu") and name.endswith("_pct") and name[3:-4].isdigit())
    evidence: dict[str, Any] = {
        "samples": len(cpu),
        "saturated_sample_share": round(busy, 3),
        "mean_cpu_pct": round(sum(cpu) / len(cpu), 1),
        "cores": cores or None,
        "device_starved_share": round(starved, 3),
        "process_tree_cpu_pct": round(_mean(_values(table, "proc_cpu_pct", idx)), 1),
    }
    return [
        ctx.finding(
            "cpu_saturation",
            f"Host CPU saturated in {busy:.0%} of samples while the device starves",
            0,
            evidence=evidence,
            fix=(
                "The CPU is the bottleneck, not the number of workers: move decoding/augmentation to the GPU "
                "(torchvision.transforms.v2 on CUDA tensors, DALI), cache preprocessed samples, set "
                "torch.set_num_threads / OMP_NUM_THREADS=1 in loader workers to stop oversubscription, or "
                "run on a host with more cores per GPU."
            ),
            formula="no separate saving: it explains the data_loading / host_bound time (share of samples with "
            "CPU ≥ cpu_saturation_pct while the device idles for host reasons)",
            confidence="medium",
            severity=ctx.options.severity(starved) if starved >= ctx.options.medium_share else "low",
        )
    ]


def io_bound(ctx: RankContext) -> list[Finding]:
    """The loader waits on storage: iowait high (or heavy reads with idle CPUs) while the device starves."""
    found = _window_rows(ctx)
    if found is None:
        return []
    table, idx = found
    starved = ctx.share(ctx.per_step("idle_causes_ns", "data_loading"))
    if starved < ctx.options.data_loading_share:
        return []
    iowait = _values(table, "cpu_iowait_pct", idx)
    cpu = _values(table, "cpu_pct", idx)
    read_rate = _read_rate(table, idx)
    if iowait:
        hit = _mean(iowait) >= ctx.options.io_wait_pct
    else:
        hit = read_rate >= ctx.options.io_read_bytes_per_s and bool(cpu) and _mean(cpu) < 50.0
    if not hit:
        return []
    evidence = {
        "mean_iowait_pct": round(_mean(iowait), 1) if iowait else None,
        "disk_read_bytes_per_s": int(read_rate),
        "mean_cpu_pct": round(_mean(cpu), 1) if cpu else None,
        "data_loading_share": round(starved, 3),
    }
    return [
        ctx.finding(
            "io_bound",
            f"Data loading waits on storage ({read_rate / 1e6:.0f} MB/s read, CPUs mostly idle)",
            0,
            evidence=evidence,
            fix=(
                "Feed from faster or closer storage: copy the dataset to local NVMe / RAM disk, use a sharded "
                "sequential format (WebDataset, MosaicML streaming, TFRecord-like shards) instead of many small "
                "files, cache decoded samples, and raise num_workers / prefetch_factor to keep more reads in flight."
            ),
            formula="no separate saving: it explains the data_loading time (iowait ≥ io_wait_pct, or disk reads "
            "≥ io_read_bytes_per_s with CPU < 50 %, while the device waits for batches)",
            confidence="low" if not iowait else "medium",
            severity=ctx.options.severity(starved),
        )
    ]


def _read_rate(table: dict[str, list[float]], idx: list[int]) -> float:
    """Bytes per second read from disk across the samples (the column is cumulative since the start)."""
    reads = table.get("disk_read_bytes")
    times = table.get("t_unix_ns")
    if not reads or not times or len(idx) < 2:
        return 0.0
    first, last = idx[0], idx[-1]
    dt = (times[last] - times[first]) / 1e9
    dr = reads[last] - reads[first]
    return dr / dt if dt > 0 and not math.isnan(dr) else 0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
