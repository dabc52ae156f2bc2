"""Communication: which kernels are collectives, what each collective moved, and how much of it compute hid.

A kernel is *communication* when

- its name belongs to a collective-library family: NCCL / RCCL / MSCCL / MSCCL++ (``nccl*``,
  ``ncclDevKernel_*``, ``ncclKernel_*``, ``rccl*``, ``msccl*``, ``mscclpp``), NVSHMEM (``nvshmem*``,
  ``nvshmemi_*``), or a known custom collective: DeepEP (``deep_ep::…``, ``…::ep::…dispatch/combine``),
  pplx (``pplx::…dispatch/combine``), vLLM's custom all-reduce (``cross_device_reduce*``) and quick
  reduce, torch symmetric memory (``multimem_all_reduce``, ``one_shot_all_reduce``, ``two_shot_all_reduce``);
- or its name says a collective (``all_reduce``, ``allgather``, ``reduce_scatter``, ``all_to_all`` …) and is
  not a copy / GEMM / Triton kernel merely named after one (FSDP's ``all_gather_copy_in``, Inductor's
  ``triton_poi_fused_all_gather_…``, a ``gemm_…_allreduce`` epilogue): those compute;
- or Kineto attached collective metadata (``Collective name``) to it;
- or it is launched *directly* by a collective CPU op (``record_param_comms``, ``c10d::*``,
  ``_c10d_functional::*``, ``nccl:*``, ``gloo:*``, ``symm_mem::*``: a custom backend's kernel whatever its
  name), unless its name is a plain copy / elementwise / GEMM kernel. Kernels launched by an ``aten::`` op
  nested *inside* a ``c10d::*`` op (copies into a flat buffer, casts) stay compute: the TensorBoard plugin
  counts them as communication, we do not.

Never communication: ``at::native::reduce_kernel`` (a reduction), ``cub::DeviceReduce*``, a GEMM named
``…splitk_reduce…`` — "reduce" alone does not make a collective.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np

from aiprof.arrays import isin, unique
from aiprof.analysis.comm_exposure import DeviceCommExposure, comm_exposure
from aiprof.analysis.steps import StepWindow
from aiprof.analysis import intervals as iv
from aiprof.trace import links
from aiprof.trace.model import Bool, Kind, Trace

# Searched, case-insensitive. Library prefixes must start a word (``void ncclKernel_…`` and
# ``ncclDevKernel_Generic`` match; ``foo_nccl_like`` would too, which is what we want). Always communication.
COMM_KERNEL_PATTERN = (
    r"(?i)(?<![a-z0-9])(nccl|rccl|msccl|nvshmem)"
    r"|all_?to_?all"
    r"|multimem_all_reduce|one_?shot_all_?reduce|two_?shot_all_?reduce|allreduce_fusion"
    r"|cross_device_reduce|quick_?reduce|quick_?all_?reduce"
    r"|deep_ep::|(?<![a-z0-9])ep::(\w+::)*\w*(dispatch|combine)"
    r"|pplx::(\w+::)*\w*(dispatch|combine)"
)
# A collective's name inside a kernel name: communication unless the kernel is one of _NOT_COLLECTIVE.
COLLECTIVE_WORD_PATTERN = r"(?i)all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|all2all"
# Kernels that compute or copy although a collective's name appears in them (or they were launched from a
# collective op): GEMMs with a fused epilogue, Triton/Inductor kernels named after the graph's ops, FSDP's
# copy-in/copy-out and chunk_cat, aten elementwise/copy/fill/cat/reduction kernels, cub/thrust.
_NOT_COLLECTIVE = re.compile(
    r"(?i)gemm|gemv|matmul|cutlass|cublas|xmma|triton_|copy_in|copy_out|chunk_cat|split_with_sizes"
    r"|elementwise|vectorized|copy|fill|cat_?array|unrolled|(?<![a-z0-9_])reduce_kernel|cub::|thrust::|memcpy|memset"
)
# CPU ops whose directly launched kernels are communication (see the module docstring).
_COMM_LAUNCH_OP = re.compile(
    r"^(record_param_comms$|c10d::|_c10d_functional::|c10d_functional::|nccl:|gloo:|symm_mem::)"
)


def comm_kernel_name(name: str) -> bool:
    """Whether a kernel of this name is communication by its name alone (see the module docstring)."""
    if re.search(COMM_KERNEL_PATTERN, name):
        return True
    head = name.split("(")[0]  # the signature's arguments say nothing about what the kernel does
    return bool(re.search(COLLECTIVE_WORD_PATTERN, head)) and not _NOT_COLLECTIVE.search(head)


def _comm_name_ids(trace: Trace) -> Bool:
    """For every string id, whether that name is a communication-kernel name (cached per trace)."""
    cached = trace.cache.get("comm.name_ids")
    if cached is None:
        cached = np.fromiter((comm_kernel_name(s) for s in trace.strings), dtype=bool, count=len(trace.strings))
        trace.cache["comm.name_ids"] = cached
    return cached


def _comm_launch_ids(trace: Trace) -> tuple[Bool, Bool]:
    """For every string id: whether it names a collective CPU op, and whether it names a kernel that is
    compute even when a collective op launched it (cached per trace)."""
    cached = trace.cache.get("comm.launch_ids")
    if cached is None:
        n = len(trace.strings)
        ops = np.fromiter((bool(_COMM_LAUNCH_OP.match(s)) for s in trace.strings), dtype=bool, count=n)
        compute = np.fromiter((bool(_NOT_COLLECTIVE.search(s.split("(")[0])) for s in trace.strings), dtype=bool, count=n)
        cached = (ops, compute)
        trace.cache["comm.launch_ids"] = cached
    return cached


def _launched_by_comm_op(trace: Trace, kernels: Bool) -> Bool:
    """Row mask: kernels whose issuing CPU op is itself a collective op (not an aten op nested in one) and
    whose name is not a plain copy / elementwise / GEMM kernel.

    Joined on ``External id`` (Kineto gives a launch, and its kernel, the id of the innermost op around it):
    vectorised, without the nesting tree. Kernels without one fall back to their launch call's."""
    c = trace.columns
    out = np.zeros(len(c), dtype=bool)
    op_ids, compute_ids = _comm_launch_ids(trace)
    if not op_ids.any() or not kernels.any():
        return out
    ops = trace.rows_of(Kind.CPU_OP)
    comm_ext = c.external_id[ops[op_ids[c.name[ops]]]]
    comm_ext = comm_ext[comm_ext >= 0]
    if comm_ext.size == 0:
        return out
    rows = np.flatnonzero(kernels & ~compute_ids[c.name])
    ext = c.external_id[rows].copy()
    missing = ext < 0
    if missing.any():
        launch = links.launcher(trace)[rows[missing]]
        ext[missing] = np.where(launch >= 0, c.external_id[np.maximum(launch, 0)], -1)
    out[rows[(ext >= 0) & isin(ext, comm_ext)]] = True
    return out


