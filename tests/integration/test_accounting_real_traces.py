"""Invariants of the timeline accounting on every real trace in ../shared/traces, and what the numbers
say on the ones whose story we know."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES, account
from aiprof.errors import AiprofError, AiprofWarning
from aiprof.trace import Trace

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
NOT_TRACES = {"reference_overview.json", "golden_outputs.json", "benchmark_simple_add_et.json.gz"}


def _trace_files() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(
        p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz")) and p.name not in NOT_TRACES
    )


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces not present")
@pytest.mark.parametrize("path", _trace_files(), ids=lambda p: str(p.relative_to(SHARED)))
def test_buckets_add_up_to_the_window_and_causes_to_idle(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AiprofWarning)
        trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    devices = account(trace)
    assert devices
    for device in devices:
        assert device.steps
        for step in device.steps:
            assert set(step.breakdown_ns) == set(BUCKETS)
            assert set(step.idle_causes_ns) == set(IDLE_CAUSES)
            assert all(v >= 0 for v in step.breakdown_ns.values()), step
            assert all(v >= 0 for v in step.idle_causes_ns.values()), step
            assert sum(step.breakdown_ns.values()) == step.duration_ns
            assert sum(step.idle_causes_ns.values()) == step.breakdown_ns["idle"]
        totals = device.totals
        assert sum(totals.breakdown_ns.values()) == totals.duration_ns
        assert 0.0 <= totals.gpu_utilization <= 1.0


RESNET = "kineto-tbplugin/samples"
# The TensorBoard plugin's published numbers for these traces (traces/MANIFEST.md): GPU utilization and
# DataLoader time per step. Our utilization uses the same definition (kernel union / stretched step);
# our data_loading is idle time while the host is in DataLoader.__next__, which excludes the few µs of
# GPU work that overlaps the fetch, so it may only be a little below the plugin's DataLoader time.
TB_REFERENCE = [
    ("resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", 0.5551, 59_262),
    ("resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz", 0.6361, 35_504),
    ("resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz", 0.7027, 1_186),
    ("resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz", 0.6935, 292),
]


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces not present")
@pytest.mark.parametrize("name,util,dataloader_us", TB_REFERENCE)
def test_resnet_utilization_and_data_loading_match_the_tensorboard_plugin(
    name: str, util: float, dataloader_us: int
) -> None:
    trace = aiprof.load(SHARED / RESNET / name)
    assert isinstance(trace, Trace)
    (gpu,) = account(trace)
    totals = gpu.totals
    assert totals.gpu_utilization == pytest.approx(util, abs=0.01)
    per_step_us = totals.idle_causes_ns["data_loading"] / totals.steps / 1000
    assert per_step_us == pytest.approx(dataloader_us, rel=0.05, abs=200)
    top_cause = max(IDLE_CAUSES, key=lambda k: totals.idle_causes_ns[k])
    if "workers_0" in name:
        assert top_cause == "data_loading"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces not present")
def test_a_trace_without_device_activity_says_so() -> None:
    from aiprof.analysis import analyze

    loaded = aiprof.load(SHARED / "edge" / "zoology_a100_no_kernels.json.gz")
    (rank,) = analyze(loaded, sections={}).ranks
    assert rank.devices[0].device == "cpu"
    assert any("no GPU activity" in n for n in rank.notes)


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AiprofError, match="no such file"):
        aiprof.load(tmp_path / "nope.json")
