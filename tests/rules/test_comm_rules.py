"""Communication and graph-capture rules on synthetic traces: collectives that are not ``nccl*`` (by name and
by the op that launched them), gloo on CPU, the straggler measured against the ranks that wait (2, 3 and 8
ranks), and graph capture kept out of the steady-state idle rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aiprof
from aiprof.analysis.comm import comm_kernel_name, is_comm_kernel
from aiprof.analysis.timeline import account
from aiprof.pipeline import analyze_and_diagnose
from aiprof.rules.comm import waiting_ranks
from aiprof.trace.model import Trace
from corpus import cases_comm as cc
from kineto_builder import TraceBuilder

US = 1000


def _ids(path: Path) -> tuple[Any, list[dict[str, Any]], list[str]]:
    run, findings = analyze_and_diagnose([path], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    return run, findings, [f["id"] for f in findings]


@pytest.mark.parametrize("name", [
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
    "void deep_ep::internode::combine<nv_bfloat16>(int4*)",
    "void ep::internode_ll::dispatch<3>(void*)",
    "nvshmemi_transfer_rma_kernel", "void nvshmem_barrier_all_kernel()",
    "void pplx::a2a::dispatchKernel<float>(float*)", "void pplx::combineKernel<half>()",
    "mscclpp::AllReduce6<half>", "mscclKernel_Sum_float_LL",
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
    "void vllm::cross_device_reduce_1stage<half, 8>(half*)", "void vllm::cross_device_reduce_2stage<float, 4>()",
    "quickreduce::allreduce_prototype_twoshot<half>",
    "one_shot_all_reduce_kernel<bf16>", "two_shot_all_reduce_kernel", "custom_allgather_kernel",
    "ReduceScatterKernel<float>", "my_all_to_all_kernel",
])
def test_communication_kernel_names(name: str) -> None:
    assert comm_kernel_name(name)


@pytest.mark.parametrize("name", [
    "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8_splitk_reduce",
    "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(cublasSplitKParams<float>)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(at::native::ReduceOp<float>)",
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*>>",
    "triton_poi_fused_all_gather_copy_in_0", "sm90_gemm_bf16_allreduce_epilogue",
    "void (anonymous namespace)::groupnorm_kernel_dispatch_up<__hip_bfloat16, 1024u>(unsigned int)",
    "_combined_routing_compute", "void at::native::vectorized_elementwise_kernel<4>(int)",
])
def test_compute_kernel_names_with_collective_words(name: str) -> None:
    assert not comm_kernel_name(name)


def test_kernel_launched_directly_by_a_collective_op_is_communication(tmp_path: Path) -> None:
    """A custom backend's kernel under ``record_param_comms`` is communication whatever its name; an
    elementwise kernel launched there, or a kernel of an aten op nested in ``c10d::``, is compute."""
    b = TraceBuilder()
    c10d = b.cpu_op("c10d::allgather_", ts=0, dur=100)
    rpc = b.cpu_op("record_param_comms", ts=1, dur=50)
    b.launch(rpc, kernel="custom_backend_exchange_kernel", kernel_ts=60, kernel_dur=20)
    b.launch(rpc, kernel="void at::native::vectorized_elementwise_kernel<4>(int)", ts=3, kernel_ts=85,
             kernel_dur=5)
    cp = b.cpu_op("aten::copy_", ts=60, dur=20)
    b.launch(cp, kernel="flat_buffer_pack_kernel", kernel_ts=95, kernel_dur=5)
    assert c10d["name"] == "c10d::allgather_"
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    mask = is_comm_kernel(trace)
    comm = {trace.name_of(int(r)) for r in np.flatnonzero(mask)}
    assert comm == {"custom_backend_exchange_kernel"}


def test_deepep_kernels_are_exposed_communication(tmp_path: Path) -> None:
    run, findings, ids = _ids(cc._deepep(tmp_path))
    assert ids[0] == "exposed_communication"
    assert findings[0]["est_saving_ns_per_step"] == 400 * US  # dispatch 200 + combine 200, nothing under them


def test_gloo_wait_is_communication_on_cpu(tmp_path: Path) -> None:
    trace = aiprof.load(cc._gloo_cpu(tmp_path))
    assert isinstance(trace, Trace)
    (cpu,) = account(trace)
    step = cpu.steps[2]
    assert step.breakdown_ns["communication"] == 7_990 * US + 30 * US  # the gloo thread + c10d op
    run, findings, ids = _ids(cc._gloo_cpu(tmp_path / "x"))
    assert ids[0] == "exposed_communication" and "gloo" in findings[0]["title"]


def test_gloo_all_reduce_under_compute_of_another_thread_is_hidden(tmp_path: Path) -> None:
    """DDP on gloo overlapping backward: the all-reduce on the gloo thread runs while the main thread
    computes: hidden, not exposed. An op of the main thread enclosing its own wait is waiting, not compute."""
    b = TraceBuilder()
    for i in range(4):
        t0 = i * 10_000
        b.step(i, ts=t0, dur=10_000)
        b.cpu_op("aten::mm", ts=t0 + 10, dur=9_000)
        b.annotation("gloo:all_reduce", ts=t0 + 1_000, dur=7_000, tid=77)
    trace = aiprof.load(b.write(tmp_path / "overlap.json"))
    assert isinstance(trace, Trace)
    (cpu,) = account(trace)
    assert cpu.steps[1].breakdown_ns["communication"] == 0
    b2 = TraceBuilder()
    for i in range(4):
        t0 = i * 10_000
        b2.step(i, ts=t0, dur=10_000)
        outer = b2.cpu_op("autograd::engine::evaluate_function: AccumulateGrad", ts=t0 + 10, dur=9_000)
        assert outer
        b2.cpu_op("c10d::allreduce_", ts=t0 + 1_000, dur=7_000)
    trace2 = aiprof.load(b2.write(tmp_path / "nested.json"))
    assert isinstance(trace2, Trace)
    (cpu2,) = account(trace2)
    assert cpu2.steps[1].breakdown_ns["communication"] == 7_000 * US


@pytest.mark.parametrize(("works", "saving_us", "slow", "waiting"), [
    ([400.0, 700.0], 300, [1], [0]),  # 2 ranks: the full difference (the median would give 150)
    # By arrival order: if the stragglers came as early as the latest of the others, the all-reduce would start
    # when that rank arrives, not at the waiting ranks' median work (450 - 400 and 420 - 405 µs too much)
    ([400.0, 450.0, 700.0], 250, [2], [0, 1]),
    ([400.0, 410.0, 420.0, 400.0, 700.0, 410.0, 650.0, 400.0], 280, [4, 6], [0, 1, 2, 3, 5, 7]),
])
def test_straggler_saving_is_measured_against_the_ranks_that_wait(
    tmp_path: Path, works: list[float], saving_us: int, slow: list[int], waiting: list[int]
) -> None:
    _, findings, _ = _ids(cc.straggler_run(tmp_path, works))
    f = next(f for f in findings if f["id"] == "straggler")
    assert f["est_saving_ns_per_step"] == pytest.approx(saving_us * US, abs=1)
    assert f["evidence"]["slow_ranks"] == slow and f["evidence"]["waiting_ranks"] == waiting
    exposed = [g for g in findings if g["id"] == "exposed_communication"]
    for g in exposed:  # the waiting ranks' wait is the straggler's time, not the network's
        assert g["est_saving_ns_per_step"] <= 60 * US


def test_waiting_ranks_split_at_the_largest_jump() -> None:
    assert waiting_ranks([(0, 10.0), (1, 30.0)]) == ({0}, 10.0)
    assert waiting_ranks([(0, 10.0), (1, 12.0), (2, 50.0), (3, 55.0)]) == ({0, 1}, 11.0)
    assert waiting_ranks([(3, 5.0)]) == ({3}, 5.0)
    # evenly spread work is imbalance, not stragglers: measured against the median rank, not the fastest
    assert waiting_ranks([(r, 100.0 + 10 * r) for r in range(8)]) == ({0, 1, 2, 3}, 135.0)


def test_graph_capture_only_has_no_steady_state_verdict(tmp_path: Path) -> None:
    run, findings, ids = _ids(cc._capture_only(tmp_path))
    assert ids == ["graph_capture"]
    assert any("graph capture" in n for r in run.ranks for n in r.notes)


def test_graph_capture_is_taken_out_of_host_bound(tmp_path: Path) -> None:
    _, findings, ids = _ids(cc._capture_then_replays(tmp_path))
    assert "graph_capture" in ids and "host_bound" not in ids
    from aiprof.analysis.run import analyze_trace
    from aiprof.rules import idle
    from aiprof.rules.context import RankContext
    from aiprof.rules.options import DEFAULT_OPTIONS
    from aiprof.rules.registry import DEFAULT_RANK_RULES

    trace = aiprof.load(cc._capture_then_replays(tmp_path / "b"))
    assert isinstance(trace, Trace)
    ctx = RankContext(trace, analyze_trace(trace), DEFAULT_OPTIONS)
    # the rule itself, given the capture's host time, reads it as host-bound: its spec (capture_idle) is what
    # makes the registry give it the steps without the captured idle
    assert [f.id for f in idle.host_bound(ctx)] == ["host_bound"]
    # ... whether or not the graph_capture note is in the list (the capture is the trace's, not the note's)
    rules = [r for r in DEFAULT_RANK_RULES if r.__name__ != "graph_capture"]
    _, without = analyze_and_diagnose([cc._capture_then_replays(tmp_path / "c")], workers=1, rank_rules=rules)
    without = [f.to_dict() for f in without]  # as the JSON report holds them
    assert "host_bound" not in [f["id"] for f in without]


def test_get_capture_info_is_not_a_capture(tmp_path: Path) -> None:
    """Every caching-allocator call asks cudaStreamGetCaptureInfo: not a capture."""
    b = TraceBuilder()
    for i in range(4):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 2, dur=8)
        b.runtime("cudaStreamGetCaptureInfo_v2", ts=t0 + 3, dur=1)
        b.launch(op, kernel=cc.GEMM, ts=t0 + 5, kernel_ts=t0 + 8, kernel_dur=990, grid=(132, 1, 1))
    _, _, ids = _ids(b.write(tmp_path / "t.json"))
    assert "graph_capture" not in ids


def test_a_step_that_captures_a_graph_is_not_a_step_variance_outlier(tmp_path: Path) -> None:
    """torch.compile mode="reduce-overhead" records a graph for a new shape in one step: that step is long
    because of a one-time capture, not periodic work."""
    b = TraceBuilder()
    for i in range(8):
        t0 = i * 3000
        long = i == 4
        b.step(i, ts=t0, dur=3000 if long else 1000)
        op = b.cpu_op("aten::mm", ts=t0 + 2, dur=8)
        b.launch(op, kernel=cc.GEMM, ts=t0 + 4, kernel_ts=t0 + 8, kernel_dur=990, grid=(132, 1, 1))
        if long:
            b.runtime("cudaStreamBeginCapture", ts=t0 + 1000, dur=5)
            for j in range(20):
                b.runtime("cudaLaunchKernel", ts=t0 + 1010 + j * 90, dur=80)
            b.runtime("cudaStreamEndCapture", ts=t0 + 2850, dur=10)
            b.runtime("cudaGraphInstantiate", ts=t0 + 2870, dur=120)
    b2 = TraceBuilder()
    b2.events = [e for e in b.events if not str(e.get("name", "")).startswith(("cudaStream", "cudaGraph"))]
    _, _, plain = _ids(b2.write(tmp_path / "plain.json"))
    assert "step_variance" in plain  # the same long step without capture calls: an outlier
    _, _, ids = _ids(b.write(tmp_path / "t.json"))
    assert "graph_capture" in ids and "step_variance" not in ids
