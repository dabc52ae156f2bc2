"""Communication and CUDA-graph classes: a graph capture (alone, and followed by replays), collectives that are
not ``nccl*`` (DeepEP all-to-all, vLLM custom all-reduce), gloo on CPU, a 2-rank straggler, and a GEMM whose
name says "reduce" but which computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import Case, case
from kineto_builder import TraceBuilder

H100 = "NVIDIA H100 80GB HBM3"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"


# ----- graph capture ------------------------------------------------------------------------------------
def _capture_phase(b: TraceBuilder, t0: float, sizes: int, layers: int = 40) -> float:
    """vLLM-style start-up: per batch size, one eager warm-up pass (real kernels), then the same pass under
    stream capture (launch calls recorded into the graph: no GPU activity), then instantiation. Returns the
    end time (µs)."""
    t = t0
    for _ in range(sizes):
        for j in range(layers // 4):  # warm-up: a few real kernels
            op = b.cpu_op("aten::mm", ts=t, dur=20)
            b.launch(op, kernel=GEMM, kernel_ts=t + 10, kernel_dur=8, grid=(132, 1, 1))
            t += 25
        b.runtime("cudaStreamBeginCapture", ts=t, dur=5)
        t += 10
        for j in range(layers):  # captured: the host records launches, the device runs nothing
            b.cpu_op("aten::mm", ts=t, dur=60)
            b.runtime("cudaLaunchKernel", ts=t + 20, dur=30)
            t += 70
        b.runtime("cudaStreamEndCapture", ts=t, dur=10)
        b.runtime("cudaGraphInstantiateWithFlags", ts=t + 15, dur=400)
        t += 430
    return t


def _capture_only(tmp: Path) -> Path:
    """A vLLM engine's start-up profiled: 8 batch sizes captured, no replay, no ProfilerStep."""
    b = TraceBuilder(device_name=H100)
    _capture_phase(b, 0, sizes=8)
    return b.write(tmp / "capture_only.json")


def _capture_then_replays(tmp: Path) -> Path:
    """The capture phase (about 40 % of the trace), then decode steps replaying the graphs with the GPU busy
    (graph-node tracing on: each replayed kernel is in the trace, attributed to its cudaGraphLaunch)."""
    b = TraceBuilder(device_name=H100)
    t = _capture_phase(b, 0, sizes=2)
    t += 50
    end = t + 1.5 * t
    while t < end:
        corr = 900_000 + int(t)
        b.runtime("cudaGraphLaunch", ts=t, dur=15, correlation=corr)
        for j in range(10):
            b.kernel(GEMM, ts=t + 20 + j * 40, dur=39, correlation=corr, grid=(132, 1, 1))
        t += 420
    return b.write(tmp / "capture_replays.json")


def hip_capture_trace(tmp: Path) -> Path:
    """A ROCm capture phase (issue #22, class 5): three eager kernels, then six captures of 60 launches each
    (recorded, not run), each with a 3 ms ``hipFree`` inside the capture and a ``hipGraphInstantiate``. The
    device runs 24 µs of a 46 ms trace; every late launch is captured, none was lost."""
    b = TraceBuilder(device_name="AMD Instinct MI300X")
    t = 0.0
    for _ in range(3):
        op = b.cpu_op("aten::mm", ts=t, dur=20)
        b.launch(op, kernel="Cijk_Ailk_Bljk_BBS_BH", kernel_ts=t + 10, kernel_dur=8, api="hipLaunchKernel")
        t += 25
    for _ in range(6):
        b.runtime("hipStreamBeginCapture", ts=t, dur=5)
        t += 10
        for _ in range(60):
            b.cpu_op("aten::mm", ts=t, dur=60)
            b.runtime("hipLaunchKernel", ts=t + 20, dur=30)
            t += 70
        b.runtime("hipFree", ts=t, dur=3000)
        t += 3010
        b.runtime("hipStreamEndCapture", ts=t, dur=10)
        b.runtime("hipGraphInstantiateWithFlags", ts=t + 15, dur=400)
        t += 430
    return b.write(tmp / "hip_capture.json")


def _check_capture_trace(run: Any, findings: list[dict[str, Any]]) -> None:
    rank = run.ranks[0]
    assert not rank.partial and rank.coverage.clipped_ns == 0, rank.coverage  # never salvaged, never cut
    assert rank.windows[0].end_ns - rank.windows[0].start_ns > 40_000_000  # the whole 46 ms, not 1 ms
    assert rank.sections["graph_capture"].capture_trace is True
    assert rank.sections["graph_capture"].captured_launches == 360
    assert [f["id"] for f in findings] == ["graph_capture"], findings
    assert findings[0]["evidence"]["capture_trace"] is True


def _check_capture_only(run: Any, findings: list[dict[str, Any]]) -> None:
    f = next(f for f in findings if f["id"] == "graph_capture")
    assert f["title"].startswith("The trace is a CUDA graph capture"), f["title"]
    assert f["evidence"]["captures"] == 8 and f["evidence"]["steady_state"] is False
    assert f["est_saving_ns_per_step"] == 0 and f["severity"] == "info"
    assert run.ranks[0].sections["graph_capture"].capture_trace is True


