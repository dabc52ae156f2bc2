"""Replay a :class:`MemoryData` into a :class:`MemoryReport`: peaks, fragmentation, steps, leak trend, what
is live at the peak, OOM verdicts.

Allocated bytes are replayed from the events with the allocator's block sizes; the replay starts from the
memory that existed before recording (the readers add it as allocations at the first instant), so the peak
is the device's real high-water mark, not only the recorded part of it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from aiprof.memory.categories import infer_categories, step_of
from aiprof.memory.model import (
    CATEGORY_NAMES,
    CPU_DEVICE,
    Action,
    Category,
    Frame,
    MemoryData,
    event_pairs,
)
from aiprof.memory.report import (
    AllocatorStats,
    CategoryBytes,
    DeviceMemory,
    LeakTrend,
    LiveGroup,
    MemoryReport,
    OomVerdict,
    Site,
    SnapshotState,
    StepMemory,
    Timeline,
)
from aiprof.memory.units import binary

TIMELINE_POINTS = 2000
BEFORE_RECORDING = "(allocated before recording)"
TOP_SITES = 12
TOP_GROUPS = 60
_LIBRARY = ("/site-packages/", "/dist-packages/", "/torch/", "/lib/python")


def user_site(frames: tuple[Frame, ...]) -> str:
    """The first frame in user code (not torch, not a library), else the innermost frame; ``?`` if none."""
    for f in frames:
        path = "/" + f.filename.replace("\\", "/").lstrip("/")
        if path != "/" and not path.startswith("/<") and not any(lib in path for lib in _LIBRARY):
            return f.short()
    return frames[0].short() if frames else "?"


def pair_frees(data: MemoryData) -> tuple[np.ndarray, np.ndarray]:
    """``free_of[alloc row]`` and ``alloc_of[free row]`` (-1 where there is none), matched by device and
    address; rows without an address are never paired."""
    return event_pairs(data)


def analyze_memory(data: MemoryData, capacity_bytes: int | None = None) -> MemoryReport:
    """The memory report of ``data``. ``capacity_bytes`` overrides the device size the source gives."""
    ev = data.events
    ev.step[:] = step_of(ev.t_ns, data.steps)
    free_of, alloc_of = pair_frees(data)
    # a free's block size is its allocation's (Kineto and snapshots record the same block at both ends)
    paired = alloc_of >= 0
    ev.block_size[paired] = ev.block_size[alloc_of[paired]]
    infer_categories(data, free_of)
    site_of_stack = [user_site(s) for s in data.stacks] + ["?"]
    devices = [
        _device(data, int(d), free_of, site_of_stack, capacity_bytes)
        for d in sorted(set(_devices(ev.device)) | _snapshot_devices(data))
    ]
    settings = {str(k)[:80]: str(v)[:200] for k, v in data.settings.items()}
    return MemoryReport(
        source=data.source, path=data.path,
        categories_from="torch" if data.torch_categories else "inferred",
        expandable_segments=_expandable(data.settings), settings=settings, devices=devices,
        stats=_stats(data.stats), warnings=list(data.warnings),
    )


def _devices(column: np.ndarray) -> list[int]:
    """The distinct devices of the event table (a handful: counted, not hashed or sorted)."""
    if column.size == 0:
        return []
    lo, hi = int(column.min()), int(column.max())
    if hi - lo < (1 << 16):
        found: list[int] = (np.flatnonzero(np.bincount((column - lo).astype(np.int64))) + lo).tolist()
        return found
    return sorted(set(column.tolist()))


def _snapshot_devices(data: MemoryData) -> set[int]:
    return set(data.segments.device.tolist()) if data.segments is not None else set()


def _expandable(settings: dict[str, Any]) -> bool:
    if settings.get("expandable_segments") is True:
        return True
    conf = str(settings.get("PYTORCH_CUDA_ALLOC_CONF", "")).replace(" ", "").lower()
    return "expandable_segments:true" in conf


def _device(
    data: MemoryData, device: int, free_of: np.ndarray, site_of_stack: list[str], capacity: int | None
) -> DeviceMemory:
    ev = data.events
    on_device = ev.device == device
    rows = np.flatnonzero(on_device & (ev.action <= int(Action.FREE)))
    is_alloc = ev.action[rows] == int(Action.ALLOC)  # else a FREE
    sign = np.where(is_alloc, 1, -1)
    delta = sign * ev.block_size[rows]
    cur = np.cumsum(delta) if rows.size else np.zeros(1, np.int64)
    k = int(np.argmax(cur)) if rows.size else 0
    peak = int(cur[k]) if rows.size else 0
    peak_row = int(rows[k]) if rows.size else -1
    peak_t = int(ev.t_ns[peak_row]) if peak_row >= 0 else 0
    # the seeded rows come first (rows ascend): without them the running sum is cur less their total
    m = int(np.searchsorted(rows, data.seeded_blocks))
    seed_bytes = int(cur[m - 1]) if m else 0
    unseeded_peak = max(int(cur[m:].max()) - seed_bytes, 0) if m < rows.size else 0
    reserved = _reserved_series(data, device, rows)
    reserved_at_peak = int(reserved[k]) if reserved is not None and rows.size else None
    live = _live_at(data, rows, k, free_of)
    if data.source != "timeline" and np.any(ev.addr[rows[~is_alloc]] < 0):
        live = live[:0]  # frees without an address cannot be matched: what is live at the peak is unknown
        data.warnings.append(
            f"{'cpu' if device == CPU_DEVICE else f'cuda:{device}'}: the [memory] events carry no Addr: the peak is the running sum of Bytes, "
            "but what is live at it cannot be attributed"
        )
    cats = ev.category[live]
    by_cat = np.bincount(cats.astype(np.int64), weights=ev.block_size[live], minlength=len(CATEGORY_NAMES)) if live.size else np.zeros(len(CATEGORY_NAMES))
    if data.source == "timeline":  # no addresses: per-category running sums at the peak
        by_cat = np.bincount(ev.category[rows[: k + 1]].astype(np.int64), weights=delta[: k + 1], minlength=len(CATEGORY_NAMES))
    groups: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])  # bytes, blocks
    sites: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row, cat, stack, size in zip(live.tolist(), cats.tolist(), ev.stack[live].tolist(), ev.block_size[live].tolist()):
        site = BEFORE_RECORDING if stack < 0 and row < data.seeded_blocks else site_of_stack[stack]
        group = groups[(cat, site)]
        group[0] += size
        group[1] += 1
        entry = sites[site]
        entry[0] += size
        entry[1] += 1
    rounding = None
    if data.source == "snapshot" and live.size:
        rounding = int((ev.block_size[live] - ev.size[live]).clip(min=0).sum())
    steps = _steps(data, device, rows, cur, reserved)
    cap = capacity if capacity is not None else data.capacity_bytes.get(device)
    return DeviceMemory(
        device="cpu" if device == CPU_DEVICE else f"cuda:{device}", device_index=device, capacity_bytes=cap,
        peak_allocated_bytes=peak, peak_t_ns=peak_t,
        peak_step=int(ev.step[peak_row]) if peak_row >= 0 and ev.step[peak_row] >= 0 else None,
        unseeded_peak_bytes=unseeded_peak, seed_bytes=seed_bytes,
        peak_reserved_bytes=int(reserved.max()) if reserved is not None and reserved.size else None,
        reserved_at_peak_bytes=reserved_at_peak,
        fragmentation_at_peak_bytes=max(reserved_at_peak - peak, 0) if reserved_at_peak is not None else None,
        rounding_loss_at_peak_bytes=rounding,
        allocations=int(np.count_nonzero(is_alloc[m:])),
        allocated_bytes_total=int(delta[m:][is_alloc[m:]].sum()),
        segment_allocs=int(np.count_nonzero(on_device & (ev.action == int(Action.SEGMENT_ALLOC)))),
        segment_frees=int(np.count_nonzero(on_device & (ev.action == int(Action.SEGMENT_FREE)))),
        live_at_peak_by_category=[
            CategoryBytes(CATEGORY_NAMES[i], int(b)) for i, b in sorted(enumerate(by_cat.tolist()), key=lambda x: -x[1]) if b > 0
        ],
        live_at_peak_by_site=[Site(s, v[0], v[1]) for s, v in sorted(sites.items(), key=lambda x: -x[1][0])[:TOP_SITES]],
        live_at_peak=[
            LiveGroup(CATEGORY_NAMES[c], s, b, n)
            for (c, s), (b, n) in sorted(groups.items(), key=lambda x: -x[1][0])[:TOP_GROUPS]
        ],
        steps=steps, leak=_leak(data, device, rows, steps, free_of, site_of_stack, peak_t),
        snapshot=_snapshot_state(data, device), ooms=_ooms(data, device, rows, cur, reserved, free_of, site_of_stack),
        timeline=_timeline(data, rows, delta, cur, reserved),
        carried_over_bytes=data.carried_over_bytes.get(device, 0),
        seed_known=device not in data.seed_unknown,
    )


def _live_at(data: MemoryData, rows: np.ndarray, k: int, free_of: np.ndarray) -> np.ndarray:
    """Allocation rows of ``rows[: k + 1]`` not freed by row ``rows[k]``."""
    if rows.size == 0:
        return rows
    upto = rows[: k + 1]
    allocs = upto[data.events.action[upto] == int(Action.ALLOC)]
    f = free_of[allocs]
    live: np.ndarray = allocs[(f < 0) | (f > rows[k])]
    return live


def _reserved_series(data: MemoryData, device: int, rows: np.ndarray) -> np.ndarray | None:
    """Reserved bytes after each of ``rows``: Kineto's ``Total Reserved``, or a snapshot's segments replayed
    backwards from the dump through the segment events."""
    ev = data.events
    if data.source == "kineto" and data.reserved_ns is not None and device != CPU_DEVICE:
        res = data.reserved_ns[rows]
        if not np.any(res >= 0):
            return None
        known = np.where(res >= 0, res, 0)
        filled = np.maximum.accumulate(np.where(res >= 0, np.arange(res.size), -1))
        out = np.where(filled >= 0, known[np.maximum(filled, 0)], 0)
        return out.astype(np.int64)
    if data.source != "snapshot" or data.segments is None:
        return None
    end = int(data.segments.total[data.segments.device == device].sum())
    seg = np.flatnonzero((ev.device == device) & ((ev.action == int(Action.SEGMENT_ALLOC)) | (ev.action == int(Action.SEGMENT_FREE))))
    if seg.size == 0:
        return np.full(rows.size, end, np.int64)
    change = np.where(ev.action[seg] == int(Action.SEGMENT_ALLOC), ev.size[seg], -ev.size[seg])
    after = np.cumsum(change)  # reserved after segment event j = end − Σ changes after j
    start = end - int(after[-1])
    idx = np.searchsorted(seg, rows, side="right") - 1
    series: np.ndarray = np.where(idx >= 0, start + after[np.maximum(idx, 0)], start).astype(np.int64)
    return series


def _steps(
    data: MemoryData, device: int, rows: np.ndarray, cur: np.ndarray, reserved: np.ndarray | None
) -> list[StepMemory]:
    ev = data.events
    out: list[StepMemory] = []
    t = ev.t_ns[rows]
    retries = _retries_by_step(data.stats, device)
    for w in data.steps:
        lo = int(np.searchsorted(t, w.start_ns, side="left"))
        hi = int(np.searchsorted(t, w.end_ns, side="right"))
        before = int(cur[lo - 1]) if lo > 0 else 0
        inside = rows[lo:hi]
        allocs = (ev.action[inside] == int(Action.ALLOC)) & (inside >= data.seeded_blocks)  # not the seeds
        seg = (ev.device == device) & (ev.t_ns >= w.start_ns) & (ev.t_ns <= w.end_ns)
        peak_reserved = frag = None
        if reserved is not None and (hi > lo or lo > 0):
            # the step's rows, with the state it starts in (the row before it) when it has one
            first = lo - 1 if lo > 0 else lo
            window = slice(first, max(hi, first + 1))
            k = first + int(np.argmax(cur[window]))
            peak_reserved = int(reserved[window].max())
            frag = max(int(reserved[k]) - int(cur[k]), 0)
        out.append(StepMemory(
            index=w.index, start_ns=w.start_ns, end_ns=w.end_ns,
            peak_allocated_bytes=int(max(cur[lo:hi].max(), before)) if hi > lo else before,
            end_allocated_bytes=int(cur[hi - 1]) if hi > 0 else 0,
            allocations=int(allocs.sum()), allocated_bytes=int(ev.block_size[inside][allocs].sum()),
            segment_allocs=int(np.sum(seg & (ev.action == int(Action.SEGMENT_ALLOC)))),
            segment_frees=int(np.sum(seg & (ev.action == int(Action.SEGMENT_FREE)))),
            peak_reserved_bytes=peak_reserved, fragmentation_at_peak_bytes=frag,
            alloc_retries=retries.get(w.index),
        ))
    return out


def _retries_by_step(samples: list[dict[str, Any]], device: int) -> dict[int, int]:
    """``num_alloc_retries`` during each step: the capture samples the cumulative counter after every step
    (``{"step": N, "device": d, "num_alloc_retries": …}``), so a step's retries are its sample less the
    previous step's (a step whose previous sample is missing gets none)."""
    counter: dict[int, int] = {}
    for s in samples:
        step, value, dev = s.get("step"), s.get("num_alloc_retries"), s.get("device", device)
        if isinstance(step, int) and isinstance(value, int) and dev == device:
            counter[step] = value
    return {step: max(value - counter[step - 1], 0) for step, value in counter.items() if step - 1 in counter}


