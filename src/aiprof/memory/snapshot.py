"""Read a CUDA caching-allocator snapshot (``torch.cuda.memory._dump_snapshot``) into a :class:`MemoryData`.

The snapshot is read with the no-classes unpickler (:mod:`aiprof.memory.unpickle`). Its ``segments`` give
the allocator state at dump time; ``device_traces`` give the recorded events (``time_us``, ``action``,
``addr``, ``size`` = requested bytes, ``stream``, ``frames``). Blocks that already existed when recording
started are added as allocations at the trace's first instant (the *seed*): without them the peak is low
by every block allocated earlier (parameters, optimizer state, an unfinished step's activations).
Snapshots of other torch versions are salvaged where the meaning is clear, with a warning.
"""

from __future__ import annotations

import operator
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from aiprof.memory.model import (
    BLOCK_STATES,
    PairCache,
    pair_rows_and_firsts,
    SNAPSHOT_ACTIONS,
    Action,
    BlockTable,
    EventTable,
    Frame,
    MemoryData,
    MemoryInputError,
    OomRecord,
    SegmentTable,
    Window,
)
from aiprof.memory.stream import Run, Unsupported, load_streaming
from aiprof.memory.unpickle import loads_plain

STREAM_MIN_BYTES = 8 << 20  # from this size on, read with the streaming reader (no dict per trace entry)
MIN_BLOCK = 512  # the caching allocator's kMinBlockSize: every block is a multiple of it
_STEP = re.compile(r"ProfilerStep#(\d+)")


class _Stacks:
    """Interns stacks (lists of frame dicts) into ids; frame dicts shared by the pickle are looked up once."""

    def __init__(self) -> None:
        self.stacks: list[tuple[Frame, ...]] = []
        self._ids: dict[tuple[Frame, ...], int] = {}
        self._frames: dict[int, Frame] = {}
        self._by_list: dict[tuple[int, ...], int] = {}
        self._keep: list[Any] = []  # keeps id()-keyed objects alive

    def frame(self, raw: Any) -> Frame | None:
        cached = self._frames.get(id(raw))
        if cached is not None:
            return cached
        if not isinstance(raw, dict):
            return None
        line = raw.get("line", 0)
        made = Frame(str(raw.get("filename", "?"))[:500], line if isinstance(line, int) else 0, str(raw.get("name", "?"))[:200])
        self._frames[id(raw)] = made
        self._keep.append(raw)
        return made

    def intern(self, raw: Any) -> int:
        if not isinstance(raw, list) or not raw:
            return -1
        key = tuple(map(id, raw))  # frame dicts are shared by the pickle: their ids name a stack cheaply
        known = self._by_list.get(key)
        if known is not None:
            return known
        frames = tuple(f for f in (self.frame(r) for r in raw) if f is not None)
        sid = self._ids.get(frames)
        if sid is None:
            sid = self._ids[frames] = len(self.stacks)
            self.stacks.append(frames)
        self._by_list[key] = sid
        self._keep.append(raw)
        return sid


def round_block(size: int) -> int:
    """The caching allocator's block size for a request (kMinBlockSize granularity)."""
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


# The one range rule of a snapshot's numbers. An allocator records sizes and addresses below 2^62 bytes,
# devices below 2^31, times within 2^53 µs (285 years) and finite: an entry, segment or block holding any
# other value (2^80 bytes, device 2^63, time_us NaN) is skipped and counted in a warning, never converted
# (numpy would overflow, int() would fail).
MAX_VALUE = 1 << 62
MAX_DEVICE = (1 << 31) - 1
MAX_TIME_US = 1 << 53


class _OutOfRange(Exception):
    """A value past the range rule: the entry, segment or block holding it is skipped."""


def _int(value: Any, default: int = 0, high: int = MAX_VALUE) -> int:
    """``value`` when it is an int within ±``high``; ``default`` when it is not an int (a missing field);
    raises :class:`_OutOfRange` for an int beyond."""
    if not isinstance(value, int) or isinstance(value, bool):
        return default
    if not -high <= value <= high:
        raise _OutOfRange
    return value


def _time_ns(t_us: float) -> int:
    """``time_us`` in ns; :class:`_OutOfRange` when not finite or past :data:`MAX_TIME_US`."""
    if not (-MAX_TIME_US <= t_us <= MAX_TIME_US):  # NaN compares false
        raise _OutOfRange
    return int(t_us * 1000)