def is_comm_kernel(trace: Trace) -> Bool:
    """Row mask: True for kernel rows that are communication (collectives, send/recv, all-to-all).

    Vectorised: one regex test per distinct string, then a lookup per row; kernels that carry Kineto's
    collective metadata count too, whatever their name, and so do kernels a collective CPU op launched
    directly (unless they are plain copies / elementwise / GEMMs). Cached per trace.
    """
    cached = trace.cache.get("comm.kernel_mask")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    c = trace.columns
    mask = np.zeros(len(c), dtype=bool)
    kernels = c.kind == int(Kind.KERNEL)
    names = _comm_name_ids(trace)
    if names.size:
        mask[kernels] = names[c.name[kernels]]
    meta_rows = trace.comm_args_raw.rows
    if meta_rows.size:
        meta_rows = meta_rows[(meta_rows >= 0) & (meta_rows < len(c))]
        mask[meta_rows[kernels[meta_rows]]] = True
    mask |= _launched_by_comm_op(trace, kernels & ~mask)
    mask.flags.writeable = False  # shared by every caller through the cache
    trace.cache["comm.kernel_mask"] = mask
    return mask


# ---------------------------------------------------------------------------------------------------
# Collectives: what each communication kernel did
# ---------------------------------------------------------------------------------------------------
# Bytes per element of the dtype names PyTorch writes in ``dtype`` / ``Input type`` (``c10::`` stripped,
# case-insensitive).
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "f32": 4, "int": 4, "int32": 4, "uint32": 4, "complexhalf": 4,
    "double": 8, "float64": 8, "f64": 8, "long": 8, "int64": 8, "uint64": 8, "complexfloat": 8,
    "complexdouble": 16,
    "half": 2, "float16": 2, "f16": 2, "bfloat16": 2, "bf16": 2, "short": 2, "int16": 2, "uint16": 2,
    "char": 1, "byte": 1, "bool": 1, "int8": 1, "uint8": 1, "int8_t": 1, "uint8_t": 1, "i8": 1, "u8": 1,
    "long int": 8, "long long": 8, "unsigned char": 1, "signed char": 1, "unsigned int": 4,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "fp8": 1,
}

