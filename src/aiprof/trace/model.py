"""The trace model: one rank's events as typed numpy columns, with interned strings.

Times are int64 nanoseconds on the trace's own clock (``unix_ns = base_time_ns + ts_ns`` when the trace
has ``baseTimeNanoseconds``). Every event is a row; ``kind`` says what it is (see :class:`Kind`). Columns
that do not apply to a row hold ``-1`` (ints) or NaN (floats).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aiprof.arrays import unique

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
F32 = npt.NDArray[np.float32]
Bool = npt.NDArray[np.bool_]


class Kind(enum.IntEnum):
    """What an event is. Device-side kinds are ``KERNEL`` .. ``GPU_OTHER``."""

    CPU_OP = 0  # cpu_op / legacy Operator (aten ops, autograd nodes)
    USER_ANNOTATION = 1  # record_function ranges, ProfilerStep#N, DataLoader __next__, Optimizer.step
    PYTHON = 2  # python_function (with_stack)
    RUNTIME = 3  # cuda_runtime / hip runtime / mtia_runtime: launches, syncs, mallocs
    DRIVER = 4  # cuda_driver (cuLaunchKernel from Triton)
    KERNEL = 5  # kernel (NVIDIA, AMD, MTIA ccp events)
    MEMCPY = 6  # gpu_memcpy
    MEMSET = 7  # gpu_memset
    GPU_ANNOTATION = 8  # gpu_user_annotation
    SYNC = 9  # cuda_sync (enable_cuda_sync_events)
    GPU_OTHER = 10  # other device-side spans (cuda_event, cuda_profiler_range)
    MEMORY = 11  # [memory] instant events (profile_memory)
    INSTANT = 12  # other instant events
    SPAN = 13  # profiler bookkeeping ("PyTorch Profiler (0)" Trace spans, overhead)
    OTHER = 14  # any other complete event on a CPU thread


DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.SYNC, Kind.GPU_OTHER)
GPU_WORK_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)

_CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "python_function": Kind.PYTHON,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "hip_driver": Kind.DRIVER,
    "xpu_driver": Kind.DRIVER,
    "privateuse1_driver": Kind.DRIVER,
    "kernel": Kind.KERNEL,
    "mtia_ccp_events": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "cuda_sync": Kind.SYNC,
    "cuda_event": Kind.GPU_OTHER,
    "cuda_profiler_range": Kind.GPU_OTHER,
    "trace": Kind.SPAN,
    "overhead": Kind.SPAN,
}


def kind_of_category(cat: str) -> Kind | None:
    """The kind of a complete (``X``) event's category, ignoring case; None when unknown."""
    return _CATEGORY_KIND.get(cat.lower())


class DeviceInfo(msgspec.Struct, frozen=True):
    """One accelerator as ``deviceProperties`` describes it (all fields optional in real traces); the report's
    ``ranks[].device_properties`` lists them."""

    index: int
    name: str = ""
    total_memory_bytes: int = 0
    num_sms: int = 0
    compute_capability: str = ""
    max_threads_per_sm: int = 0
    regs_per_sm: int = 0
    shared_mem_per_sm: int = 0
    warp_size: int = 32

    @staticmethod
    def from_properties(props: dict[str, Any], fallback_index: int) -> DeviceInfo:
        def num(key: str) -> int:
            value = props.get(key)
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

        index = props.get("id", fallback_index)
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        return DeviceInfo(
            index=int(index) if isinstance(index, int) else fallback_index,
            name=str(props.get("name", "")),
            total_memory_bytes=num("totalGlobalMem"),
            num_sms=num("numSms"),
            compute_capability=f"{major}.{minor}" if major is not None else "",
            max_threads_per_sm=num("maxThreadsPerMultiprocessor"),
            regs_per_sm=num("regsPerMultiprocessor"),
            shared_mem_per_sm=num("sharedMemPerMultiprocessor"),
            warp_size=num("warpSize") or 32,
        )