def _out_of_range(*columns: Any, high: int = MAX_VALUE) -> bool:
    """Whether any value of these int64 arrays is past ±``high`` (the fast path then gives way)."""
    return any(len(c) and bool(((c < -high) | (c > high)).any()) for c in columns)


def read_snapshot(path: Path, data: bytes | None = None, *, stream: bool | None = None) -> MemoryData:
    """A snapshot file as a :class:`MemoryData` (:class:`MemoryInputError` when it is not one).

    With ``data`` None the file is read here: a large one (``stream`` None: at least ``STREAM_MIN_BYTES``)
    through the streaming reader (:mod:`aiprof.memory.stream`), which fills the trace columns without a dict
    per entry; a pickle it does not handle is read with the plain no-classes unpickler, with the same result.
    ``AIPROF_MEMORY_STREAM=0`` turns the streaming reader off (the benchmark compares the two)."""
    what = str(path)
    if data is None:
        if stream is None and os.environ.get("AIPROF_MEMORY_STREAM") == "0":
            stream = False
        if stream is None:
            try:
                stream = path.stat().st_size >= STREAM_MIN_BYTES
            except OSError:
                stream = False
        if stream:
            try:
                return snapshot_from_object(load_streaming(path), what)
            except (Unsupported, OSError, ValueError):
                pass
        try:
            data = path.read_bytes()
        except OSError as err:
            raise MemoryInputError(f"{what}: cannot read ({err.strerror}); check the path") from None
    obj = loads_plain(data, what)
    return snapshot_from_object(obj, what)


def snapshot_from_object(obj: Any, what: str) -> MemoryData:
    warnings: list[str] = []
    if isinstance(obj, list) and all(isinstance(s, dict) and "blocks" in s for s in obj[:50]):
        warnings.append(f"{what}: an old-style snapshot (a bare list of segments, torch < 2.0): no event trace")
        obj = {"segments": obj}
    if not isinstance(obj, dict) or not ("segments" in obj or "device_traces" in obj):
        kind = type(obj).__name__
        raise MemoryInputError(
            f"{what}: a pickle of a {kind} with no 'segments' or 'device_traces': not an allocator snapshot "
            "(dump one with torch.cuda.memory._dump_snapshot())"
        )
    stacks = _Stacks()
    segments, blocks = _segments(obj.get("segments"), stacks, what, warnings)
    columns: dict[str, list[Any]] = {k: [] for k in ("t", "dev", "addr", "size", "action", "stream", "stack")}
    ooms: list[OomRecord] = []
    traces = obj.get("device_traces")
    if traces is None:
        traces = []
    if not isinstance(traces, list):
        raise MemoryInputError(f"{what}: 'device_traces' is a {type(traces).__name__}, not a list per device")
    skipped = untimed = 0
    for device, entries in enumerate(traces):
        if not isinstance(entries, list):
            skipped += 1
            continue
        if any(type(e) is Run for e in entries):
            _run_columns(entries, device, columns, stacks, ooms)
            entries.clear()  # the streaming reader's list: its columns are in ``columns`` now
            continue
        if _fast_columns(entries, device, columns, stacks, ooms):
            continue
        rows: dict[str, list[int]] = {k: [] for k in columns}
        for i, entry in enumerate(entries):
            action = SNAPSHOT_ACTIONS.get(str(entry.get("action"))) if isinstance(entry, dict) else None
            if action is None:
                skipped += 1
                continue
            t_us = entry.get("time_us")
            timed = isinstance(t_us, (int, float)) and not isinstance(t_us, bool)
            try:
                t_ns = _time_ns(t_us if timed else i)
                size, addr = _int(entry.get("size")), _int(entry.get("addr"), -1)
                stream, free = _int(entry.get("stream")), _int(entry.get("device_free"))
            except _OutOfRange:
                skipped += 1
                continue
            untimed += not timed
            stack = stacks.intern(entry.get("frames"))
            rows["t"].append(t_ns)
            rows["dev"].append(device)
            rows["addr"].append(addr)
            rows["size"].append(size)
            rows["action"].append(int(action))
            rows["stream"].append(stream)
            rows["stack"].append(stack)
            if action == Action.OOM:
                ooms.append(OomRecord(t_ns, device, size, free, stack))
        for name, values in rows.items():
            columns[name].append(np.asarray(values, dtype=np.int64))
    if skipped:
        warnings.append(f"{what}: {skipped} trace entries of an unknown shape or action, or with a value out of "
                        "range (a size past 2^62, a time not finite), were skipped")
    if untimed:
        warnings.append(f"{what}: {untimed} trace entries carry no time_us (an older torch): event order is used as time")
    joined: dict[str, Any] = {}
    for name, parts in columns.items():  # one column at a time, letting go of its pieces
        joined[name] = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        parts.clear()
    events = EventTable.build(
        joined["t"], joined["dev"], joined["addr"], joined["size"], joined["action"],
        stream=joined["stream"], stack=joined["stack"],
    )
    del joined, columns
    _free_when_requested(events)
    settings = obj.get("allocator_settings")
    end_t = int(events.t_ns.max()) if len(events) else 0
    data = MemoryData(
        source="snapshot", path=what, events=events, stacks=stacks.stacks, segments=segments, blocks=blocks,
        snapshot_t_ns=end_t, settings=dict(settings) if isinstance(settings, dict) else {}, ooms=ooms,
        warnings=warnings,
    )
    data.steps = _annotation_steps(obj.get("external_annotations"))
    _seed_and_size(data)
    return data