def _leak(
    data: MemoryData, device: int, rows: np.ndarray, steps: list[StepMemory], free_of: np.ndarray,
    site_of_stack: list[str], peak_t: int,
) -> LeakTrend | None:
    if len(steps) < 2:
        return None
    ends = [s.end_allocated_bytes for s in steps]
    run = best = 0
    for a, b in zip(ends, ends[1:]):
        run = run + 1 if b > a else 0
        best = max(best, run)
    later = ends[1:]
    growth = int((later[-1] - later[0]) / (len(later) - 1)) if len(later) >= 2 else 0
    ev = data.events
    last_end = steps[-1].end_ns
    allocs = rows[(ev.action[rows] == int(Action.ALLOC)) & (ev.t_ns[rows] > steps[0].end_ns) & (ev.t_ns[rows] <= last_end)]
    f = free_of[allocs]
    kept = allocs[(f < 0) | (ev.t_ns[np.maximum(f, 0)] > last_end)]
    kept = kept[~np.isin(ev.category[kept], [Category.PARAMETER, Category.OPTIMIZER_STATE, Category.GRADIENT])]
    sites: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for stack, size in zip(ev.stack[kept].tolist(), ev.block_size[kept].tolist()):
        entry = sites[site_of_stack[stack]]
        entry[0] += size
        entry[1] += 1
    # what the leak holds at the peak: made in a recorded step before the peak's step, never freed by the end
    peak_step_start = next((st.start_ns for st in steps if st.start_ns <= peak_t <= st.end_ns), peak_t)
    made = rows[(ev.action[rows] == int(Action.ALLOC)) & (rows >= data.seeded_blocks)
                & (ev.t_ns[rows] >= steps[0].start_ns) & (ev.t_ns[rows] < peak_step_start)]
    g = free_of[made]
    held = made[(g < 0) | (ev.t_ns[np.maximum(g, 0)] > max(last_end, peak_t))]
    held = held[~np.isin(ev.category[held], [Category.PARAMETER, Category.OPTIMIZER_STATE, Category.GRADIENT])]
    return LeakTrend(
        end_of_step_bytes=ends, growth_bytes_per_step=growth, longest_growth_run=best,
        sites=[Site(s, v[0], v[1]) for s, v in sorted(sites.items(), key=lambda x: -x[1][0])[:TOP_SITES]],
        held_at_peak_bytes=int(ev.block_size[held].sum()),
    )