def _check_partial_capture(run: Any, findings: list[dict[str, Any]]) -> None:
    f = next(f for f in findings if f["id"] == "graph_capture")
    assert f["evidence"]["steady_state"] is True
    assert 0.2 < f["evidence"]["capture_share_of_trace"] < 0.6, f["evidence"]
    assert "of the trace is CUDA graph capture" in f["title"]
    assert run.ranks[0].sections["graph_capture"].capture_trace is False  # the replays are steady state


# ----- collectives that are not nccl* ---------------------------------------------------------------------
def _deepep_rank(tmp: Path, rank: int) -> Path:
    """An MoE layer with expert parallelism: attention/expert GEMMs, and DeepEP dispatch/combine all-to-all
    kernels with nothing to overlap them (≈ 40 % of the step)."""
    b = TraceBuilder(device_name=H100)
    b.distributed(rank=rank, world_size=2)
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 2, dur=8)
        b.launch(op, kernel=GEMM, kernel_ts=t0 + 10, kernel_dur=300, grid=(132, 1, 1))
        d = b.cpu_op("deep_ep::Buffer::intranode_dispatch", ts=t0 + 12, dur=8)
        b.launch(d, kernel="void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
                 kernel_ts=t0 + 310, kernel_dur=200, stream=20, grid=(24, 1, 1))
        e = b.cpu_op("aten::mm", ts=t0 + 22, dur=8)
        b.launch(e, kernel=GEMM, kernel_ts=t0 + 510, kernel_dur=280, grid=(132, 1, 1))
        c = b.cpu_op("deep_ep::Buffer::intranode_combine", ts=t0 + 32, dur=8)
        b.launch(c, kernel="void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(nv_bfloat16*, float*)",
                 kernel_ts=t0 + 790, kernel_dur=200, stream=20, grid=(24, 1, 1))
    return b.write(tmp / f"rank{rank}.json")


def _deepep(tmp: Path) -> Path:
    folder = tmp / "deepep"
    folder.mkdir()
    for r in range(2):
        _deepep_rank(folder, r)
    return folder


def _vllm_custom_allreduce(tmp: Path) -> Path:
    """Rank 0 of a TP=2 vLLM decode: GEMMs, then vLLM's custom all-reduce (no NCCL) after each layer,
    exposed (≈ 30 % of the step)."""
    b = TraceBuilder(device_name=H100)
    b.distributed(rank=0, world_size=2)
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        for j in range(2):
            base = t0 + j * 500
            op = b.cpu_op("aten::mm", ts=base + 2, dur=8)
            b.launch(op, kernel=GEMM, kernel_ts=base + 10, kernel_dur=330, grid=(132, 1, 1))
            ar = b.cpu_op("_C_custom_ar::all_reduce", ts=base + 12, dur=8)
            b.launch(ar, kernel="void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, "
                     "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
                     kernel_ts=base + 340, kernel_dur=150, grid=(36, 1, 1))
    return b.write(tmp / "vllm_tp2_rank0.json")


def _gloo_cpu(tmp: Path) -> Path:
    """A CPU-only DDP run on gloo: 2 ms of forward/backward ops, then the main thread waits while a gloo
    thread all-reduces the gradients for 8 ms (80 % of the step)."""
    b = TraceBuilder()
    b.distributed(rank=0, world_size=2, backend="gloo")
    for i in range(5):
        t0 = i * 10_000
        b.step(i, ts=t0, dur=10_000)
        for j in range(10):
            b.cpu_op("aten::mm", ts=t0 + 10 + j * 195, dur=190)
        b.cpu_op("c10d::allreduce_", ts=t0 + 1_960, dur=30)
        b.annotation("gloo:all_reduce", ts=t0 + 1_990, dur=7_990, tid=77)
    return b.write(tmp / "gloo.json")


