"""Kernel statistics on tiny hand-written Kineto traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

import aiprof
from aiprof.analysis.kernels import TINY_KERNEL_NS, kernel_stats, known_sm_count, tb_plugin_window
from aiprof.trace.model import Trace


def kernel(name: str, ts: float, dur: float, corr: int, grid: int = 0, stream: int = 7, **args: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {"grid": [grid, 1, 1], "block": [128, 1, 1]} if grid else {}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **extra, **args}}


def load(tmp_path: Path, events: list[dict[str, Any]], **top: Any) -> Trace:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, **top}))
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


V100 = {"deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-16GB", "numSms": 80}]}


def test_per_name_durations_percentiles_and_shares(tmp_path: Path) -> None:
    gemm_durs = [100.0, 200.0, 300.0, 400.0, 1000.0]  # µs
    events = [kernel("gemm", 2000.0 * i, d, i) for i, d in enumerate(gemm_durs)]
    events += [kernel("add", 20000.0 + 10 * i, 4.0, 100 + i) for i in range(10)]  # tiny: 4 µs each
    trace = load(tmp_path, events, **V100)
    dev = kernel_stats(trace).device(0)
    assert dev.kernel_count == 15
    assert dev.kernel_total_ns == 2_000_000 + 40_000
    gemm, add = dev.kernels  # sorted by total time
    assert gemm.name == "gemm" and add.name == "add"
    ns = np.array(gemm_durs) * 1000
    assert gemm.count == 5 and gemm.total_ns == int(ns.sum())
    assert gemm.mean_ns == pytest.approx(ns.mean())
    assert gemm.p50_ns == pytest.approx(np.percentile(ns, 50))
    assert gemm.p95_ns == pytest.approx(np.percentile(ns, 95))
    assert (gemm.min_ns, gemm.max_ns) == (100_000, 1_000_000)
    assert gemm.kernel_time_share_pct == pytest.approx(100 * 2_000_000 / 2_040_000)
    assert gemm.tiny_count == 0 and add.tiny_count == 10
    assert add.tiny_time_share_pct == pytest.approx(100.0)
    assert dev.tiny_count == 10 and dev.tiny_total_ns == 40_000
    assert dev.tiny_count_pct == pytest.approx(100 * 10 / 15)
    assert dev.tiny_time_share_pct == pytest.approx(100 * 40_000 / 2_040_000)
    assert dev.tiny_threshold_ns == TINY_KERNEL_NS


def test_tiny_threshold_is_a_parameter(tmp_path: Path) -> None:
    trace = load(tmp_path, [kernel("k", 0.0, 50.0, 1), kernel("k", 100.0, 5.0, 2)])
    assert kernel_stats(trace, tiny_threshold_ns=100_000).device(0).tiny_count == 2
    assert kernel_stats(trace).device(0).tiny_count == 1


def test_sm_efficiency_time_weighted_from_grid_and_num_sms(tmp_path: Path) -> None:
    # 40 blocks on 80 SMs -> 0.5 for 300 µs; 160 blocks -> capped at 1 for 100 µs.
    events = [kernel("half", 0.0, 300.0, 1, grid=40), kernel("full", 1000.0, 100.0, 2, grid=160)]
    dev = kernel_stats(load(tmp_path, events, **V100)).device(0)
    assert dev.num_sms == 80 and dev.num_sms_source == "deviceProperties"
    assert dev.sm_efficiency_pct == pytest.approx(100 * (0.5 * 300 + 1.0 * 100) / 400)
    by_name = {k.name: k for k in dev.kernels}
    assert by_name["half"].sm_efficiency_pct == pytest.approx(50.0)
    assert by_name["full"].sm_efficiency_pct == pytest.approx(100.0)
    # Window = device activity [0, 1100 µs]: 0.5*300 + 1*100 over 1100.
    assert dev.window_source == "device activity"
    assert dev.est_sm_efficiency_pct == pytest.approx(100 * 250 / 1100)
    assert dev.gpu_utilization_pct == pytest.approx(100 * 400 / 1100)


def test_window_sm_efficiency_sums_concurrent_kernels_and_caps_at_one(tmp_path: Path) -> None:
    # Two streams: 0.5 + 0.5 overlap for 100 µs (level 1), then 0.75 + 0.5 (capped 1) for 100 µs,
    # then 0.75 alone for 100 µs.
    events = [
        kernel("a", 0.0, 200.0, 1, stream=7, **{"blocks per SM": 0.5}),
        kernel("b", 0.0, 100.0, 2, stream=8, **{"blocks per SM": 0.5}),
        kernel("c", 100.0, 200.0, 3, stream=8, **{"blocks per SM": 0.75}),
    ]
    dev = kernel_stats(load(tmp_path, events), window_ns=(0, 400_000)).device(0)
    assert dev.window_source == "caller"
    assert dev.est_sm_efficiency_pct == pytest.approx(100 * (100 + 100 + 75) / 400)
    assert dev.num_sms is None  # no grid, no deviceProperties, no name: nothing to infer from


def test_occupancy_weighted_by_time_inside_window(tmp_path: Path) -> None:
    events = [
        kernel("a", 0.0, 100.0, 1, **{"est. achieved occupancy %": 20}),
        kernel("b", 100.0, 300.0, 2, **{"est. achieved occupancy %": 60}),
    ]
    trace = load(tmp_path, events)
    dev = kernel_stats(trace).device(0)
    assert dev.achieved_occupancy_pct == pytest.approx((20 * 100 + 60 * 300) / 400)
    clipped = kernel_stats(trace, window_ns=(50_000, 200_000)).device(0)
    assert clipped.est_achieved_occupancy_pct == pytest.approx((20 * 50 + 60 * 100) / 150)


def test_num_sms_falls_back_to_known_gpu_table_then_none_with_reason(tmp_path: Path) -> None:
    legacy = {"deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-16GB"}]}
    dev = kernel_stats(load(tmp_path, [kernel("k", 0.0, 10.0, 1, grid=40)], **legacy)).device(0)
    assert (dev.num_sms, dev.num_sms_source) == (80, "known-GPU table")
    assert dev.sm_efficiency_pct == pytest.approx(50.0)
    unknown = {"deviceProperties": [{"id": 0, "name": "Mystery Accelerator 9000"}]}
    dev = kernel_stats(load(tmp_path, [kernel("k", 0.0, 10.0, 1, grid=40)], **unknown)).device(0)
    assert dev.num_sms is None and dev.sm_efficiency_pct is None and dev.est_sm_efficiency_pct is None
    assert dev.sm_efficiency_note.startswith("unknown")
    assert msgspec.to_builtins(dev)["sm_efficiency_pct"] is None


def test_known_sm_count_prefers_specific_names() -> None:
    assert known_sm_count("NVIDIA H100 PCIe") == 114
    assert known_sm_count("NVIDIA H100 80GB HBM3") == 132
    assert known_sm_count("NVIDIA A10G") == 80
    assert known_sm_count("AMD Instinct MI300X") == 304
    assert known_sm_count("something else") is None


def test_plugin_window_stretches_to_gpu_end_and_drops_starved_last_step(tmp_path: Path) -> None:
    def step(n: int, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    def launch(ts: float, corr: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1,
                "args": {"correlation": corr}}

    events = [step(1, 0.0, 100.0), step(2, 100.0, 100.0), step(3, 200.0, 100.0)]
    events += [launch(10.0, 1), launch(20.0, 2), kernel("k", 50.0, 100.0, 1), kernel("k", 150.0, 20.0, 2)]
    events += [launch(110.0, 3), launch(120.0, 4), kernel("k", 180.0, 60.0, 3), kernel("k", 240.0, 5.0, 4)]
    events += [launch(210.0, 5), kernel("k", 250.0, 5.0, 5)]  # step 3: 1 kernel < 0.8 * 2 -> dropped
    trace = load(tmp_path, events)
    assert tb_plugin_window(trace) == (0, 245_000)
    dev = kernel_stats(trace).device(0)
    assert dev.window_source.startswith("ProfilerStep")
    assert (dev.window_start_ns, dev.window_end_ns) == (0, 245_000)


def test_empty_and_to_dict(tmp_path: Path) -> None:
    cpu_only = load(tmp_path, [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 3}])
    assert kernel_stats(cpu_only).devices == ()
    assert msgspec.to_builtins(kernel_stats(cpu_only)) == {"tiny_threshold_ns": TINY_KERNEL_NS, "devices": ()}
    out = msgspec.to_builtins(kernel_stats(load(tmp_path, [kernel("k", 0.0, 10.0, 1)])))
    json.dumps(out)
    assert out["devices"][0]["kernels"][0]["total_ns"] == 10_000
