"""Kernel, op and communication statistics on real traces, checked against peer tools' published numbers."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

import aiprof
from aiprof.analysis.kernels import kernel_stats
from aiprof.trace.model import Trace

TBPLUGIN_SAMPLES = [
    "samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz",
    "samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
]


def load_one(path: Path) -> Trace:
    if not path.exists():
        pytest.skip(f"{path} not found")
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


@pytest.mark.parametrize("sample", TBPLUGIN_SAMPLES)
def test_sm_efficiency_and_occupancy_match_tensorboard_plugin(traces_dir: Path, sample: str) -> None:
    """The plugin's est. SM efficiency, est. achieved occupancy and GPU utilization, within 1 % relative."""
    root = traces_dir / "kineto-tbplugin"
    expected = json.loads((root / "reference_overview.json").read_text())[sample]["gpus"]["0"]
    dev = kernel_stats(load_one(root / sample)).device(0)
    assert dev.window_source.startswith("ProfilerStep")
    assert dev.gpu_utilization_pct == pytest.approx(100 * expected["gpu_utilization"], rel=0.01)
    assert dev.est_sm_efficiency_pct == pytest.approx(100 * expected["est_sm_efficiency"], rel=0.01)
    assert dev.est_achieved_occupancy_pct == pytest.approx(expected["est_achieved_occupancy_pct"], rel=0.01)


def test_kernel_stats_on_resnet_sample_are_consistent(traces_dir: Path) -> None:
    trace = load_one(traces_dir / "kineto-tbplugin" / TBPLUGIN_SAMPLES[0])
    dev = kernel_stats(trace).device(0)
    assert dev.device_name.startswith("Tesla V100")
    assert dev.num_sms == 80
    assert sum(k.count for k in dev.kernels) == dev.kernel_count
    assert sum(k.total_ns for k in dev.kernels) == dev.kernel_total_ns
    assert sum(k.kernel_time_share_pct for k in dev.kernels) == pytest.approx(100.0)
    assert dev.kernel_busy_ns <= dev.kernel_total_ns
    assert all(k.min_ns <= k.p50_ns <= k.p95_ns <= k.max_ns for k in dev.kernels)
    assert dev.comm_kernel_total_ns == 0  # single-GPU ResNet: no collectives
    # "Busy" is not "useful": SM efficiency while running is high, the window-level estimate is lower.
    assert dev.sm_efficiency_pct is not None and dev.est_sm_efficiency_pct is not None
    assert dev.est_sm_efficiency_pct < dev.sm_efficiency_pct
    json.dumps(msgspec.to_builtins(dev))


# ----- communication ---------------------------------------------------------------------------------
import csv  # noqa: E402

import numpy as np  # noqa: E402

from aiprof.analysis.comm import comm_stats, is_comm_kernel  # noqa: E402
from aiprof.analysis.ops import op_stats  # noqa: E402
from aiprof.trace.links import forward_of, gpu_op  # noqa: E402
from aiprof.trace.model import GPU_WORK_KINDS, Kind  # noqa: E402


def test_hta_nccl_metadata_trace(traces_dir: Path) -> None:
    """HTA's published numbers: 21 NCCL kernels; allreduce, 2,049,000 elements in and out, ranks [0, 1]."""
    stats = comm_stats(load_one(traces_dir / "hta" / "nccl_parser_config" / "nccl_data.json.gz"))
    assert len(stats.collectives) == 21
    big = [c for c in stats.collectives if c.in_nelems == 2_049_000]
    assert big and all(c.collective == "all_reduce" and c.out_nelems == 2_049_000 for c in big)
    assert all(c.process_group_ranks == (0, 1) and c.group_size == 2 for c in big)
    assert all(c.message_bytes == 2_049_000 * 4 and c.dtype == "Float" for c in big)
    assert all(c.collective_source == "metadata" for c in stats.collectives)
    assert {c.collective for c in stats.collectives} == {"all_reduce", "broadcast"}