# NCCL-tests' bus-bandwidth factor: busbw = algbw × factor. "2" = 2(n-1)/n, "1" = (n-1)/n, "0" = 1.
_BUS_KIND = {
    "all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1,
    "broadcast": 0, "reduce": 0, "send": 0, "recv": 0, "send_recv": 0,
}

_CANONICAL = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallv": "all_to_all", "alltoallsingle": "all_to_all", "all2all": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "send": "send", "recv": "recv", "sendrecv": "send_recv",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter", "multimemallreduce": "all_reduce",
    "oneshotallreduce": "all_reduce", "twoshotallreduce": "all_reduce",
}
_SUFFIXES = ("_base", "_coalesced", "_into_tensor", "_tensor", "_single", "_")
_KERNEL_COLL = re.compile(
    r"(?i)(allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|alltoall|all_to_all|"
    r"sendrecv|broadcast|reduce|send|recv)"
)
_CPU_COMM_OP = re.compile(r"^(nccl:|gloo:|c10d::|symm_mem::|record_param_comms$)")
# NCCL's element type in kernel names. Byte kernels (int8_t/uint8_t: Broadcast, SendRecv) copy bytes
# whatever the tensor's dtype, so they are not a dtype and are left out.
_KERNEL_DTYPE = re.compile(r"(?i)_(bf16|f16|f32|f64|float|half|double|int32_t|int64_t|fp8)(?=_|$)")


