"""Timeline overview: each device's compute / communication / memcpy / memset / compile / idle time in N bins.

The HTML report draws it as a strip per device over the analysed span (first step start to last step
end), with telemetry counters under it. Bins use the same priority as the timeline accounting
(``analysis.timeline``): a nanosecond covered by several kinds of work goes to the first of compute,
communication, memcpy, memset, compile; what nothing covers is idle. So per bin the six numbers add up to the
bin's length, and summed over the steps' span they agree with the accounting (outside-step gaps aside).

A trace of several profiler cycles (``analysis.recording``) is binned over its cycles only, joined end to end:
``segments`` lists the pieces of the span the bins cover (trace clock), and the unrecorded time between
cycles is in no bin (not idle). ``end_ns - start_ns`` is then the recorded length, not the wall span.
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.analysis import intervals as iv
from aiprof.analysis.comm import is_comm_kernel
from aiprof.analysis.recording import profiler_cycles
from aiprof.analysis.steps import step_windows
from aiprof.analysis.compile import compile_set
from aiprof.analysis.timeline import BUCKETS, cpu_work
from aiprof.trace.model import I64, Kind, Trace

DEFAULT_BINS = 240


class DeviceBins(msgspec.Struct, kw_only=True):
    """One device's ns of each bucket per bin (``idle_ns`` is what no work covers); the lists are ``bins`` long."""

    device: str  # "gpu:0", "cpu"
    index: int  # -1 for the CPU
    name: str
    compute_ns: list[int]
    communication_ns: list[int]
    memcpy_ns: list[int]
    memset_ns: list[int]
    compile_ns: list[int] | UnsetType = UNSET  # always written since schema 1.1 (absent from 1.0 reports)
    idle_ns: list[int]

    def series(self, bucket: str) -> list[int]:
        """The bins of ``bucket`` (one of ``analysis.timeline.BUCKETS``; none for what the report lacks)."""
        values: list[int] | UnsetType = getattr(self, f"{bucket}_ns")
        return [] if isinstance(values, UnsetType) else values


class TimelineOverview(msgspec.Struct, kw_only=True):
    """The report section ``ranks[].timeline_overview``: ``bins`` bins of ``bin_ns`` over the analysed span
    (trace clock; ``base_time_ns`` turns it into Unix time); ``segments`` only with several profiler cycles."""

    start_ns: int
    end_ns: int
    bin_ns: int
    bins: int
    base_time_ns: int
    devices: list[DeviceBins]
    segments: list[list[int]] | UnsetType = UNSET