def _snapshot_state(data: MemoryData, device: int) -> SnapshotState | None:
    seg, blk = data.segments, data.blocks
    if seg is None or blk is None:
        return None
    s = seg.device == device
    b = blk.device == device
    active = b & (blk.state != 2)
    inactive = b & (blk.state == 2)
    if not np.any(s):
        return None
    return SnapshotState(
        segments=int(s.sum()), large_segments=int((s & ~seg.small).sum()), small_segments=int((s & seg.small).sum()),
        expandable_segments=int((s & seg.expandable).sum()), reserved_bytes=int(seg.total[s].sum()),
        allocated_bytes=int(blk.size[active].sum()), requested_bytes=int(blk.requested[active].sum()),
        rounding_loss_bytes=int((blk.size[active] - blk.requested[active]).sum()),
        cached_free_bytes=int(blk.size[inactive].sum()),
        largest_free_block_bytes=int(blk.size[inactive].max()) if np.any(inactive) else 0,
    )


def _ooms(
    data: MemoryData, device: int, rows: np.ndarray, cur: np.ndarray, reserved: np.ndarray | None,
    free_of: np.ndarray, site_of_stack: list[str],
) -> list[OomVerdict]:
    ev = data.events
    out: list[OomVerdict] = []
    for oom in (o for o in data.ooms if o.device == device):
        k = int(np.searchsorted(ev.t_ns[rows], oom.t_ns, side="right")) - 1
        allocated = int(cur[k]) if k >= 0 and rows.size else 0
        res = int(reserved[k]) if reserved is not None and k >= 0 and reserved.size else allocated
        cached = max(res - allocated, 0)
        largest: int | None = None
        state = _snapshot_state(data, device)
        if state is not None and (k == rows.size - 1):  # dumped at the OOM: the blocks are the OOM's
            largest = state.largest_free_block_bytes
        live = _live_at(data, rows, k, free_of) if k >= 0 else rows[:0]
        sites: dict[str, int] = defaultdict(int)
        for stack, size in zip(ev.stack[live].tolist(), ev.block_size[live].tolist()):
            sites[site_of_stack[stack]] += size
        top = [Site(s, b) for s, b in sorted(sites.items(), key=lambda x: -x[1])[:3]]
        fits_in_free = cached + oom.device_free_bytes >= oom.request_bytes
        verdict = "fragmentation" if fits_in_free and (largest is None or largest < oom.request_bytes) else "capacity"
        if verdict == "fragmentation":
            why = (f"{binary(cached + oom.device_free_bytes)} was free ({binary(cached)} cached in the allocator, "
                   f"{binary(oom.device_free_bytes)} on the device) but no free block holds the "
                   f"{binary(oom.request_bytes)} asked for")
        else:
            why = (f"live memory ({binary(allocated)}) plus the request ({binary(oom.request_bytes)}) exceed what the "
                   f"device could give: {binary(cached)} cached free + {binary(oom.device_free_bytes)} device free")
        out.append(OomVerdict(
            t_ns=oom.t_ns, verdict=verdict, request_bytes=oom.request_bytes, device_free_bytes=oom.device_free_bytes,
            allocated_bytes=allocated, reserved_bytes=res, cached_free_bytes=cached, largest_free_block_bytes=largest,
            top_sites=top, explanation=why,
        ))
    return out