def canonical_collective(name: str) -> str | None:
    """``allreduce``, ``_allgather_base``, ``nccl:all_to_all``, ``c10d::reduce_scatter_tensor_`` … →
    ``all_reduce``, ``all_gather``, ``all_to_all``, ``reduce_scatter``; None when not a collective."""
    text = name.lower().split(":")[-1].strip("_ ")
    for suffix in _SUFFIXES:
        if text.endswith(suffix) and len(text) > len(suffix):
            text = text[: -len(suffix)]
    for suffix in _SUFFIXES:
        if text.endswith(suffix) and len(text) > len(suffix):
            text = text[: -len(suffix)]
    return _CANONICAL.get(text.replace("_", ""))


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a PyTorch / NCCL dtype name (``Float``, ``c10::BFloat16``, ``f16``…)."""
    if not dtype:
        return None
    return DTYPE_BYTES.get(dtype.lower().replace("c10::", "").replace("torch.", "").strip())


def bus_factor(collective: str, group_size: int | None) -> float | None:
    """busbw / algbw for a collective of ``group_size`` ranks (NCCL-tests' PERFORMANCE.md conventions)."""
    kind = _BUS_KIND.get(collective)
    if kind is None or not group_size or group_size < 1:
        return None
    n = group_size
    return 1.0 if kind == 0 else kind * (n - 1) / n


class Collective(msgspec.Struct, frozen=True, kw_only=True):
    """One communication kernel and what it moved (a row of the report's ``communication.collectives``).
    ``*_source`` says where a value came from."""

    row: int
    device: int
    stream: int
    kernel_name: str
    collective: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send, recv, …
    collective_source: str  # "metadata", "cpu op", "kernel name", "unknown"
    start_ns: int
    dur_ns: int
    cpu_op: str | None  # the comm op above the launch (record_param_comms / c10d::* / nccl:*)
    process_group_name: str | None
    process_group_desc: str | None
    process_group_ranks: tuple[int, ...] | None
    group_size: int | None
    group_size_source: str  # "metadata", "process group ranks", "world size", "unknown"
    dtype: str | None
    in_nelems: int | None
    out_nelems: int | None
    message_bytes: int | None  # NCCL-tests' size: max(in, out) elements × dtype bytes
    algbw_gb_per_s: float | None  # message_bytes / dur (1 GB = 1e9 bytes)
    busbw_gb_per_s: float | None  # algbw × bus factor
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)  # Kineto's raw collective args on the kernel


class CommOverlap(msgspec.Struct, frozen=True, kw_only=True):
    """Communication vs compute on one device (ns; union of intervals, streams merged)."""

    device: int
    comm_ns: int  # union of communication kernels
    overlapped_ns: int  # part of comm_ns during which a compute (non-comm) kernel ran on the device
    exposed_ns: int  # comm_ns - overlapped_ns
    overlap_pct: float  # overlapped / comm (0 when no communication)


class CollectiveSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Collectives of one kind in one process group with one message size."""

    collective: str
    process_group_name: str | None
    group_size: int | None
    dtype: str | None
    message_bytes: int | None
    count: int
    total_ns: int
    mean_ns: float
    algbw_gb_per_s: float | None  # count × bytes / total time
    busbw_gb_per_s: float | None


class CommStats(msgspec.Struct, frozen=True, kw_only=True):
    """Every collective of a trace, their summary per kind / group / size, and the overlap per device."""

    collectives: tuple[Collective, ...]
    summary: tuple[CollectiveSummary, ...]
    overlap: tuple[CommOverlap, ...]


class CommunicationSection(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A rank's ``communication`` section in the report: its collectives (the longest ``4 × top`` of
    ``collective_count``), their summary per kind / group / size, the overlap per device over the whole trace,
    and exposed vs hidden communication per process group and phase inside the analysed steps
    (:mod:`aiprof.analysis.comm_exposure`; absent without communication kernels in the steps)."""

    collectives: list[Collective]  # longest first
    summary: list[CollectiveSummary]  # most time first
    overlap: list[CommOverlap]
    collective_count: int
    exposure: list[DeviceCommExposure] = msgspec.field(default_factory=list)


def comm_section(trace: Trace, windows: list[StepWindow], top: int) -> CommunicationSection:
    """The report's communication section of a rank whose analysed steps are ``windows``."""
    stats = comm_stats(trace)
    colls = stats.collectives
    return CommunicationSection(
        collectives=sorted(colls, key=lambda c: -c.dur_ns)[: 4 * top],
        summary=list(stats.summary),
        overlap=list(stats.overlap),
        collective_count=len(colls),
        exposure=comm_exposure(trace, windows, stats.collectives),
    )


def comm_stats(trace: Trace) -> CommStats:
    """Every communication kernel as a :class:`Collective`, a summary per kind/group/size, and the
    communication/compute overlap per device."""
    rows = np.flatnonzero(is_comm_kernel(trace))
    colls = tuple(_collective(trace, int(r)) for r in rows.tolist())
    return CommStats(collectives=colls, summary=_summarise(colls), overlap=comm_overlap(trace))


