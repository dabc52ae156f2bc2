"""Nsight Compute results: per-kernel counters from ``ncu --csv`` exports or ``.ncu-rep`` reports, matched
to the timeline's kernels, and **measured** roofline points beside the shape-based estimates.

Inputs:
- ``ncu --csv --page raw [--print-units base]``: one row per profiled kernel, a column per metric, a units
  row under the header;
- ``ncu --csv --page details``: one row per (kernel, metric), with Section/Metric Name/Unit/Value (rule
  rows are skipped);
- ``.ncu-rep``: through NVIDIA's ``ncu_report`` Python module when it is importable (an optional extra:
  ``pip install ncu-report``; proprietary, never vendored). Otherwise a one-line error says how to export
  a CSV.

Values are converted to base units (ns, bytes, FLOP). Sections may be missing (custom metric sets): each
derived number is ``None`` when its counters are absent.
"""

from __future__ import annotations

import csv
import functools
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from aiprof.errors import TraceError
from aiprof.trace.limits import LoadLimits
from aiprof.trace.model import Kind, Trace

NCU_REP_MAGIC = b"NVR\x00"
DURATION = "gpu__time_duration.sum"
SM_SOL = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_SOL = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_READ, DRAM_WRITE, DRAM = "dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum"
# Floating-point instructions per precision, counted per thread (sm__sass_thread_inst_executed_op_*): an
# FMA is two FLOPs.
_FLOP_OPS = {"fp64": ("dadd", "dmul", "dfma"), "fp32": ("fadd", "fmul", "ffma"), "fp16": ("hadd", "hmul", "hfma")}
# Display names of the details page → the raw metric they show (only where the unit says which).
_DETAILS = {("Duration", "time"): DURATION, ("Compute (SM) Throughput", "%"): SM_SOL,
            ("Memory Throughput", "%"): MEMORY_SOL, ("DRAM Throughput", "%"): "dram__throughput.avg.pct_of_peak_sustained_elapsed"}
_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


