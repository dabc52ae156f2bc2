"""Every real trace under ../shared/traces loads, with the facts we rely on; the few JSON files there
that are not traces raise a clear TraceError."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import aiprof
from aiprof.errors import TraceError
from aiprof.trace.model import GPU_WORK_KINDS, Kind, RunSet, Trace

ROOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
NOT_TRACES = {
    "kineto-tbplugin/reference_overview.json",
    "kineto-tbplugin/unit-fixtures/golden_outputs.json",
    "hta/execution_trace/benchmark_simple_add_et.json.gz",
    "hta/memory_analysis/memory_timeline.raw.gz",
}


def _files() -> list[str]:
    if not ROOT.is_dir():
        return []
    found = [p for p in ROOT.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz", ".raw.gz"))]
    return sorted(str(p.relative_to(ROOT)) for p in found if "perf_report" not in str(p))


FILES = _files()
pytestmark = pytest.mark.skipif(not FILES, reason=f"shared traces not found at {ROOT}")


@pytest.mark.parametrize("rel", [f for f in FILES if f not in NOT_TRACES])
def test_every_trace_loads(rel: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # real traces load without salvage or skipped events
        trace = aiprof.load(ROOT / rel)
    assert isinstance(trace, Trace)
    c = trace.columns
    assert len(trace) > 0 and not trace.warnings
    assert (c.dur >= 0).all()
    assert np.all(np.diff(c.ts) >= 0)
    device_rows = np.isin(c.kind, [int(k) for k in GPU_WORK_KINDS])
    assert (c.device[device_rows] >= 0).all() and (c.device[~np.isin(c.kind, [5, 6, 7, 8, 9, 10])] == -1).all()
    launched = device_rows & (c.correlation >= 0)
    if launched.sum() >= 100 and (c.kind == Kind.RUNTIME).any():  # tiny synthetic fixtures link partially
        runtime_corr = set(c.correlation[c.kind == Kind.RUNTIME].tolist())
        linked = np.isin(c.correlation[launched], list(runtime_corr))
        assert linked.mean() > 0.5, f"only {linked.mean():.0%} of GPU activity links to a launch"


@pytest.mark.parametrize("rel", sorted(NOT_TRACES & set(FILES)))
def test_non_traces_raise_a_clear_error(rel: str) -> None:
    with pytest.raises(TraceError) as info:
        aiprof.load(ROOT / rel)
    text = str(info.value)
    expected = "execution trace (Chakra ET), not a Kineto trace" if "_et." in rel else "not a Kineto/Chrome trace"
    assert "\n" not in text and expected in text


def test_legacy_v100_sample() -> None:
    trace = aiprof.load(ROOT / "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert isinstance(trace, Trace)
    c = trace.columns
    steps = np.flatnonzero(trace.name_matches(np.arange(len(trace)), r"^ProfilerStep#") & (c.kind == Kind.USER_ANNOTATION))
    assert len(steps) > 0
    kernel = np.flatnonzero(c.kind == Kind.KERNEL)
    assert set(c.tid[kernel].tolist()) == {7} and (c.external_id[kernel] >= 0).all()
    assert trace.devices[0].name == "Tesla V100-DGXS-32GB" and trace.base_time_ns == 0
    assert int(c.ts[0]) % 1000 == 0 and int(c.ts[0]) > 1_600_000_000_000_000_000


def test_mtia_streams_and_size() -> None:
    trace = aiprof.load(ROOT / "hta/mtia_trace_single_rank/mtia_rank_0.json.gz")
    assert isinstance(trace, Trace)
    c = trace.columns
    kernel = c.kind == Kind.KERNEL
    assert int(kernel.sum()) == 25814 and 1 in set(c.tid[kernel].tolist())
    row = np.flatnonzero(kernel & (c.correlation == 423))
    assert len(row) == 1 and int(c.dur[row[0]]) // 1000 == 124  # HTA: GPU 124 µs for correlation 423
    assert trace.event_count == 455_739


def test_amd_trace_devices() -> None:
    trace = aiprof.load(ROOT / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert isinstance(trace, Trace)
    assert trace.device_ids == [2] and trace.devices[0].warp_size == 64


def test_dlrm_eight_ranks_from_file_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runs = aiprof.load(ROOT / "param/dlrm_8rank")
    assert isinstance(runs, RunSet)
    assert runs.ranks == list(range(8))
    assert all(t.path.name.startswith(f"worker{t.rank}_") for t in runs)


def test_megatron_eight_ranks() -> None:
    runs = aiprof.load(ROOT / "astra-sim/megatron_tp8")
    assert isinstance(runs, RunSet) and len(runs) == 8 and sorted(runs.ranks) == list(range(8))