def _fast_columns(
    entries: list[Any], device: int, columns: dict[str, list[Any]], stacks: _Stacks, ooms: list[OomRecord]
) -> bool:
    """The columns of one device's entries when every entry is well formed (a dict with an int ``time_us``,
    ``addr``, ``size`` and a known action), at C speed; False (nothing added) otherwise."""
    if not entries:
        return True
    try:
        if not all(type(e) is dict for e in entries):
            return False
        get = operator.itemgetter("action", "time_us", "addr", "size", "stream", "frames")
        acts, times, addrs, sizes, streams, frames = zip(*map(get, entries))
        actions = [SNAPSHOT_ACTIONS[a] for a in acts]
        raw_t = np.asarray(times, dtype=np.int64)
        addr = np.asarray(addrs, dtype=np.int64)
        size = np.asarray(sizes, dtype=np.int64)
        stream = np.asarray(streams, dtype=np.int64)
        free = [_int(e.get("device_free")) for e, a in zip(entries, actions) if a == Action.OOM]
    except (KeyError, TypeError, ValueError, OverflowError, _OutOfRange):
        return False
    if _out_of_range(addr, size, stream) or _out_of_range(raw_t, high=MAX_TIME_US):
        return False  # the per-entry path skips what is out of range
    t = raw_t * 1000
    intern = stacks.intern
    columns["t"].append(t)
    columns["dev"].append(np.full(len(entries), device, dtype=np.int64))
    columns["addr"].append(addr)
    columns["size"].append(size)
    columns["action"].append(np.asarray(actions, dtype=np.int64))
    columns["stream"].append(stream)
    columns["stack"].append(np.fromiter(map(intern, frames), dtype=np.int64, count=len(entries)))
    oom = iter(free)
    for i, a in enumerate(actions):
        if a == Action.OOM:
            ooms.append(OomRecord(int(t[i]), device, int(size[i]), next(oom), intern(entries[i].get("frames"))))
    return True


def _run_columns(
    entries: list[Any], device: int, columns: dict[str, list[Any]], stacks: _Stacks, ooms: list[OomRecord]
) -> None:
    """The columns of one device's entries as the streaming reader left them (runs of columns and the
    dicts it built one by one), in order; the dicts must convert as :func:`_fast_columns` converts them
    (else :class:`Unsupported`: the plain reader decides, as it would for the whole device); so must the
    runs' values (the range rule above)."""
    start = 0
    for k in range(len(entries) + 1):
        piece = entries[k] if k < len(entries) else None
        if piece is not None and type(piece) is not Run:
            continue
        if k > start and not _fast_columns(entries[start:k], device, columns, stacks, ooms):
            raise Unsupported("an entry of an unusual shape next to runs")
        start = k + 1
        if piece is None:
            break
        if _out_of_range(piece.addr, piece.size, piece.stream) or _out_of_range(piece.t_ns, high=MAX_TIME_US * 1000):
            raise Unsupported("a value out of range")  # the plain reader skips its entry, as for any entry
        ids = np.fromiter(map(stacks.intern, piece.stacks), dtype=np.int64, count=len(piece.stacks))
        columns["t"].append(piece.t_ns)
        columns["dev"].append(np.full(piece.t_ns.size, device, dtype=np.int64))
        columns["addr"].append(piece.addr)
        columns["size"].append(piece.size)
        columns["action"].append(piece.action.astype(np.int64))
        columns["stream"].append(piece.stream)
        columns["stack"].append(ids[piece.rows])