def _check_gloo(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["share_of_step"] >= 0.75, f["share_of_step"]
    assert "no_sync" in f["fix"] and "async_op=True" in f["fix"], f["fix"]
    assert "NVLink" not in f["fix"] and "NCCL" not in f["fix"] and "FSDP" not in f["fix"]
    # overlap alone can hide the all-reduce only under the 2 ms of compute there is
    assert f["evidence"]["hideable_by_overlap_ns_per_step"] <= 2_000_000 < f["est_saving_ns_per_step"]


# ----- straggler -----------------------------------------------------------------------------------------
def straggler_rank(folder: Path, rank: int, world: int, work_us: float, slowest_us: float) -> Path:
    """One rank: ``work_us`` of GEMM, then an all-reduce of 50 µs that starts when the slowest rank joins
    (``slowest_us``): a fast rank waits in it, the slowest one does not."""
    b = TraceBuilder(device_name=H100)
    b.distributed(rank=rank, world_size=world)
    step_us = slowest_us + 70
    for i in range(4):
        t0 = i * step_us
        b.step(i, ts=t0, dur=step_us)
        op = b.cpu_op("aten::mm", ts=t0 + 5, dur=5)
        b.launch(op, kernel=GEMM, kernel_ts=t0 + 10, kernel_dur=work_us, grid=(132, 1, 1))
        c = b.cpu_op("c10d::allreduce_", ts=t0 + 12, dur=5)
        b.launch(c, kernel="ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                 kernel_ts=t0 + 10 + work_us, kernel_dur=slowest_us - work_us + 50, stream=9)
    return b.write(folder / f"rank{rank}.json")


def straggler_run(tmp: Path, works: list[float]) -> Path:
    folder = tmp / f"straggler{len(works)}"
    folder.mkdir()
    for r, w in enumerate(works):
        straggler_rank(folder, r, len(works), w, max(works))
    return folder


def _straggler_2(tmp: Path) -> Path:
    return straggler_run(tmp, [400.0, 700.0])


def _check_straggler_2(run: Any, findings: list[dict[str, Any]]) -> None:
    f = next(f for f in findings if f["id"] == "straggler")
    assert f["evidence"]["straggler_rank"] == 1 and f["evidence"]["waiting_ranks"] == [0]
    assert f["est_saving_ns_per_step"] == 300_000  # the full difference, not half of it


# ----- a GEMM named "reduce" -------------------------------------------------------------------------------
def _gemm_named_reduce(tmp: Path) -> Path:
    """A split-K GEMM and its cuBLAS reduction kernel, plus an aten row reduction, back to back on rank 0 of
    2: compute (the names say "reduce", none is a collective)."""
    b = TraceBuilder(device_name=H100)
    b.distributed(rank=0, world_size=2)
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 2, dur=8)
        b.launch(op, kernel="cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8_splitk_reduce",
                 kernel_ts=t0 + 8, kernel_dur=600, grid=(132, 1, 1))
        b.launch(op, kernel="void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(cublasSplitKParams<float>)",
                 ts=t0 + 5, kernel_ts=t0 + 608, kernel_dur=200, grid=(132, 1, 1))
        s = b.cpu_op("aten::sum", ts=t0 + 12, dur=8)
        b.launch(s, kernel="void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(at::native::ReduceOp<float>)",
                 kernel_ts=t0 + 808, kernel_dur=190, grid=(132, 1, 1))
    return b.write(tmp / "gemm_reduce.json")


CASES: list[Case] = [
    case("graph_capture_only", _capture_only, None,
         "a vLLM start-up: eager warm-up, then every batch size captured into a CUDA graph; the device runs "
         "almost nothing while the host records launches. That is what the trace is, not a host-bound run",
         present={"graph_capture"}, absent={"host_bound", "launch_bound", "sync", "data_loading"},
         check=_check_capture_only),
    case("hip_graph_capture_trace", hip_capture_trace, None,
         "a ROCm capture phase with hipFree inside each capture: a kind of trace, not a truncated one (never "
         "partial, never cut), and hipFree inside a capture is no sync to remove",
         present={"graph_capture"}, absent={"sync", "host_bound", "launch_bound", "host_stall"},
         check=_check_capture_trace),
    case("graph_capture_then_replays", _capture_then_replays, None,
         "the capture phase is a one-time cost; the replays after it keep the GPU busy: nothing to fix in the "
         "steady state, and the capture's host time is not host-bound",
         present={"graph_capture"}, absent={"host_bound", "launch_bound"}, check=_check_partial_capture),
    case("deepep_dispatch_combine_exposed", _deepep, "exposed_communication",
         "DeepEP's dispatch/combine are all-to-all communication (not nccl*), 40 % of the step with no compute "
         "under them", absent={"straggler"}),
    case("vllm_custom_allreduce_exposed", _vllm_custom_allreduce, "exposed_communication",
         "vLLM's cross_device_reduce is an all-reduce over NVLink (IPC buffers, no NCCL): 30 % of the step "
         "waits for it"),
    case("gloo_cpu_allreduce_wait", _gloo_cpu, "exposed_communication",
         "a CPU-only gloo run: 80 % of each step is the all-reduce with no CPU op computing meanwhile; the fix "
         "is gloo's (overlap, fewer larger all-reduces, no_sync), not NCCL's",
         absent={"host_bound", "sync"}, check=_check_gloo),
    case("straggler_two_ranks", _straggler_2, "straggler",
         "rank 1 works 300 µs longer per step and rank 0 waits for it in the all-reduce: removing the stall "
         "saves the full 300 µs (the median of two ranks would promise half)",
         check=_check_straggler_2),
    case("gemm_named_reduce_is_compute", _gemm_named_reduce, None,
         "a split-K GEMM, cuBLAS's splitKreduce and aten's reduce_kernel keep the GPU busy; \"reduce\" in a "
         "kernel name is not a collective",
         absent={"exposed_communication", "comm_bandwidth"}),
]