def test_rccl_collectives_match_tracelens_coll_analysis(traces_dir: Path) -> None:
    root = traces_dir / "tracelens" / "mi300"
    stats = comm_stats(load_one(root / "resnet_act_checkpoint.json.gz"))
    with open(root / "resnet_act_checkpoint_recompute_perf_report_csvs" / "coll_analysis.csv") as fh:
        rows = list(csv.DictReader(fh))
    names = {"allreduce": "all_reduce", "broadcast": "broadcast"}
    for row in rows:
        mine = [
            c for c in stats.collectives
            if c.collective == names[row["Collective name"]] and c.dtype == row["dtype"]
            and c.in_nelems == int(float(row["In msg nelems"]))
        ]
        assert len(mine) == int(row["operation_count"])
        assert sum(c.dur_ns for c in mine) / 1000 == pytest.approx(float(row["dur_sum"]), rel=1e-6)
        assert mine[0].message_bytes / 2**20 == pytest.approx(float(row["In msg size (MB)_first"]))
        assert mine[0].group_size == int(float(row["Group size"]))
    # RCCL's ncclDevKernel_Generic kernels with no metadata and no CPU op: counted as comm, kind unknown.
    assert len(stats.collectives) == 17
    assert sum(c.collective == "unknown" for c in stats.collectives) == 5


@pytest.mark.parametrize("rank", range(8))
def test_megatron_tp8_all_reduces(traces_dir: Path, rank: int) -> None:
    trace = load_one(traces_dir / "astra-sim" / "megatron_tp8" / f"megatron_kineto_{rank}.json.gz")
    stats = comm_stats(trace)
    assert stats.collectives and {c.collective for c in stats.collectives} == {"all_reduce"}
    big = [c for c in stats.collectives if c.dtype == "f16"]
    # Legacy trace: sizes come from record_param_comms' Input Dims [4, 2048, 4096], dtype from the kernel.
    assert big and all(c.message_bytes == 4 * 2048 * 4096 * 2 for c in big)
    assert all(c.group_size == 8 and c.group_size_source == "world size" for c in big)
    assert all(c.busbw_gb_per_s == pytest.approx(c.algbw_gb_per_s * 2 * 7 / 8) for c in big)
    (ov,) = stats.overlap
    assert 0 <= ov.overlapped_ns <= ov.comm_ns and ov.exposed_ns == ov.comm_ns - ov.overlapped_ns


def test_dlrm_all_to_all_from_cpu_ops(traces_dir: Path) -> None:
    folder = traces_dir / "param" / "dlrm_8rank"
    for path in sorted(folder.glob("*.json.gz")):
        stats = comm_stats(load_one(path))
        kinds = [c.collective for c in stats.collectives]
        assert kinds.count("all_to_all") == 5 and kinds.count("all_reduce") == 3
        assert all(c.group_size == 8 for c in stats.collectives)


def test_comm_mask_on_single_gpu_resnet_is_empty(traces_dir: Path) -> None:
    trace = load_one(traces_dir / "kineto-tbplugin" / TBPLUGIN_SAMPLES[0])
    assert not is_comm_kernel(trace).any()


# ----- ops ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sample", TBPLUGIN_SAMPLES[:2])
def test_top_level_op_gpu_time_adds_up_to_linked_gpu_work(traces_dir: Path, sample: str) -> None:
    trace = load_one(traces_dir / "kineto-tbplugin" / sample)
    c = trace.columns
    gpu = np.isin(c.kind, [int(k) for k in GPU_WORK_KINDS])
    linked = int(c.dur[gpu & (gpu_op(trace) >= 0)].sum())
    top = op_stats(trace, top_level_only=True)
    assert sum(g.gpu_total_ns for g in top.groups) == linked
    every = op_stats(trace)
    assert sum(g.gpu_self_ns for g in every.groups) == linked
    assert all(0 <= g.cpu_self_ns <= g.cpu_total_ns for g in every.groups)
    assert sum(g.count for g in every.groups) == int((c.kind == int(Kind.CPU_OP)).sum())


def test_forward_of_links_every_backward_op_on_resnet(traces_dir: Path) -> None:
    trace = load_one(traces_dir / "kineto-tbplugin" / TBPLUGIN_SAMPLES[0])
    c = trace.columns
    fwd = forward_of(trace)
    bwd = np.flatnonzero((c.kind == int(Kind.CPU_OP)) & (c.fwd_tid > 0))
    assert bwd.size > 1000 and (fwd[bwd] >= 0).all()
    assert (c.ts[fwd[bwd]] < c.ts[bwd]).all()
    pairs = {(trace.name_of(int(b)), trace.name_of(int(fwd[b]))) for b in bwd}
    assert ("CudnnConvolutionBackward", "aten::cudnn_convolution") in pairs
    assert ("AddmmBackward", "aten::addmm") in pairs