def _segments(raw: Any, stacks: _Stacks, what: str, warnings: list[str]) -> tuple[SegmentTable, BlockTable]:
    seg_cols: dict[str, list[Any]] = {k: [] for k in ("dev", "addr", "total", "stream", "small", "exp")}
    blk: dict[str, list[int]] = {k: [] for k in ("dev", "addr", "size", "req", "state", "stack", "seg")}
    bad = 0
    for seg in raw if isinstance(raw, list) else []:
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks"), list):
            bad += 1
            continue
        index = len(seg_cols["dev"])
        try:
            device, addr = _int(seg.get("device"), high=MAX_DEVICE), _int(seg.get("address"))
            total, stream = _int(seg.get("total_size")), _int(seg.get("stream"))
            if device < 0:
                raise _OutOfRange
        except _OutOfRange:
            bad += 1
            continue
        seg_cols["dev"].append(device)
        seg_cols["addr"].append(addr)
        seg_cols["total"].append(total)
        seg_cols["stream"].append(stream)
        seg_cols["small"].append(seg.get("segment_type") == "small")
        seg_cols["exp"].append(bool(seg.get("is_expandable", False)))
        cursor = addr
        for block in seg["blocks"]:
            if not isinstance(block, dict):
                bad += 1
                continue
            try:
                size = _int(block.get("size"))
                block_addr = _int(block.get("address"), cursor)
                requested = _int(block.get("requested_size"), size)
            except _OutOfRange:
                bad += 1
                continue
            state = block.get("state")
            if state not in BLOCK_STATES:  # torch < 2.0 spelled it with booleans
                state = "active_allocated" if block.get("allocated") else "inactive"
            blk["dev"].append(device)
            blk["addr"].append(block_addr)
            blk["size"].append(size)
            blk["req"].append(requested)
            blk["state"].append(BLOCK_STATES[state])
            blk["stack"].append(stacks.intern(block.get("frames")))
            blk["seg"].append(index)
            cursor += size
    if bad:
        warnings.append(f"{what}: {bad} segments or blocks of an unknown shape, or with a value out of range, "
                        "were skipped")
    segments = SegmentTable(
        device=np.asarray(seg_cols["dev"], dtype=np.int32), addr=np.asarray(seg_cols["addr"], dtype=np.int64),
        total=np.asarray(seg_cols["total"], dtype=np.int64), stream=np.asarray(seg_cols["stream"], dtype=np.int64),
        small=np.asarray(seg_cols["small"], dtype=np.bool_), expandable=np.asarray(seg_cols["exp"], dtype=np.bool_),
    )
    blocks = BlockTable(
        device=np.asarray(blk["dev"], dtype=np.int32), addr=np.asarray(blk["addr"], dtype=np.int64),
        size=np.asarray(blk["size"], dtype=np.int64), requested=np.asarray(blk["req"], dtype=np.int64),
        state=np.asarray(blk["state"], dtype=np.int8), stack=np.asarray(blk["stack"], dtype=np.int32),
        segment=np.asarray(blk["seg"], dtype=np.int32),
    )
    return segments, blocks


def _free_when_requested(events: EventTable) -> None:
    """Allocated bytes drop at ``free_requested`` (as ``memory_allocated`` does). A history recorded with
    ``skip_actions=["free_requested"]`` has only ``free_completed``: those rows then are the frees."""
    for device in np.unique(events.device).tolist():
        rows = events.device == device
        if not np.any(events.action[rows] == int(Action.FREE)):
            completed = rows & (events.action == int(Action.FREE_COMPLETED))
            events.action[completed] = int(Action.FREE)