def comm_overlap(trace: Trace) -> tuple[CommOverlap, ...]:
    """Per device with communication: comm time, the part hidden under compute kernels, the exposed rest."""
    c = trace.columns
    comm = is_comm_kernel(trace)
    kernels = c.kind == int(Kind.KERNEL)
    out = []
    for dev in unique(c.device[comm]).tolist():
        on_dev = kernels & (c.device == dev)
        cm, cp = on_dev & comm, on_dev & ~comm
        comm_set = iv.merge(c.ts[cm], c.ts[cm] + c.dur[cm])
        compute_set = iv.merge(c.ts[cp], c.ts[cp] + c.dur[cp])
        comm_ns = iv.total(comm_set)
        hidden = iv.total(iv.intersect(comm_set, compute_set))
        out.append(
            CommOverlap(
                device=int(dev),
                comm_ns=comm_ns,
                overlapped_ns=hidden,
                exposed_ns=comm_ns - hidden,
                overlap_pct=100.0 * hidden / comm_ns if comm_ns else 0.0,
            )
        )
    return tuple(out)


def _collective(trace: Trace, row: int) -> Collective:
    c = trace.columns
    meta = trace.comm_args(row)
    op_row, op_name, op_meta, (op_nelems, op_dtype) = _comm_op(trace, row)
    if not meta and op_meta:
        meta = op_meta
    kname = trace.name_of(row)
    coll, source = _collective_name(meta, op_name, kname)
    dtype = _str(meta.get("dtype")) or op_dtype or _kernel_dtype(kname)
    in_n, out_n = _int(meta.get("In msg nelems")), _int(meta.get("Out msg nelems"))
    if in_n is None and out_n is None and op_nelems is not None:
        in_n = out_n = op_nelems
    ranks = _ranks(meta.get("Process Group Ranks"))
    size, size_source = _group_size(trace, meta, ranks)
    elem = dtype_bytes(dtype)
    nelems = max([n for n in (in_n, out_n) if n is not None], default=None)
    nbytes = nelems * elem if nelems is not None and elem is not None else None
    dur = int(c.dur[row])
    algbw = nbytes / dur if nbytes is not None and dur > 0 else None  # bytes/ns == GB/s
    factor = bus_factor(coll, size)
    return Collective(
        row=row,
        device=int(c.device[row]),
        stream=int(c.tid[row]),
        kernel_name=kname,
        collective=coll,
        collective_source=source,
        start_ns=int(c.ts[row]),
        dur_ns=dur,
        cpu_op=op_name,
        process_group_name=_str(meta.get("Process Group Name")),
        process_group_desc=_str(meta.get("Process Group Description")),
        process_group_ranks=ranks,
        group_size=size,
        group_size_source=size_source,
        dtype=dtype,
        in_nelems=in_n,
        out_nelems=out_n,
        message_bytes=nbytes,
        algbw_gb_per_s=algbw,
        busbw_gb_per_s=algbw * factor if algbw is not None and factor is not None else None,
        metadata=trace.comm_args(row),
    )


def _comm_op(
    trace: Trace, row: int
) -> tuple[int, str | None, dict[str, Any], tuple[int | None, str | None]]:
    """Walk up from the launching op: the nearest comm op's row, the most telling name on the way
    (``nccl:all_reduce`` beats ``c10d::allreduce_`` beats ``record_param_comms``), its metadata, and the
    element count and dtype of its first tensor input (legacy traces without ``In msg nelems``)."""
    par = links.parent(trace)
    cur = int(links.gpu_op(trace)[row])
    best_row: int = -1
    best_name: str | None = None
    meta: dict[str, Any] = {}
    dims: tuple[int | None, str | None] = (None, None)
    rank = {"nccl:": 3, "gloo:": 3, "c10d::": 2, "symm_mem::": 2}
    best_rank = 0
    for _ in range(32):
        if cur < 0:
            break
        name = trace.name_of(cur)
        if _CPU_COMM_OP.match(name):
            if name == "record_param_comms":
                meta = meta or trace.comm_args(cur)
                dims = dims if dims[0] is not None else _first_tensor(trace, cur)
                if best_row < 0:
                    best_row, best_name = cur, name
            else:
                r = max(v for k, v in rank.items() if name.startswith(k))
                if r > best_rank:
                    best_rank, best_row, best_name = r, cur, name
        cur = int(par[cur])
    return best_row, best_name, meta, dims


