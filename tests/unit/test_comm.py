"""Communication analysis on tiny hand-written Kineto traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

import aiprof
from aiprof.analysis.comm import is_comm_kernel
from aiprof.trace.model import Kind, Trace


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **args}}


def write(tmp_path: Path, events: list[dict[str, Any]], **top: Any) -> Trace:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, **top}))
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


def names_where(trace: Trace, mask: np.ndarray) -> set[str]:
    return {trace.name_of(int(r)) for r in np.flatnonzero(mask)}


def test_is_comm_kernel_recognises_library_and_custom_families(tmp_path: Path) -> None:
    comm = [
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        "void ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "ncclBroadcastRingLLKernel_copy_i8(ncclColl)",
        "rcclGenericKernel",
        "mscclKernel_Sum_float_LL",
        "void fbgemm_gpu::all_to_all_pooled_kernel<float>(float*)",
        "AllToAllKernel",
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
        "void vllm::cross_device_reduce_1stage<half, 8>(half*)",
    ]
    compute = [
        "volta_sgemm_128x64_nn",
        "void at::native::elementwise_kernel<128, 4>(int)",
        "void at::native::type_specialized_broadcast_kernel_launcher<1>()",
        "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)",
        "tunnel_kernel",
    ]
    events = [kernel(n, 10.0 * i, 5.0, i) for i, n in enumerate(comm + compute)]
    # A runtime call and a CPU op named like a collective are not kernels: never in the mask.
    events.append({"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": 1, "tid": 1, "ts": 0, "dur": 3})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "ncclLaunch", "pid": 1, "tid": 1, "ts": 1, "dur": 1})
    trace = write(tmp_path, events)
    mask = is_comm_kernel(trace)
    assert mask.shape == (len(trace),)
    assert names_where(trace, mask) == set(comm)
    assert not mask[trace.columns.kind != int(Kind.KERNEL)].any()


def test_is_comm_kernel_counts_kernels_with_collective_metadata(tmp_path: Path) -> None:
    events = [
        kernel("Kernel", 0.0, 5.0, 1, **{"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 4}),
        kernel("Kernel", 10.0, 5.0, 2),
    ]
    trace = write(tmp_path, events)
    mask = is_comm_kernel(trace)
    assert int(mask.sum()) == 1
    assert float(trace.columns.ts[np.flatnonzero(mask)[0]]) == 0.0


def test_is_comm_kernel_on_trace_without_kernels(tmp_path: Path) -> None:
    trace = write(tmp_path, [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 3}])
    assert not is_comm_kernel(trace).any()


# ----- collectives -------------------------------------------------------------------------------------
from aiprof.analysis.comm import bus_factor, canonical_collective, comm_overlap, comm_stats, dtype_bytes  # noqa: E402


def test_canonical_names_dtypes_and_bus_factors() -> None:
    assert canonical_collective("allreduce") == "all_reduce"
    assert canonical_collective("_allgather_base") == "all_gather"
    assert canonical_collective("nccl:all_to_all") == "all_to_all"
    assert canonical_collective("c10d::alltoall_base_") == "all_to_all"
    assert canonical_collective("c10d::reduce_scatter_tensor_") == "reduce_scatter"
    assert canonical_collective("aten::add") is None
    assert dtype_bytes("c10::BFloat16") == 2 and dtype_bytes("Float") == 4 and dtype_bytes("Long") == 8
    assert dtype_bytes("Half") == 2 and dtype_bytes("long int") == 8 and dtype_bytes("TensorList") is None
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert bus_factor("reduce_scatter", 2) == pytest.approx(1 / 2)
    assert bus_factor("all_to_all", 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0
    assert bus_factor("all_reduce", None) is None


def comm_trace(tmp_path: Path) -> Trace:
    """An all_reduce of 1,000,000 BFloat16 over 4 ranks taking 100 µs, with a compute kernel on another
    stream overlapping its first 40 µs; and an all_gather recognised only from the CPU op above it."""
    meta = {"Collective name": "allreduce", "dtype": "BFloat16", "In msg nelems": 1_000_000,
            "Out msg nelems": 1_000_000, "Group size": 4, "Process Group Name": "0",
            "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1, 2, 3]"}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"External id": 1, **meta}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 2,
         "args": {"correlation": 100, "External id": 1}},
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 100.0, 100.0, 100,
               stream=20, **meta),
        kernel("volta_sgemm_128x64_nn", 60.0, 80.0, 101, stream=7),
        {"ph": "X", "cat": "cpu_op", "name": "nccl:all_gather", "pid": 1, "tid": 1, "ts": 300, "dur": 20,
         "args": {"External id": 2}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 301, "dur": 10,
         "args": {"External id": 3, "Input Dims": [[1024]], "Input type": ["c10::Half"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 302, "dur": 2,
         "args": {"correlation": 102, "External id": 3}},
        kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 400.0, 10.0, 102, stream=20),
    ]
    return write(tmp_path, events, distributedInfo={"rank": 0, "world_size": 2})


def test_collective_from_metadata_bytes_and_bandwidths(tmp_path: Path) -> None:
    stats = comm_stats(comm_trace(tmp_path))
    assert len(stats.collectives) == 2
    ar = stats.collectives[0]
    assert (ar.collective, ar.collective_source) == ("all_reduce", "metadata")
    assert ar.process_group_ranks == (0, 1, 2, 3) and ar.group_size == 4 and ar.group_size_source == "metadata"
    assert ar.message_bytes == 2_000_000 and ar.dur_ns == 100_000
    assert ar.algbw_gb_per_s == pytest.approx(20.0)  # 2 MB in 100 µs
    assert ar.busbw_gb_per_s == pytest.approx(20.0 * 2 * 3 / 4)
    assert ar.cpu_op == "record_param_comms" and ar.metadata["Collective name"] == "allreduce"


def test_collective_from_cpu_op_and_legacy_input_dims(tmp_path: Path) -> None:
    ag = comm_stats(comm_trace(tmp_path)).collectives[1]
    assert (ag.collective, ag.collective_source, ag.cpu_op) == ("all_gather", "cpu op", "nccl:all_gather")
    assert ag.dtype == "c10::Half" and ag.in_nelems == 1024 and ag.message_bytes == 2048
    assert (ag.group_size, ag.group_size_source) == (2, "world size")
    assert ag.busbw_gb_per_s == pytest.approx(2048 / 10_000 * 1 / 2)


def test_overlap_with_compute_on_the_same_device(tmp_path: Path) -> None:
    (ov,) = comm_overlap(comm_trace(tmp_path))
    assert ov.comm_ns == 110_000
    assert ov.overlapped_ns == 40_000  # gemm [60,140) µs vs all_reduce [100,200) µs
    assert ov.exposed_ns == 70_000
    assert ov.overlap_pct == pytest.approx(100 * 40 / 110)


def test_summary_and_to_dict(tmp_path: Path) -> None:
    stats = comm_stats(comm_trace(tmp_path))
    assert sum(s.count for s in stats.summary) == 2
    out = json.loads(msgspec.json.encode(stats))  # as the report holds it
    json.dumps(out)
    assert out["collectives"][0]["process_group_ranks"] == [0, 1, 2, 3]
    empty = comm_stats(write(tmp_path, [kernel("gemm", 0.0, 1.0, 1)]))
    assert empty.collectives == () and empty.overlap == ()