@dataclass
class Columns:
    """Event columns, all of one length. Built by the loader; never mutated afterwards."""

    kind: I8
    cat: I32  # index into Trace.strings
    name: I32  # index into Trace.strings
    ts: I64  # ns
    dur: I64  # ns (0 for instants)
    pid: I64  # CPU: OS pid; device events: device index
    tid: I64  # CPU: OS tid; device events: stream
    device: I32  # device index for device-side rows, -1 on the CPU
    correlation: I64
    external_id: I64
    seq: I64  # autograd sequence number
    fwd_tid: I64
    python_id: I64
    python_parent_id: I64
    nbytes: I64  # memcpy/memset bytes; [memory] event bytes (negative = free)
    grid: I64  # total blocks in the grid (x*y*z), -1 when unknown
    block: I64  # threads per block (x*y*z)
    grid_x: I32  # the grid's x, y, z (blocks; missing trailing ones 1), -1 when unknown
    grid_y: I32
    grid_z: I32
    block_x: I32  # the block's x, y, z (threads), -1 when unknown
    block_y: I32
    block_z: I32
    registers: I64
    shared_memory: I64
    blocks_per_sm: F32
    warps_per_sm: F32
    occupancy_pct: F32  # Kineto's "est. achieved occupancy %"
    total_allocated: I64  # [memory] events
    total_reserved: I64
    mem_device: I32  # [memory] events: -1 CPU, else the device index

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass
class Flows:
    """Flow events (``s``/``f``): launch→GPU (``ac2g``, legacy ``async``) and forward→backward (``fwdbwd``)."""

    flow_id: I64
    is_start: Bool
    is_fwdbwd: Bool
    pid: I64
    tid: I64
    ts: I64


