"""Communication analysis on tiny hand-written Kineto traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

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