def timeline_overview(trace: Trace, bins: int = DEFAULT_BINS) -> TimelineOverview:
    """Per-device occupancy per time bin (ns of each bucket per bin), over the steps' span."""
    span = _span(trace)
    if span is None:
        return TimelineOverview(start_ns=0, end_ns=0, bin_ns=0, bins=0, base_time_ns=trace.base_time_ns, devices=[])
    segments = _segments(trace, span)
    length = sum(hi - lo for lo, hi in segments)
    count = int(max(1, min(bins, length)))
    pieces = _pieces(segments, count)
    devices = [_device_bins(trace, d, pieces) for d in trace.device_ids] or [_cpu_bins(trace, pieces)]
    return TimelineOverview(
        start_ns=segments[0][0],
        end_ns=segments[0][0] + length,
        bin_ns=int(length // count),
        bins=count,
        base_time_ns=trace.base_time_ns,
        devices=devices,
        segments=[[lo, hi] for lo, hi in segments] if len(segments) > 1 else UNSET,
    )


def _segments(trace: Trace, span: tuple[int, int]) -> list[tuple[int, int]]:
    """The span, or its parts inside the profiler cycles when the trace holds several."""
    cycles = profiler_cycles(trace)
    lo, hi = span
    parts = [(max(lo, c.start_ns), min(hi, c.end_ns)) for c in cycles]
    parts = [(a, b) for a, b in parts if b > a]
    return parts if len(parts) > 1 else [span]


Pieces = tuple[I64, I64, I64]  # (bin index, start, end) of each piece of a bin inside a segment


def _pieces(segments: list[tuple[int, int]], count: int) -> Pieces:
    """``count`` bins of equal recorded length over the segments joined end to end; a bin that spans a
    boundary between segments is two pieces (the unrecorded time between them is in neither)."""
    offsets = np.cumsum([0] + [hi - lo for lo, hi in segments]).astype(np.int64)
    length = int(offsets[-1])
    edges = (np.arange(count + 1, dtype=np.int64) * length) // count  # in recorded time
    index, starts, ends = [], [], []
    for k, (lo, _) in enumerate(segments):
        a, b = np.maximum(edges[:-1], offsets[k]), np.minimum(edges[1:], offsets[k + 1])
        keep = np.flatnonzero(b > a)
        index.append(keep)
        starts.append(a[keep] - offsets[k] + lo)
        ends.append(b[keep] - offsets[k] + lo)
    return (np.concatenate(index).astype(np.int64), np.concatenate(starts).astype(np.int64),
            np.concatenate(ends).astype(np.int64))


def _span(trace: Trace) -> tuple[int, int] | None:
    """The steps' span, else the span of all device (or CPU) activity."""
    windows = step_windows(trace)
    if windows:
        return min(w.start_ns for w in windows), max(w.end_ns for w in windows)
    c = trace.columns
    if c.ts.size == 0:
        return None
    lo, hi = int(c.ts.min()), int((c.ts + c.dur).max())
    return (lo, hi) if hi > lo else None


def _rows_set(trace: Trace, rows: I64) -> iv.IntervalSet:
    c = trace.columns
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def _binned(layers: list[iv.IntervalSet], pieces: Pieces, name: str, device: str, index: int) -> DeviceBins:
    """Bucket k per bin = cover(U_k) - cover(U_{k-1}); idle is what is left of the bin (summed over its pieces)."""
    which, lo, hi = pieces
    bins = int(which.max()) + 1 if which.size else 0

    def per_bin(values: I64) -> I64:
        return np.bincount(which, weights=values, minlength=bins).astype(np.int64)

    acc = iv.EMPTY
    prev = np.zeros(bins, dtype=np.int64)
    out: dict[str, list[int]] = {}
    for bucket, layer in zip(BUCKETS[:-1], layers):
        acc = iv.union(acc, layer)
        covered = per_bin(iv.overlap_per_window(acc, lo, hi))
        out[bucket] = (covered - prev).tolist()
        prev = covered
    return DeviceBins(device=device, index=index, name=name, compute_ns=out["compute"],
                      communication_ns=out["communication"], memcpy_ns=out["memcpy"], memset_ns=out["memset"],
                      compile_ns=out["compile"], idle_ns=(per_bin(hi - lo) - prev).tolist())


def _device_bins(trace: Trace, device: int, edges: Pieces) -> DeviceBins:
    c = trace.columns
    on = c.device == device
    kernels = np.flatnonzero(on & (c.kind == int(Kind.KERNEL)))
    comm = is_comm_kernel(trace)[kernels]
    layers = [
        _rows_set(trace, kernels[~comm]),
        _rows_set(trace, kernels[comm]),
        _rows_set(trace, np.flatnonzero(on & (c.kind == int(Kind.MEMCPY)))),
        _rows_set(trace, np.flatnonzero(on & (c.kind == int(Kind.MEMSET)))),
        compile_set(trace),
    ]
    return _binned(layers, edges, trace.device_info(device).name, f"gpu:{device}", device)


def _cpu_bins(trace: Trace, edges: Pieces) -> DeviceBins:
    """CPU-only traces: the timeline accounting's CPU view (``timeline.cpu_work``): CPU ops are compute,
    host-side collectives (``gloo:all_reduce``, ``c10d::*``) communication, data-loading waits idle."""
    compute, communication, _ = cpu_work(trace)
    return _binned([compute, communication, iv.EMPTY, iv.EMPTY, compile_set(trace)], edges, "CPU", "cpu", -1)
