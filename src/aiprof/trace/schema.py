"""Typed shapes of Kineto / Chrome-trace JSON, decoded with msgspec straight into structs.

The event struct keeps ``args`` as undecoded JSON (``msgspec.Raw``, a zero-copy view): each kind's args are
decoded later in one batch with a struct that names only the keys we use, so no dict per event is built.
Legacy (2020-21) spellings are separate fields and merged when columns are built.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import field

Number = int | float
NO_ARGS = msgspec.Raw(b"null")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    id: int | str | None = None
    bp: str = ""
    s: str = ""
    args: msgspec.Raw = NO_ARGS


class TraceFile(msgspec.Struct):
    """Top level of a trace file. Unknown keys (``metadata``, ``traceName``, ...) are skipped."""

    traceEvents: list[Event] = []
    schemaVersion: int | str | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    computeProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: int | None = None
    displayTimeUnit: str | None = None
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    record_shapes: int | None = None
    profile_memory: int | None = None
    with_stack: int | None = None
    with_flops: int | None = None
    trace_id: str | None = None


class OpArgs(msgspec.Struct, gc=False):
    """Args of CPU-side spans: cpu_op, user_annotation, runtime, driver, python_function."""

    external_id: int | None = field(name="External id", default=None)
    external_id_legacy: int | None = field(name="external id", default=None)
    correlation: int | None = None
    seq: int | None = field(name="Sequence number", default=None)
    fwd_tid: int | None = field(name="Fwd thread id", default=None)
    python_id: int | None = field(name="Python id", default=None)
    python_parent_id: int | None = field(name="Python parent id", default=None)
    python_module_id: int | None = field(name="Python module id", default=None)
    call_stack: str | None = field(name="Call stack", default=None)
    collective_name: str | None = field(name="Collective name", default=None)


class GpuArgs(msgspec.Struct, gc=False):
    """Args of device activities: kernel, memcpy, memset, gpu_user_annotation, cuda_sync."""

    external_id: int | None = field(name="External id", default=None)
    external_id_legacy: int | None = field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    bytes: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = field(name="registers per thread", default=None)
    shared_memory: int | None = field(name="shared memory", default=None)
    blocks_per_sm: Number | None = field(name="blocks per SM", default=None)
    warps_per_sm: Number | None = field(name="warps per SM", default=None)
    occupancy: Number | None = field(name="est. achieved occupancy %", default=None)
    graph_id: int | None = field(name="graph id", default=None)
    collective_name: str | None = field(name="Collective name", default=None)


class MemoryArgs(msgspec.Struct, gc=False):
    """Args of ``[memory]`` instant events (profile_memory)."""

    addr: int | None = field(name="Addr", default=None)
    nbytes: int | None = field(name="Bytes", default=None)
    total_allocated: int | None = field(name="Total Allocated", default=None)
    total_reserved: int | None = field(name="Total Reserved", default=None)
    device_type: int | None = field(name="Device Type", default=None)
    device_id: int | None = field(name="Device Id", default=None)


class MetaArgs(msgspec.Struct, gc=False):
    """Args of ``M`` metadata events (process_name, thread_name, process_labels, *_sort_index)."""

    name: str | None = None
    labels: str | None = None
    sort_index: int | None = None


class CommArgs(msgspec.Struct):
    """Collective metadata on ``record_param_comms`` CPU ops and NCCL/RCCL kernels (torch >= 2.1)."""

    collective_name: str | None = field(name="Collective name", default=None)
    dtype: str | None = None
    in_nelems: int | None = field(name="In msg nelems", default=None)
    out_nelems: int | None = field(name="Out msg nelems", default=None)
    group_size: int | None = field(name="Group size", default=None)
    pg_name: str | None = field(name="Process Group Name", default=None)
    pg_desc: str | None = field(name="Process Group Description", default=None)
    pg_ranks: Any = field(name="Process Group Ranks", default=None)
    seq: int | None = field(name="Seq", default=None)
    algorithm: str | None = field(name="algorithm", default=None)
    protocol: str | None = field(name="protocol", default=None)
    channels: int | None = field(name="channels", default=None)
