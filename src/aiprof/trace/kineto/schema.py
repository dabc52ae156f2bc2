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
NO_ARGS = msgspec.Raw(b"{}")  # missing args decode like an empty object: every field at its default
NAN = float("nan")
ABSENT = msgspec.Raw(b"")  # a header field that is not in the file


class Event(msgspec.Struct, gc=False):
    """One trace event, slim: ``args`` stays undecoded (a view into the chunk being decoded)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = NAN  # a span without a time is dropped, never placed at 0
    dur: float = 0.0
    id: int | str | None = None
    args: msgspec.Raw = NO_ARGS


class Header(msgspec.Struct):
    """Top level of a trace file, each field undecoded (``ABSENT`` when missing) so one bad field costs
    only itself."""

    traceEvents: list[msgspec.Raw] | None = None
    schemaVersion: msgspec.Raw = ABSENT
    deviceProperties: msgspec.Raw = ABSENT
    computeProperties: msgspec.Raw = ABSENT
    distributedInfo: msgspec.Raw = ABSENT
    baseTimeNanoseconds: msgspec.Raw = ABSENT
    displayTimeUnit: msgspec.Raw = ABSENT
    cuda_driver_version: msgspec.Raw = ABSENT
    cuda_runtime_version: msgspec.Raw = ABSENT
    hip_runtime_version: msgspec.Raw = ABSENT
    record_shapes: msgspec.Raw = ABSENT
    profile_memory: msgspec.Raw = ABSENT
    with_stack: msgspec.Raw = ABSENT
    with_flops: msgspec.Raw = ABSENT
    trace_id: msgspec.Raw = ABSENT
    host_name: msgspec.Raw = ABSENT


class TraceFile(msgspec.Struct):
    """The header fields we use, typed (decoded one by one from :class:`Header`)."""

    schemaVersion: int | str | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    computeProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: int | None = None
    displayTimeUnit: str | None = None
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    hip_runtime_version: int | str | None = None
    record_shapes: int | None = None
    profile_memory: int | None = None
    with_stack: int | None = None
    with_flops: int | None = None
    trace_id: str | None = None
    host_name: str | None = None  # which machine: profiler cycles of one process share it (trace.cycles)


# Args structs: ints default to -1 and floats to NaN (the column fill values), so columns are built
# straight from attribute lists. A wrong-typed value fails the batch; that row is then decoded key by key.
class ShapeArgs(msgspec.Struct, gc=False, omit_defaults=True):
    """The record_shapes part of a cpu_op's args, kept undecoded (zero-copy) to re-pack canonically."""

    dims: msgspec.Raw = field(name="Input Dims", default=ABSENT)
    dims_legacy: msgspec.Raw = field(name="Input dims", default=ABSENT)
    types: msgspec.Raw = field(name="Input type", default=ABSENT)
    concrete: msgspec.Raw = field(name="Concrete Inputs", default=ABSENT)
    strides: msgspec.Raw = field(name="Input Strides", default=ABSENT)


class OpArgs(msgspec.Struct, gc=False):
    """Args of CPU-side spans: cpu_op, user_annotation, runtime, driver, python_function."""

    external_id: int = field(name="External id", default=-1)
    external_id_legacy: int = field(name="external id", default=-1)
    correlation: int = -1
    seq: int = field(name="Sequence number", default=-1)
    fwd_tid: int = field(name="Fwd thread id", default=-1)
    python_id: int = field(name="Python id", default=-1)
    python_parent_id: int = field(name="Python parent id", default=-1)
    python_module_id: int = field(name="Python module id", default=-1)
    call_stack: str | None = field(name="Call stack", default=None)
    collective_name: str | None = field(name="Collective name", default=None)
    input_dims: msgspec.Raw = field(name="Input Dims", default=ABSENT)
    input_dims_legacy: msgspec.Raw = field(name="Input dims", default=ABSENT)


class GpuArgs(msgspec.Struct, gc=False):
    """Args of device activities: kernel, memcpy, memset, gpu_user_annotation, cuda_sync."""

    external_id: int = field(name="External id", default=-1)
    external_id_legacy: int = field(name="external id", default=-1)
    correlation: int = -1
    device: int = -1
    stream: int = -1
    bytes: int = -1
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int = field(name="registers per thread", default=-1)
    shared_memory: int = field(name="shared memory", default=-1)
    blocks_per_sm: float = field(name="blocks per SM", default=NAN)
    warps_per_sm: float = field(name="warps per SM", default=NAN)
    occupancy: float = field(name="est. achieved occupancy %", default=NAN)
    collective_name: str | None = field(name="Collective name", default=None)


class MemoryArgs(msgspec.Struct, gc=False):
    """Args of ``[memory]`` instant events (profile_memory)."""

    addr: int = field(name="Addr", default=-1)
    nbytes: int = field(name="Bytes", default=-1)
    total_allocated: int = field(name="Total Allocated", default=-1)
    total_reserved: int = field(name="Total Reserved", default=-1)
    device_type: int = field(name="Device Type", default=-1)
    device_id: int = field(name="Device Id", default=-1)


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