@dataclass
class Trace:
    """One rank's trace. Build it with :func:`aiprof.load`; query it with the methods below."""

    path: Path
    rank: int
    rank_source: str  # "distributedInfo", "file name", "file order"
    columns: Columns
    strings: list[str]
    flows: Flows
    base_time_ns: int
    devices: list[DeviceInfo]
    distributed: dict[str, Any]
    metadata: dict[str, Any]  # top-level trace fields we understand (versions, flags); never env vars
    process_names: dict[int, str]
    thread_names: dict[tuple[int, int], str]
    op_args: ArgsStore = field(default_factory=lambda: ArgsStore.empty())  # cpu ops with shapes
    comm_args_raw: ArgsStore = field(default_factory=lambda: ArgsStore.empty())  # collectives
    stacks: dict[int, str] = field(default_factory=dict)  # row -> "Call stack" (verbose traces)
    warnings: list[str] = field(default_factory=list)
    event_count: int = 0  # events in the file, metadata and flows included
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # derived views

    # ----- basic facts -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.columns)

    def __repr__(self) -> str:
        return f"Trace(rank={self.rank}, events={len(self)}, path={str(self.path)!r})"

    def name_of(self, row: int) -> str:
        return self.strings[int(self.columns.name[row])]

    def string_id(self, text: str) -> int:
        """Index of ``text`` in the string table, or -1 when no event uses it."""
        return self._string_index.get(text, -1)

    @cached_property
    def _string_index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.strings)}

    @cached_property
    def names_array(self) -> npt.NDArray[np.object_]:
        """The string table as an object array, for vectorised name lookups."""
        return np.array(self.strings, dtype=object)

    def kind_mask(self, *kinds: Kind | int) -> Bool:
        """Row mask of the events of the given kinds (one table lookup per row, ~7x ``np.isin``'s time
        less; cached per set of kinds, read-only)."""
        key = "kind_mask:" + ",".join(str(k) for k in sorted({int(k) for k in kinds}))
        mask: Bool | None = self.cache.get(key)
        if mask is None:
            table = np.zeros(256, dtype=bool)
            table[[int(k) & 0xFF for k in kinds]] = True
            mask = table[self.columns.kind.view(np.uint8)]
            mask.flags.writeable = False
            self.cache[key] = mask
        return mask

    def rows_of(self, *kinds: Kind) -> I64:
        """Row indices of events of the given kinds, in time order (cached per set of kinds, read-only)."""
        key = "rows_of:" + ",".join(str(k) for k in sorted({int(k) for k in kinds}))
        rows: I64 | None = self.cache.get(key)
        if rows is None:
            rows = np.flatnonzero(self.kind_mask(*kinds)).astype(np.int64)
            rows = rows[np.argsort(self.columns.ts[rows], kind="stable")]
            rows.flags.writeable = False
            self.cache[key] = rows
        return rows

    def name_matches(self, rows: I64, pattern: str) -> Bool:
        """For each row, whether its name matches the regular expression ``pattern`` (searched)."""
        key = "name_matches:" + pattern
        hits: Bool | None = self.cache.get(key)
        if hits is None:
            regex = re.compile(pattern)
            hits = np.fromiter((bool(regex.search(s)) for s in self.strings), dtype=bool, count=len(self.strings))
            self.cache[key] = hits
        if not len(hits):
            return np.zeros(len(rows), dtype=bool)
        result: Bool = hits[self.columns.name[rows]]
        return result

    @property
    def has_device_activity(self) -> bool:
        return bool(len(self.rows_of(*GPU_WORK_KINDS)))

    @property
    def device_ids(self) -> list[int]:
        """Devices with kernels, copies or sets, in index order."""
        cached: list[int] | None = self.cache.get("device_ids")
        if cached is None:
            rows = self.rows_of(*GPU_WORK_KINDS)
            cached = sorted({int(d) for d in unique(self.columns.device[rows])})
            self.cache["device_ids"] = cached
        return list(cached)

    def device_info(self, index: int) -> DeviceInfo:
        """``deviceProperties`` of a device. ROCm traces number their one device differently on each side
        (GPU rows on pid 2, properties id 0): with one device on each side, they are the same device."""
        for dev in self.devices:
            if dev.index == index:
                return dev
        if len(self.devices) == 1 and self.device_ids == [index]:
            return msgspec.structs.replace(self.devices[0], index=index)
        return DeviceInfo(index=index)

    @property
    def time_range_ns(self) -> tuple[int, int]:
        """First start and last end over all spans (0, 0 for an empty trace)."""
        c = self.columns
        spans = c.kind != int(Kind.SPAN)
        if not spans.any():
            return (0, 0)
        return int(c.ts[spans].min()), int((c.ts[spans] + c.dur[spans]).max())

    # ----- typed views -------------------------------------------------------------------------
    def view(self, *kinds: Kind) -> EventView:
        """The events of the given kinds, in time order."""
        return EventView(self, self.rows_of(*kinds))

    def kernels(self) -> EventView:
        return self.view(Kind.KERNEL)

    def gpu_activities(self) -> EventView:
        """Kernels, copies and memsets."""
        return self.view(*GPU_WORK_KINDS)

    def ops(self) -> EventView:
        """CPU ops (aten ops and autograd nodes)."""
        return self.view(Kind.CPU_OP)

    def annotations(self) -> EventView:
        """``record_function`` ranges, ProfilerStep#N and DataLoader annotations on the CPU."""
        return self.view(Kind.USER_ANNOTATION)

    def runtime_calls(self) -> EventView:
        """CUDA/HIP runtime and driver calls (launches, copies, syncs, allocations)."""
        return self.view(Kind.RUNTIME, Kind.DRIVER)

    def python_functions(self) -> EventView:
        return self.view(Kind.PYTHON)

    def memory_events(self) -> EventView:
        """``[memory]`` allocation events (profile_memory)."""
        return self.view(Kind.MEMORY)

    def steps(self) -> EventView:
        """The ``ProfilerStep#N`` annotations."""
        ann = self.annotations()
        return ann.where_name(r"^ProfilerStep#\d+")

    # ----- typed args, decoded on demand ------------------------------------------------------
    def op_inputs(self, row: int) -> OpInputs:
        """Shapes, dtypes and concrete values recorded for an op with ``record_shapes``. Decoded once per
        distinct signature (ops with the same inputs share one, read-only, object)."""
        signature = self.op_args.signature(row)
        return self.signature_inputs(signature) if signature >= 0 else OpInputs()

    def op_signatures(self, rows: I64) -> I64:
        """For each row, the id of its recorded inputs, or -1 (vectorised). Calls with identical recorded
        inputs share one id, so per-op work can be done once per id: ``signature_inputs(id)``."""
        return self.op_args.signatures(rows)

    def signature_inputs(self, signature: int) -> OpInputs:
        """The decoded inputs of one signature id (see :meth:`op_signatures`), decoded once."""
        memo: dict[int, OpInputs] = self.cache.setdefault("op_inputs", {})
        found = memo.get(signature)
        if found is None:
            try:
                found = msgspec.json.decode(self.op_args.text(signature), type=OpInputs)
            except msgspec.MsgspecError:
                found = OpInputs()
            memo[signature] = found
        return found

    def comm_args(self, row: int) -> dict[str, Any]:
        """Collective metadata of a ``record_param_comms`` op or an NCCL/RCCL kernel ({} if none)."""
        raw = self.comm_args_raw.get(row)
        if raw is None:
            return {}
        try:
            value = msgspec.json.decode(raw)
        except msgspec.MsgspecError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class EventView:
    """Some rows of a trace (from a typed query such as ``trace.kernels()``), with column accessors."""

    trace: Trace
    rows: I64

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def names(self) -> list[str]:
        strings = self.trace.strings
        return [strings[i] for i in self.trace.columns.name[self.rows].tolist()]

    @property
    def ts_ns(self) -> I64:
        return self.trace.columns.ts[self.rows]

    @property
    def dur_ns(self) -> I64:
        return self.trace.columns.dur[self.rows]

    @property
    def end_ns(self) -> I64:
        return self.ts_ns + self.dur_ns

    def column(self, name: str) -> npt.NDArray[Any]:
        """Any column of :class:`Columns` for these rows (e.g. ``"device"``, ``"correlation"``)."""
        if name not in Columns.__dataclass_fields__:
            raise KeyError(f"no column {name!r}; columns: {', '.join(Columns.__dataclass_fields__)}")
        values: npt.NDArray[Any] = getattr(self.trace.columns, name)[self.rows]
        return values

    def where_name(self, pattern: str) -> EventView:
        """The rows whose name matches the regular expression (searched)."""
        return EventView(self.trace, self.rows[self.trace.name_matches(self.rows, pattern)])

    def on_device(self, device: int) -> EventView:
        return EventView(self.trace, self.rows[self.trace.columns.device[self.rows] == device])

    def records(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Plain dicts (name, kind, ts_ns, dur_ns, pid, tid, device, correlation, external_id)."""
        rows = self.rows if limit is None else self.rows[:limit]
        c = self.trace.columns
        return [
            {
                "row": r,
                "name": self.trace.strings[int(c.name[r])],
                "kind": Kind(int(c.kind[r])).name.lower(),
                "ts_ns": int(c.ts[r]),
                "dur_ns": int(c.dur[r]),
                "pid": int(c.pid[r]),
                "tid": int(c.tid[r]),
                "device": int(c.device[r]),
                "correlation": int(c.correlation[r]),
                "external_id": int(c.external_id[r]),
            }
            for r in rows.tolist()
        ]


@dataclass
class ArgsStore:
    """The raw JSON ``args`` of selected rows, packed in one buffer (no object per row kept around).

    Rows with byte-identical args share one stored text: ``keys[i]`` is the index of row ``rows[i]``'s
    text, and that index is the row's *signature* (the loader stores op inputs canonically, so two calls
    with the same recorded inputs have the same signature). Analyses work per signature, not per row."""

    rows: I64  # sorted rows that have args
    keys: I64  # per stored row: index of its distinct text
    starts: I64  # per distinct text: its slice of ``data``
    ends: I64
    data: bytes

    @staticmethod
    def empty() -> ArgsStore:
        none = np.zeros(0, dtype=np.int64)
        return ArgsStore(none, none, none, none, b"")

    @staticmethod
    def build(rows: list[int], chunks: list[bytes]) -> ArgsStore:
        order = np.argsort(np.asarray(rows, dtype=np.int64), kind="stable")
        sorted_rows = np.asarray(rows, dtype=np.int64)[order]
        table: dict[bytes, int] = {}
        add = table.setdefault
        keys = np.fromiter((add(chunks[i], len(table)) for i in order.tolist()), dtype=np.int64, count=len(chunks))
        unique = list(table)
        lengths = np.fromiter(map(len, unique), dtype=np.int64, count=len(unique))
        ends = np.cumsum(lengths)
        return ArgsStore(sorted_rows, keys, ends - lengths, ends, b"".join(unique))

    @staticmethod
    def from_keys(rows: I64, keys: I64, texts: list[bytes]) -> ArgsStore:
        """From rows (any order), each row's index into ``texts``, and the distinct texts."""
        order = np.argsort(rows, kind="stable")
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        ends = np.cumsum(lengths)
        return ArgsStore(rows[order], keys[order], ends - lengths, ends, b"".join(texts))

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __contains__(self, row: int) -> bool:
        return self.get(row) is not None

    @property
    def distinct(self) -> int:
        """How many distinct texts (signatures) the store holds."""
        return int(self.starts.shape[0])

    def positions(self, rows: I64) -> I64:
        """For each row, its index in the store, or -1 (vectorised)."""
        if not len(self.rows):
            return np.full(np.shape(rows), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
        return np.where(self.rows[pos] == rows, pos, -1).astype(np.int64)

    def signatures(self, rows: I64) -> I64:
        """For each row, the index of its distinct args text (its signature), or -1 (vectorised)."""
        pos = self.positions(rows)
        if not len(self.rows):
            return pos
        return np.where(pos >= 0, self.keys[np.maximum(pos, 0)], -1)

    def text(self, signature: int) -> bytes:
        """The stored args text of one signature."""
        return self.data[self._starts[signature] : self._ends[signature]]

    def signature(self, row: int) -> int:
        """One row's signature (the index of its distinct args text), or -1."""
        index = self._index
        return index[row] if 0 <= row < len(index) else -1

    def get(self, row: int) -> bytes | None:
        k = self.signature(row)
        return None if k < 0 else self.data[self._starts[k] : self._ends[k]]

    @cached_property
    def _index(self) -> list[int]:
        """row → signature, dense (one list lookup per ``get`` instead of a binary search)."""
        size = int(self.rows.max()) + 1 if len(self.rows) else 0
        dense = np.full(size, -1, dtype=np.int64)
        dense[self.rows] = self.keys
        return dense.tolist()

    @cached_property
    def _starts(self) -> list[int]:
        return self.starts.tolist()  # type: ignore[no-any-return]

    @cached_property
    def _ends(self) -> list[int]:
        return self.ends.tolist()  # type: ignore[no-any-return]


class OpInputs(msgspec.Struct):
    """What ``record_shapes`` recorded for one op call. ``dims[i]`` is the shape of input ``i``."""

    dims_new: list[Any] | None = msgspec.field(name="Input Dims", default=None)
    dims_legacy: list[Any] | None = msgspec.field(name="Input dims", default=None)
    types: list[Any] = msgspec.field(name="Input type", default_factory=list)
    concrete: list[Any] = msgspec.field(name="Concrete Inputs", default_factory=list)
    strides: list[Any] = msgspec.field(name="Input Strides", default_factory=list)

    @property
    def dims(self) -> list[Any]:
        """Input shapes (``Input Dims``, or legacy ``Input dims``)."""
        if self.dims_new is not None:
            return self.dims_new
        return self.dims_legacy if self.dims_legacy is not None else []


@dataclass
class RunSet:
    """Several ranks (one trace each), in rank order. ``load`` returns one for a folder or several files."""

    traces: list[Trace]
    root: Path | None = None
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.traces)

    def __iter__(self) -> Any:
        return iter(self.traces)

    @property
    def ranks(self) -> list[int]:
        return [t.rank for t in self.traces]

    def rank(self, rank: int) -> Trace:
        for trace in self.traces:
            if trace.rank == rank:
                return trace
        raise KeyError(rank)