def _seed_and_size(data: MemoryData) -> None:
    """Add the blocks that existed before recording started (as allocations at the first instant) and set
    each allocation's block size: exact for blocks the snapshot still holds, else the rounded request."""
    ev, blocks = data.events, data.blocks
    assert blocks is not None
    # the request rounded up to a multiple of MIN_BLOCK (a power of two: a mask, not a division)
    np.maximum((ev.size + (MIN_BLOCK - 1)) & -MIN_BLOCK, MIN_BLOCK, out=ev.block_size)
    segment_rows = ev.action >= int(Action.SEGMENT_ALLOC)
    ev.block_size[segment_rows] = ev.size[segment_rows]
    active = blocks.state != BLOCK_STATES["inactive"]
    final = {(d, a): (s, r, st) for d, a, s, r, st in zip(
        blocks.device[active].tolist(), blocks.addr[active].tolist(), blocks.size[active].tolist(),
        blocks.requested[active].tolist(), blocks.stack[active].tolist())}
    free_of, alloc_of, first_frees = pair_rows_and_firsts(ev.device, ev.addr, ev.action)
    frees = np.flatnonzero(ev.action == int(Action.FREE))
    paired = frees[alloc_of[frees] >= 0]
    ev.block_size[paired] = ev.block_size[alloc_of[paired]]
    unseen = frees[alloc_of[frees] < 0]  # freed, never seen allocated: allocated before recording
    seed: list[tuple[int, int, int, int, int]] = [
        (d, a, s, round_block(s), -1)
        for d, a, s in zip(ev.device[unseen].tolist(), ev.addr[unseen].tolist(), ev.size[unseen].tolist())
    ]
    allocs = np.flatnonzero(ev.action == int(Action.ALLOC))
    still = allocs[free_of[allocs] < 0]  # allocated in the trace, never freed: the dump may hold its block
    live: dict[tuple[int, int], int] = dict(zip(zip(ev.device[still].tolist(), ev.addr[still].tolist()), still.tolist()))
    for key, row in live.items():
        held = final.get(key)
        if held is not None:
            ev.block_size[row] = held[0]
    for (device, addr), (size, requested, stack) in final.items():
        if (device, addr) not in live:
            seed.append((device, addr, requested, size, stack))
    # a free of a block allocated before recording gets the seed's block size
    if seed:
        t0 = int(ev.t_ns.min()) - 1 if len(ev) else 0
        seeded = EventTable.build(
            [t0] * len(seed), [s[0] for s in seed], [s[1] for s in seed], [s[2] for s in seed],
            [int(Action.ALLOC)] * len(seed), block_size=[s[3] for s in seed], stack=[s[4] for s in seed],
        )
        merged = EventTable(**{
            name: np.concatenate([getattr(seeded, name), getattr(ev, name)]) for name in ev.__dataclass_fields__
        })
        data.events = merged
        free_of, alloc_of = _seeded_pairs(merged, seed, free_of, alloc_of, first_frees)
    data.seeded_blocks = len(seed)
    data.pairs = PairCache(data.events.device, data.events.addr, data.events.action, free_of, alloc_of)


def _seeded_pairs(
    merged: EventTable, seed: list[tuple[int, int, int, int, int]], free_of: np.ndarray, alloc_of: np.ndarray,
    first_frees: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``pair_rows`` of ``merged`` (the seed rows, then the recorded ones) from the recorded rows' pairing,
    without sorting again. In a (device, address) group of ``merged`` the seeds (all allocations) come first,
    then the recorded rows in the same order as before: the recorded pairs stay (shifted by the seeds), and
    the group's last seed pairs with the group's first recorded row when that row is a free
    (``first_frees``: those rows, numbered before the seeds)."""
    shift = len(seed)
    new_free = np.full(len(merged), -1, np.int64)
    new_alloc = np.full(len(merged), -1, np.int64)
    for new, old in ((new_free, free_of), (new_alloc, alloc_of)):
        np.add(old, shift, out=new[shift:], where=old >= 0)  # -1 stays -1
    if first_frees.size:
        last_seed = {(d, a): i for i, (d, a, _, _, _) in enumerate(seed) if a >= 0}
        rows = first_frees + shift
        for row, key in zip(rows.tolist(), zip(merged.device[rows].tolist(), merged.addr[rows].tolist())):
            s = last_seed.get(key)
            if s is not None:
                new_free[s] = row
                new_alloc[row] = s
    return new_free, new_alloc


def _annotation_steps(raw: Any) -> list[Window]:
    """``ProfilerStep#N`` windows from ``external_annotations`` (START/END markers), when present."""
    starts: dict[int, int] = {}
    steps: list[Window] = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, dict):
            continue
        match = _STEP.fullmatch(str(entry.get("name", "")))
        t_us = entry.get("time_us")
        if match is None or not isinstance(t_us, (int, float)):
            continue
        index = int(match.group(1))
        if entry.get("stage") == "START":
            starts[index] = int(t_us * 1000)
        elif entry.get("stage") == "END" and index in starts:
            steps.append(Window("step", index, starts.pop(index), int(t_us * 1000)))
    return sorted(steps, key=lambda w: w.start_ns)