def _timeline(
    data: MemoryData, rows: np.ndarray, delta: np.ndarray, cur: np.ndarray, reserved: np.ndarray | None
) -> Timeline:
    """Per-category allocated bytes at ≤ TIMELINE_POINTS rows: each bin of rows keeps its highest row."""
    ev = data.events
    if rows.size == 0:
        return Timeline([], [], [])
    n = rows.size
    if n <= TIMELINE_POINTS:
        pick = np.arange(n)
    else:  # each bin's first row holding the bin's maximum (every bin has a row: n > TIMELINE_POINTS)
        edges = np.linspace(0, n, TIMELINE_POINTS + 1).astype(np.int64)
        counts = np.diff(edges)
        top = np.maximum.reduceat(cur, edges[:-1])
        hits = np.flatnonzero(cur == np.repeat(top, counts))
        pick = hits[np.searchsorted(hits, edges[:-1])]
    # per-category running sums at the picked rows: rows grouped by category (a radix sort of one byte),
    # each group's running sum read at its last row up to each pick
    cats = ev.category[rows]
    by_cat = np.argsort(cats, kind="stable")
    grouped = cats[by_cat]
    starts = np.flatnonzero(np.concatenate([[True], grouped[1:] != grouped[:-1]]))
    bounds = np.append(starts, n)
    present_list = grouped[starts].astype(np.int64).tolist()
    series = []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        idx = by_cat[lo:hi]  # this category's rows, ascending
        run = np.concatenate([[0], np.cumsum(delta[idx])])
        series.append(run[np.searchsorted(idx, pick, side="right")].tolist())
    return Timeline(
        t_ns=ev.t_ns[rows[pick]].tolist(), categories=[CATEGORY_NAMES[c] for c in present_list], bytes=series,
        reserved_bytes=reserved[pick].tolist() if reserved is not None else None,
    )


def _stats(samples: list[dict[str, Any]]) -> AllocatorStats | None:
    if not samples:
        return None

    def last(key: str) -> int:
        values = [int(s[key]) for s in samples if isinstance(s.get(key), (int, float))]
        return max(values) if values else 0

    non_pt = [
        int(s["nvml_used_bytes"]) - int(s["reserved_bytes"]) for s in samples
        if isinstance(s.get("nvml_used_bytes"), int) and isinstance(s.get("reserved_bytes"), int)
    ]
    return AllocatorStats(
        samples=len(samples), num_alloc_retries=last("num_alloc_retries"), num_ooms=last("num_ooms"),
        inactive_split_bytes_peak=last("inactive_split_bytes"), non_pytorch_bytes=max(non_pt) if non_pt else None,
    )