def _first_tensor(trace: Trace, row: int) -> tuple[int | None, str | None]:
    """Elements and dtype of a ``record_param_comms`` op's first input (``Input Dims`` / ``Input type``)."""
    inputs = trace.op_inputs(row)
    dims, types = inputs.dims, inputs.types
    dtype = str(types[0]) if types and dtype_bytes(str(types[0])) else None
    if not dims:
        return None, dtype
    first = dims[0]
    if isinstance(first, list) and first and isinstance(first[0], list):  # TensorList: [[4, 2048, 4096]]
        first = first[0]
    if not isinstance(first, list) or not first or not all(isinstance(d, int) for d in first):
        return None, dtype
    total = 1
    for d in first:
        total *= d
    return total, dtype


def _collective_name(meta: dict[str, Any], op_name: str | None, kernel: str) -> tuple[str, str]:
    named = canonical_collective(_str(meta.get("Collective name")) or "")
    if named:
        return named, "metadata"
    if op_name and op_name != "record_param_comms":
        named = canonical_collective(op_name)
        if named:
            return named, "cpu op"
    match = _KERNEL_COLL.search(kernel.split("(")[0])
    named = canonical_collective(match.group(1)) if match else None
    if named:
        return named, "kernel name"
    return "unknown", "unknown"


def _kernel_dtype(kernel: str) -> str | None:
    """The element type NCCL encodes in its kernel names (``_f16_``, ``_float``; SendRecv uses int8_t)."""
    match = _KERNEL_DTYPE.search(kernel.split("(")[0])
    return match.group(1) if match else None


def _group_size(trace: Trace, meta: dict[str, Any], ranks: tuple[int, ...] | None) -> tuple[int | None, str]:
    size = _int(meta.get("Group size"))
    if size:
        return size, "metadata"
    if ranks:
        return len(ranks), "process group ranks"
    world = _int(trace.distributed.get("world_size"))
    if world:
        return world, "world size"
    return None, "unknown"


def _ranks(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list):
        items = value
    elif isinstance(value, str):
        items = re.findall(r"-?\d+", value)
    else:
        return None
    try:
        ranks = tuple(int(v) for v in items)
    except (TypeError, ValueError):
        return None
    return ranks or None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdecimal():
        return int(value)
    return None


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) else None


def _summarise(colls: tuple[Collective, ...]) -> tuple[CollectiveSummary, ...]:
    groups: dict[tuple[Any, ...], list[Collective]] = {}
    for coll in colls:
        key = (coll.collective, coll.process_group_name, coll.group_size, coll.dtype, coll.message_bytes)
        groups.setdefault(key, []).append(coll)
    out = []
    for (name, pg, size, dtype, nbytes), items in groups.items():
        total = sum(i.dur_ns for i in items)
        algbw = len(items) * nbytes / total if nbytes is not None and total > 0 else None
        factor = bus_factor(name, size)
        out.append(
            CollectiveSummary(
                collective=name,
                process_group_name=pg,
                group_size=size,
                dtype=dtype,
                message_bytes=nbytes,
                count=len(items),
                total_ns=total,
                mean_ns=total / len(items),
                algbw_gb_per_s=algbw,
                busbw_gb_per_s=algbw * factor if algbw is not None and factor is not None else None,
            )
        )
    out.sort(key=lambda s: -s.total_ns)
    return tuple(out)
