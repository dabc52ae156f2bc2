"""The allocation-event table every reader fills, and the allocator state that comes with a snapshot.

One row per allocator event, in time order, as NumPy columns (``t_ns, device, addr, size, block_size,
action, stream, stack, step, category``). Sizes are bytes. ``size`` is what the source recorded (a
snapshot's trace records the requested size; Kineto records the allocator's block size); ``block_size`` is
the allocator block the request occupies (requested size rounded as the caching allocator rounds it, or the
exact block when the snapshot still holds it): allocated-bytes figures use ``block_size``, as
``torch.cuda.memory_allocated`` does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from aiprof.errors import AiprofError

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]

CPU_DEVICE = -1  # the device column's value for host memory


class MemoryInputError(AiprofError):
    """A memory input (snapshot, trace, timeline) cannot be read or understood."""


class Action(enum.IntEnum):
    """What an event row did."""

    ALLOC = 0
    FREE = 1  # the block is no longer allocated (snapshot ``free_requested``, Kineto negative Bytes)
    FREE_COMPLETED = 2  # the block is back in the cache (after its streams' uses finished)
    SEGMENT_ALLOC = 3  # cudaMalloc of a segment (or an expandable segment's map)
    SEGMENT_FREE = 4
    OOM = 5
    SNAPSHOT = 6


SNAPSHOT_ACTIONS = {
    "alloc": Action.ALLOC,
    "free_requested": Action.FREE,
    "free_completed": Action.FREE_COMPLETED,
    "segment_alloc": Action.SEGMENT_ALLOC,
    "segment_map": Action.SEGMENT_ALLOC,
    "segment_free": Action.SEGMENT_FREE,
    "segment_unmap": Action.SEGMENT_FREE,
    "oom": Action.OOM,
    "snapshot": Action.SNAPSHOT,
}


class Category(enum.IntEnum):
    """What a block holds (torch's ``_memory_profiler.Category`` order, then UNKNOWN)."""

    PARAMETER = 0
    OPTIMIZER_STATE = 1
    INPUT = 2
    TEMPORARY = 3
    ACTIVATION = 4
    GRADIENT = 5
    AUTOGRAD_DETAIL = 6
    UNKNOWN = 7


CATEGORY_NAMES = tuple(c.name.lower() for c in Category)
NO_CATEGORY = -1  # the category column before inference


@dataclass(frozen=True)
class Frame:
    """One source frame of an allocation's stack (innermost first in a stack)."""

    filename: str
    line: int
    name: str

    def short(self) -> str:
        """``file.py:LINE name`` with the directory dropped (``/`` and ``\\`` both split)."""
        base = self.filename.replace("\\", "/").rsplit("/", 1)[-1]
        return f"{base}:{self.line} {self.name}" if base else self.name


@dataclass
class EventTable:
    """Allocator events in time order (one row each)."""

    t_ns: I64
    device: I32
    addr: I64
    size: I64
    block_size: I64
    action: I8
    stream: I64
    stack: I32  # index into MemoryData.stacks, -1 none
    step: I32  # step index the event falls in, -1 outside every step
    category: I8  # Category, or NO_CATEGORY until inferred
    op: I32  # Kineto: the outermost CPU op instance the event happened in, -1 none

    def __len__(self) -> int:
        return int(self.t_ns.size)

    @staticmethod
    def build(
        t_ns: Any, device: Any, addr: Any, size: Any, action: Any, *, block_size: Any = None, stream: Any = None,
        stack: Any = None, category: Any = None, op: Any = None,
    ) -> EventTable:
        """A table from sequences, sorted by time (stable: equal times keep their recorded order)."""
        t = np.asarray(t_ns, dtype=np.int64)
        n = t.size
        def col(value: Any, dtype: Any, default: int) -> Any:
            return np.full(n, default, dtype=dtype) if value is None else np.asarray(value, dtype=dtype)
        sz = col(size, np.int64, 0)
        table = EventTable(
            t_ns=t, device=col(device, np.int32, 0), addr=col(addr, np.int64, -1), size=sz,
            block_size=sz.copy() if block_size is None else np.asarray(block_size, dtype=np.int64),
            action=col(action, np.int8, 0), stream=col(stream, np.int64, 0), stack=col(stack, np.int32, -1),
            step=np.full(n, -1, dtype=np.int32), category=col(category, np.int8, NO_CATEGORY),
            op=col(op, np.int32, -1),
        )
        if n and not np.all(t[1:] >= t[:-1]):  # already in order (a snapshot's trace): no sort
            table = table.take(np.argsort(t, kind="stable"))
        return table

    def take(self, rows: Any) -> EventTable:
        return EventTable(**{name: getattr(self, name)[rows] for name in self.__dataclass_fields__})


@dataclass
class BlockTable:
    """Blocks of the allocator's segments at snapshot time (a snapshot's ``segments[*].blocks``)."""

    device: I32
    addr: I64
    size: I64
    requested: I64
    state: I8  # 0 active_allocated, 1 active_awaiting_free, 2 inactive (cached free)
    stack: I32
    segment: I32  # row in SegmentTable


BLOCK_STATES = {"active_allocated": 0, "active_awaiting_free": 1, "inactive": 2}


@dataclass
class SegmentTable:
    """Segments (cudaMalloc'd ranges) at snapshot time."""

    device: I32
    addr: I64
    total: I64
    stream: I64
    small: npt.NDArray[np.bool_]
    expandable: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Window:
    """A time window [start_ns, end_ns): a step, or a phase (forward, backward, optimizer) inside one."""

    kind: str
    index: int
    start_ns: int
    end_ns: int


@dataclass
class OomRecord:
    """An ``oom`` event of a snapshot: what was asked and what the device had left."""

    t_ns: int
    device: int
    request_bytes: int
    device_free_bytes: int
    stack: int


@dataclass
class MemoryData:
    """What a reader produced: the event table and whatever else the source knows."""

    source: str  # "snapshot", "kineto", "timeline"
    path: str
    events: EventTable
    stacks: list[tuple[Frame, ...]] = field(default_factory=list)
    segments: SegmentTable | None = None
    blocks: BlockTable | None = None
    snapshot_t_ns: int | None = None  # when the snapshot's segment state was taken (the trace's end)
    steps: list[Window] = field(default_factory=list)
    phases: list[Window] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    capacity_bytes: dict[int, int] = field(default_factory=dict)  # device -> total memory
    reserved_known: bool = False  # the source carries the reserved total (Kineto Total Reserved)
    reserved_ns: I64 | None = None  # Kineto: Total Reserved per row (-1 unknown)
    allocated_ns: I64 | None = None  # Kineto: Total Allocated per row (-1 unknown)
    ooms: list[OomRecord] = field(default_factory=list)
    seeded_blocks: int = 0  # allocations added for memory that existed before recording started
    # CPU Kineto: bytes the profiler's Total Allocated carried over from earlier profiler sessions in the
    # process that the trace never frees (held blocks and blocks freed while no session ran, inseparable)
    carried_over_bytes: dict[int, int] = field(default_factory=dict)
    # Devices whose memory held before recording started is not known, only a lower bound (the seeded blocks):
    # CPU Kineto (the profiler's CPU counter counts only what a session saw allocated) and traces without totals
    seed_unknown: set[int] = field(default_factory=set)
    torch_categories: bool = False  # the category column came from torch's own profiler
    stats: list[dict[str, Any]] = field(default_factory=list)  # capture: memory_stats() per step
    warnings: list[str] = field(default_factory=list)
    # the reader's free/alloc pairing of ``events`` (see :func:`event_pairs`), not part of the data
    pairs: PairCache | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class PairCache:
    """:func:`pair_rows` of an event table, with the columns it was computed from (a cache is used only
    while the table holds these very arrays: the columns are never changed in place after reading)."""

    device: I32
    addr: I64
    action: I8
    free_of: I64
    alloc_of: I64


def event_pairs(data: MemoryData) -> tuple[I64, I64]:
    """``pair_rows`` of ``data.events``: the reader's pairing when it made one for these columns."""
    ev, cache = data.events, data.pairs
    if cache is not None and cache.device is ev.device and cache.addr is ev.addr and cache.action is ev.action:
        return cache.free_of, cache.alloc_of
    return pair_rows(ev.device, ev.addr, ev.action)


def pair_rows(device: I32, addr: I64, action: I8) -> tuple[I64, I64]:
    """Match each free to the allocation it releases, vectorised: ``(free_of, alloc_of)`` per row, -1 where
    there is none. Rows are grouped by (device, address) in time order; an ALLOC immediately followed, in its
    group, by a FREE is a pair (an allocator never hands out an address twice before it is freed). Rows
    without an address (< 0) and other actions are never paired."""
    free_of, alloc_of, _ = pair_rows_and_firsts(device, addr, action)
    return free_of, alloc_of


def pair_rows_and_firsts(device: I32, addr: I64, action: I8) -> tuple[I64, I64, I64]:
    """:func:`pair_rows`, and the rows that begin their (device, address) group and are frees (any order)."""
    n = int(addr.size)
    free_of = np.full(n, -1, np.int64)
    alloc_of = np.full(n, -1, np.int64)
    rows = np.flatnonzero(((action == int(Action.ALLOC)) | (action == int(Action.FREE))) & (addr >= 0))
    if rows.size < 2:
        return free_of, alloc_of, rows[action[rows] == int(Action.FREE)].astype(np.int64)
    # stable sorts keep time order inside a group; one device (the usual case) needs one key only
    dev = device[rows]
    if dev.size and dev.min() == dev.max():
        order = rows[np.argsort(addr[rows], kind="stable")]
    else:
        order = rows[np.lexsort((addr[rows], dev))]
    a, b = order[:-1], order[1:]
    same = (addr[a] == addr[b]) & (device[a] == device[b])
    hit = same & (action[a] == int(Action.ALLOC)) & (action[b] == int(Action.FREE))
    free_of[a[hit]] = b[hit]
    alloc_of[b[hit]] = a[hit]
    starts = np.concatenate([order[:1], b[~same]])
    first_frees: I64 = starts[action[starts] == int(Action.FREE)].astype(np.int64)
    return free_of, alloc_of, first_frees