@dataclass
class NcuResult:
    """One profiled kernel launch (an ncu "action"), metrics in base units."""

    index: int  # ncu's ID: the order of profiling
    kernel: str
    grid: int  # blocks in the grid (x*y*z), -1 unknown
    block: int  # threads per block
    device: int = -1
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def duration_ns(self) -> float | None:
        return self.metrics.get(DURATION)

    @property
    def flops(self) -> float | None:
        """FLOPs from the FP pipe counters (add + mul + 2 x FMA, every precision present); None without them."""
        total, seen = 0.0, False
        for add, mul, fma in _FLOP_OPS.values():
            for op, weight in ((add, 1), (mul, 1), (fma, 2)):
                value = self.metrics.get(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum")
                if value is not None:
                    total, seen = total + weight * value, True
        return total if seen else None

    @property
    def dram_bytes(self) -> float | None:
        read, write = self.metrics.get(DRAM_READ), self.metrics.get(DRAM_WRITE)
        if read is not None or write is not None:
            return (read or 0.0) + (write or 0.0)
        return self.metrics.get(DRAM)

    @property
    def sm_sol_pct(self) -> float | None:
        return self.metrics.get(SM_SOL)

    @property
    def memory_sol_pct(self) -> float | None:
        return self.metrics.get(MEMORY_SOL)


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------
def read_ncu(path: Path, limits: LoadLimits | None = None) -> list[NcuResult]:
    """An ``.ncu-rep`` report or an ``ncu --csv`` export (raw or details page), told apart by content;
    ``limits``: the load limits (None: the defaults)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    if head == NCU_REP_MAGIC or path.suffix == ".ncu-rep":
        return read_report(path)
    return read_csv(path, limits)


# Every number of an export goes through number(): a counter of 10^30 of anything is no measurement, and
# nan / inf / 1e400 / a 5,000-digit number are not numbers a kernel has.
MAX_VALUE = 1e30
MAX_INDEX = (1 << 31) - 1
_NUMBER_CHARS = 64  # longer text is no number of an export ("1,234,567.891e+05" is 17)


def number(text: str) -> float | None:
    """The reader's one number parser: ``text`` (thousands separators allowed) as a finite float of
    magnitude <= :data:`MAX_VALUE`; None for anything else (blank, ``n/a``, ``nan``, ``inf``, ``1e400``,
    a 5,000-digit number, text). A metric that is None is absent: its derived numbers are None."""
    cleaned = text.strip().replace(",", "")
    if not cleaned or len(cleaned) > _NUMBER_CHARS:
        return None
    try:
        return finite(float(cleaned))
    except ValueError:
        return None


def finite(value: float) -> float | None:
    """``value`` when finite and of magnitude <= :data:`MAX_VALUE`, else None."""
    return value if math.isfinite(value) and abs(value) <= MAX_VALUE else None


def whole(value: float | None, high: int = MAX_INDEX) -> int | None:
    """``value`` when it is a whole number in 0..``high``, else None (an ID, a device, a dimension)."""
    if value is None or not 0 <= value <= high or value != int(value):
        return None
    return int(value)


def _scale(unit: str) -> float:
    """Factor to base units: time to ns, byte multiples to bytes (ncu's Kbyte = 1000 bytes), rates alike."""
    unit = unit.strip()
    if unit in _TIME:
        return _TIME[unit]
    head, _, per = unit.partition("/")
    factor = 1.0
    for base in ("byte", "inst", "sector", "request", "cycle", "warp", "thread", "block", "hz", "Hz"):
        if head.endswith(base):
            factor = _SCALE.get(head[: -len(base)], 1.0)
            break
    if per in _TIME:
        factor *= 1e9 / _TIME[per]  # rates: per second
    return factor


@functools.lru_cache(maxsize=4096)
def _dims(text: str) -> int:
    """``(256, 1, 1)`` (or ``256``) → 256; -1 when unknown or not a launch's dimensions (each a whole
    number 0..2^31-1)."""
    parts = text.strip().removeprefix("(").removesuffix(")").split(",")
    sizes = [whole(number(p)) for p in parts] if len(text) <= _NUMBER_CHARS * 3 else [None]
    total = 1
    for n in sizes:
        if n is None:
            return -1
        total *= n
    return total if total < 1 << 62 else -1


_PREAMBLE_BYTES = 1 << 20  # ncu's "==PROF==" lines before the header; the header must come within this


def _encoding(head: bytes) -> str:
    """UTF-16 (LE or BE) when the file starts with its byte-order mark (Windows tools save CSV so), UTF-8
    with or without one otherwise."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    return "utf-8-sig"


def read_csv(path: Path, limits: LoadLimits | None = None) -> list[NcuResult]:
    """An ``ncu --csv`` export: the raw page (a column per metric) or the details page (a row per metric).

    Streamed: the file is read a line at a time (never whole), each row turned into its result as it comes;
    UTF-8 (with or without a BOM) or BOM-marked UTF-16; ``--max-events`` caps the rows and
    ``--max-trace-mb`` the file's size."""
    limits = limits or LoadLimits()
    try:
        with path.open("rb") as raw:
            head = raw.read(4)
            size = os.fstat(raw.fileno()).st_size
        if size > limits.max_bytes:
            raise TraceError(f"{path}: {size / (1 << 20):,.0f} MiB is past the --max-trace-mb limit "
                             f"({limits.max_bytes / (1 << 20):,.0f} MiB)")
        fh = open(path, encoding=_encoding(head), errors="replace", newline="")
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    with fh:
        header_line, lineno, seen = None, 0, 0
        while seen < _PREAMBLE_BYTES:
            line = fh.readline(_PREAMBLE_BYTES)
            if not line:
                break
            lineno += 1
            seen += len(line)
            if line.startswith('"ID"'):
                header_line = line
                break
        if header_line is None:
            raise TraceError(f'{path}: not an ncu CSV export (no "ID" header row); export with '
                             "`ncu --import REPORT.ncu-rep --csv --page raw --print-units base > FILE.csv`")
        rows = _Rows(path, csv.reader(itertools.chain([header_line], fh)), lineno - 1, limits.max_events)
        header = next(rows)
        if "Metric Name" in header and "Metric Value" in header:
            return _details(header, rows)
        return _raw(path, header, rows)


class _Rows:
    """The CSV rows after the header, one at a time: a malformed row (a field past csv's 128 KiB limit, a
    NUL) or a row past ``--max-events`` is a one-line :class:`TraceError` naming its line."""

    def __init__(self, path: Path, reader: Any, offset: int, limit: int) -> None:
        self.path, self.reader, self.offset, self.limit, self.count = path, reader, offset, limit, 0

    def __iter__(self) -> _Rows:
        return self

    def __next__(self) -> list[str]:
        try:
            row: list[str] = next(self.reader)
        except csv.Error as err:
            raise TraceError(f"{self.path}: line {self.offset + self.reader.line_num}: not the CSV ncu writes "
                             f"({err})") from None
        self.count += 1
        if self.limit and self.count > self.limit + 2:  # the header and the units row are no kernels
            raise TraceError(f"{self.path}: more than {self.limit:,} rows (--max-events {self.limit}); "
                             "export fewer kernels or raise the limit")
        return row


def _identity(path: Path, cells: dict[str, str], line: int) -> NcuResult:
    return _result(path, line, cells.get("ID", ""), cells.get("Kernel Name", cells.get("Function Name", "")),
                   cells.get("Grid Size", ""), cells.get("Block Size", ""), cells.get("Device", ""))


def _result(path: Path, line: int, index: str, kernel: str, grid: str, block: str, device: str) -> NcuResult:
    """A result's identity from its cells' text; an ID that is not a kernel's index is a one-line error."""
    found = whole(number(index))
    if found is None:
        raise TraceError(f"{path}: line {line}: ID {index[:40]!r} is not a kernel's index (a whole number "
                         f"0..{MAX_INDEX}); is this an ncu CSV export?")
    return NcuResult(index=found, kernel=kernel, grid=_dims(grid), block=_dims(block),
                     device=_or(whole(number(device)), -1))


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _raw(path: Path, header: list[str], rows: _Rows) -> list[NcuResult]:
    """The raw page: a column per metric, each converted by its unit's factor (from the units row)."""
    scales = [1.0] * len(header)
    metrics = [(i, name) for i, name in enumerate(header) if "__" in name]
    at = {name: i for i, name in enumerate(header)}  # a repeated name: its last column, as dict(zip) gives
    kernel = at.get("Kernel Name", at.get("Function Name", -1))
    cols = [at.get(n, -1) for n in ("ID", "Grid Size", "Block Size", "Device")]
    results = []
    for row in rows:
        if rows.count == 2 and row and row[0] == "":  # the units row
            units = row + [""] * (len(header) - len(row))
            scales = [_scale(u) for u in units]
            continue
        if len(row) < len(header):
            continue
        index, grid, block, device = (row[c] if c >= 0 else "" for c in cols)
        result = _result(path, rows.offset + rows.reader.line_num, index, row[kernel] if kernel >= 0 else "",
                         grid, block, device)
        for i, name in metrics:
            value = number(row[i])
            if value is not None:
                result.metrics[name] = value * scales[i]
        results.append(result)
    if not results:
        raise TraceError(f"{path}: the ncu CSV export lists no kernel")
    return results


def _details(header: list[str], rows: _Rows) -> list[NcuResult]:
    by_id: dict[int, NcuResult] = {}
    for row in rows:
        cells = dict(zip(header, row))
        if not cells.get("Metric Name"):
            continue  # rule rows
        result = _identity(rows.path, cells, rows.offset + rows.reader.line_num)
        result = by_id.setdefault(result.index, result)
        unit = cells.get("Metric Unit", "")
        kind = "time" if unit.strip() in _TIME else unit.strip()
        metric = _DETAILS.get((cells["Metric Name"].strip(), kind), cells["Metric Name"].strip())
        value = number(cells.get("Metric Value", ""))
        if value is not None:
            result.metrics[metric] = value * (_scale(unit) if kind != "%" else 1.0)
    return [by_id[k] for k in sorted(by_id)]


def read_report(path: Path) -> list[NcuResult]:
    """An ``.ncu-rep`` through NVIDIA's ``ncu_report`` module (optional; never vendored)."""
    try:
        import ncu_report  # type: ignore[import-not-found]
    except ImportError:
        raise TraceError(
            f"{path}: reading .ncu-rep needs NVIDIA's ncu_report module (pip install ncu-report); or export a "
            f"CSV: ncu --import {path.name} --csv --page raw --print-units base > {path.stem}.csv"
        ) from None
    try:
        context = ncu_report.load_report(str(path))
    except Exception as err:  # the module's own errors: not ours to name
        raise TraceError(f"{path}: ncu_report cannot read this report ({err})") from None
    results: list[NcuResult] = []
    for r in range(context.num_ranges()):
        actions = context.range_by_idx(r)
        for a in range(actions.num_actions()):
            results.append(_action(actions.action_by_idx(a), len(results)))
    return results


def _action(action: Any, index: int) -> NcuResult:
    metrics: dict[str, float] = {}
    for name in action.metric_names():
        metric = action.metric_by_name(name)
        value = metric.value() if metric is not None else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            kept = finite(float(value)) if abs(value) < 1e300 else None  # the CSV's rules (no float overflow)
            unit = metric.unit() if hasattr(metric, "unit") else ""
            if kept is not None:
                metrics[str(name)] = kept * _scale(str(unit or ""))
    return NcuResult(
        index=index,
        kernel=str(action.name()),
        grid=_or(whole(metrics.get("launch__grid_size"), 1 << 62), -1),
        block=_or(whole(metrics.get("launch__block_size"), 1 << 62), -1),
        device=_or(whole(metrics.get("device__attribute_device_index")), -1),
        metrics=metrics,
    )


# ---------------------------------------------------------------------------------------------------
# Matching to the timeline, measured roofline points
# ---------------------------------------------------------------------------------------------------
def _base_name(name: str) -> str:
    """``void ns::k<float>(float*, int)`` → ``ns::k<float>``: what ncu's shorter kernel names keep."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    return name[:cut].strip()


def match_kernels(trace: Trace, results: list[NcuResult]) -> list[int]:
    """For each ncu result, the timeline kernel row it measured, or -1: the n-th profiled launch of a kernel
    name is the n-th launch of that name on the timeline (ncu serialises launches in program order), and
    its grid and block must agree where both are known."""
    kernels = trace.kernels()
    rows, names = kernels.rows.tolist(), kernels.names
    by_name: dict[str, list[int]] = {}
    for row, name in zip(rows, names):
        by_name.setdefault(name, []).append(row)
        by_name.setdefault("\0" + _base_name(name), []).append(row)
    seen: dict[str, int] = {}
    c = trace.columns
    out = []
    for result in sorted(results, key=lambda r: r.index):
        key = result.kernel if result.kernel in by_name else "\0" + _base_name(result.kernel)
        candidates = by_name.get(key, [])
        n = seen.get(key, 0)
        seen[key] = n + 1
        row = candidates[n] if n < len(candidates) else -1
        if row >= 0 and not (_agree(result.grid, int(c.grid[row])) and _agree(result.block, int(c.block[row]))):
            row = -1
        out.append(row)
    order = sorted(range(len(results)), key=lambda i: results[i].index)
    matched = [-1] * len(results)
    for i, row in zip(order, out):
        matched[i] = row
    return matched


def _agree(a: int, b: int) -> bool:
    return a < 0 or b < 0 or a == b


@dataclass(frozen=True)
class MeasuredPoint:
    """One kernel on the roofline from counters, beside the shape-based estimate of the op that ran it."""

    kernel: str
    row: int  # timeline kernel row, -1 unmatched
    op: str | None  # the CPU op that launched it (None: no op, e.g. plain CUDA programs)
    duration_ns: float | None
    flops: float | None
    dram_bytes: float | None
    sm_sol_pct: float | None
    memory_sol_pct: float | None
    est_flops: int | None = None  # the roofline's estimate for the whole op (all its kernels)
    est_bytes: int | None = None

    @property
    def achieved_flops_per_s(self) -> float | None:
        return self.flops / self.duration_ns * 1e9 if self.flops is not None and self.duration_ns else None

    @property
    def achieved_bytes_per_s(self) -> float | None:
        return self.dram_bytes / self.duration_ns * 1e9 if self.dram_bytes is not None and self.duration_ns else None

    @property
    def intensity(self) -> float | None:
        """FLOP per DRAM byte."""
        return self.flops / self.dram_bytes if self.flops is not None and self.dram_bytes else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "row": self.row, "op": self.op, "duration_ns": self.duration_ns,
            "flops": self.flops, "dram_bytes": self.dram_bytes, "sm_sol_pct": self.sm_sol_pct,
            "memory_sol_pct": self.memory_sol_pct, "achieved_flops_per_s": self.achieved_flops_per_s,
            "achieved_bytes_per_s": self.achieved_bytes_per_s, "flop_per_byte": self.intensity,
            "est_flops": self.est_flops, "est_bytes": self.est_bytes,
        }


def measured_points(trace: Trace, results: list[NcuResult], estimates: bool = True) -> list[MeasuredPoint]:
    """Each ncu result as a measured roofline point, with the launching op's shape-based estimate (FLOPs and
    bytes from :mod:`aiprof.roofline`) when the trace records one."""
    from aiprof.trace import links

    rows = match_kernels(trace, results)
    op_of = links.gpu_op(trace) if len(trace.view(Kind.CPU_OP)) else None
    cost_of = _op_costs(trace) if estimates and op_of is not None else {}
    points = []
    for result, row in zip(results, rows):
        op = int(op_of[row]) if op_of is not None and row >= 0 else -1
        cost = cost_of.get(op)
        points.append(MeasuredPoint(
            kernel=result.kernel, row=row, op=trace.name_of(op) if op >= 0 else None,
            duration_ns=result.duration_ns, flops=result.flops, dram_bytes=result.dram_bytes,
            sm_sol_pct=result.sm_sol_pct, memory_sol_pct=result.memory_sol_pct,
            est_flops=cost[0] if cost else None, est_bytes=cost[1] if cost else None,
        ))
    return points


def _op_costs(trace: Trace) -> dict[int, tuple[int, int]]:
    from aiprof.roofline.analysis import roofline

    calls = roofline(trace).calls
    out: dict[int, tuple[int, int]] = {}
    for op, k in zip(calls.op.tolist(), calls.cost_id.tolist()):
        if op >= 0 and k >= 0:
            cost = calls.costs[k]
            out[op] = (cost.flops, cost.bytes_read + cost.bytes_written)
    return out


__all__ = ["MeasuredPoint", "NcuResult", "match_kernels", "measured_points", "read_csv", "read_ncu", "read_report"]
