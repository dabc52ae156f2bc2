"""Kernel, op and communication statistics on real traces, checked against peer tools' published numbers."""

from __future__ import annotations

import json
from pathlib import Path

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
    json.dumps(dev.to_dict())
