"""Kineto [memory] events: synthetic traces (totals present or absent) and real CPU torch workloads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.model import MemoryInputError
from aiprof.memory.report import MemoryReport
from aiprof.rules.registry import memory_findings

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _mem(ts: float, nbytes: int, addr: int, total: int | None = None, reserved: int | None = None, dev: int = 0) -> dict[str, Any]:
    args: dict[str, Any] = {"Bytes": nbytes, "Addr": addr, "Device Type": 1, "Device Id": dev}
    if total is not None:
        args["Total Allocated"] = total
        args["Total Reserved"] = reserved if reserved is not None else total
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "args": args}


def _write(tmp_path: Path, events: list[dict[str, Any]], **header: Any) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events, **header}))
    return path


def test_totals_seed_the_peak_with_memory_from_before_the_profiler(tmp_path: Path) -> None:
    # 1000 bytes were allocated before profiling; one of those blocks (addr 7, 300 B) is freed in the trace
    events = [
        _mem(1.0, 100, 1, total=1100, reserved=2048),
        _mem(2.0, 200, 2, total=1300, reserved=2048),
        _mem(3.0, -300, 7, total=1000, reserved=2048),
        _mem(4.0, 500, 3, total=1500, reserved=4096),
        _mem(5.0, -100, 1, total=1400, reserved=4096),
    ]
    props = [{"id": 0, "totalGlobalMem": 8192}]
    report = analyze_memory(load_memory(_write(tmp_path, events, deviceProperties=props)))
    dev = report.devices[0]
    assert dev.peak_allocated_bytes == max(e["args"]["Total Allocated"] for e in events) == 1500
    assert dev.seed_bytes == 1000 and dev.unseeded_peak_bytes == 500
    assert dev.peak_reserved_bytes == 4096 and dev.reserved_at_peak_bytes == 4096
    assert dev.fragmentation_at_peak_bytes == 4096 - 1500
    assert dev.capacity_bytes == 8192
    assert not report.warnings


def test_totals_absent_are_rebuilt_with_a_warning(tmp_path: Path) -> None:
    events = [_mem(1.0, 100, 1), _mem(2.0, 200, 2), _mem(3.0, -100, 1), _mem(4.0, 50, 3)]
    report = analyze_memory(load_memory(_write(tmp_path, events)))
    assert report.devices[0].peak_allocated_bytes == 300
    assert any("rebuilt" in w for w in report.warnings)


def test_trace_without_memory_events_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}])
    with pytest.raises(MemoryInputError, match="profile_memory=True"):
        load_memory(path)


# ---------------------------------------------------------------------------------------------------
# Real torch (CPU): workloads with a known memory story
# ---------------------------------------------------------------------------------------------------
def _recorded(tmp_path_factory: pytest.TempPathFactory, story: str, **kw: Any) -> tuple[Path, MemoryReport]:
    pytest.importorskip("torch")
    import workloads

    path = workloads.record(tmp_path_factory.mktemp(story) / "trace.json", story, **kw)
    return path, analyze_memory(load_memory(path))


@pytest.fixture(scope="module")
def leak(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, MemoryReport]:
    return _recorded(tmp_path_factory, "leak")


def _profiler_peak(path: Path, report: MemoryReport) -> int:
    """The profiler's own peak, less what its CPU counter carried over from this process's earlier sessions
    (these tests record in one process, one session after another)."""
    events = json.loads(path.read_text())["traceEvents"]
    peak = max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]")
    return int(peak) - report.devices[0].carried_over_bytes


@pytest.mark.torch
def test_peak_equals_the_profilers_total_allocated(leak: tuple[Path, MemoryReport]) -> None:
    path, report = leak
    (dev,) = report.devices
    assert dev.device == "cpu"
    assert dev.peak_allocated_bytes == _profiler_peak(path, report)
    assert len(dev.steps) == 5


@pytest.mark.torch
def test_leak_finding_names_the_site(leak: tuple[Path, MemoryReport]) -> None:
    _, report = leak
    leak_trend = report.devices[0].leak
    assert leak_trend is not None and leak_trend.longest_growth_run >= 3
    found = [f for f in memory_findings(report) if f.id == "mem_leak"]
    assert len(found) == 1
    assert "keep_for_later" in found[0].title and found[0].evidence["est_saving_bytes"] > 0


@pytest.mark.torch
def test_leak_saving_is_what_the_fix_frees(tmp_path_factory: pytest.TempPathFactory) -> None:
    # the fix: the same run without keeping a copy of each step's output (the "activation" story is exactly
    # the leak story without the keep); the estimate must be within 30 % of the drop of the peak
    _, leaky = _recorded(tmp_path_factory, "leak", steps=4)
    _, fixed = _recorded(tmp_path_factory, "activation", steps=4)
    saved = leaky.devices[0].peak_allocated_bytes - fixed.devices[0].peak_allocated_bytes
    (found,) = [f for f in memory_findings(leaky) if f.id == "mem_leak"]
    estimate = found.evidence["est_saving_bytes"]
    assert saved > 0 and abs(estimate - saved) <= 0.3 * saved


@pytest.mark.torch
def test_activation_saving_is_what_checkpointing_frees(tmp_path: Path) -> None:
    # the fix the finding names, applied: checkpoint_sequential with its segment count (bench/memory_activation.py)
    pytest.importorskip("torch")
    import importlib.util

    spec = importlib.util.spec_from_file_location("memory_activation_bench", BENCH / "memory_activation.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = analyze_memory(load_memory(bench.record(tmp_path / "before.json", 2048, 128, 4, None)))
    (found,) = [f for f in memory_findings(before) if f.id == "mem_activation_dominant"]
    segments = int(found.evidence["segments"])
    after = analyze_memory(load_memory(bench.record(tmp_path / "after.json", 2048, 128, 4, segments)))
    saved = before.devices[0].peak_allocated_bytes - after.devices[0].peak_allocated_bytes
    assert saved > 0 and abs(found.evidence["est_saving_bytes"] - saved) <= 0.3 * saved


@pytest.mark.torch
def test_activation_dominated_peak(tmp_path_factory: pytest.TempPathFactory) -> None:
    path, report = _recorded(tmp_path_factory, "activation", steps=3, batch=2048, width=128, depth=4)
    dev = report.devices[0]
    assert dev.peak_allocated_bytes == _profiler_peak(path, report)
    cats = {c.category: c.bytes for c in dev.live_at_peak_by_category}
    assert cats.get("activation", 0) > 0.5 * dev.peak_allocated_bytes
    assert cats.get("unknown", 0) <= 0.05 * dev.peak_allocated_bytes
    assert [f.id for f in memory_findings(report)].count("mem_activation_dominant") == 1


@pytest.mark.torch
def test_large_optimizer_state(tmp_path_factory: pytest.TempPathFactory) -> None:
    path, report = _recorded(tmp_path_factory, "optimizer", steps=3, batch=4, width=512, depth=3, warmup=0)
    dev = report.devices[0]
    assert dev.peak_allocated_bytes == _profiler_peak(path, report)
    cats = {c.category: c.bytes for c in dev.live_at_peak_by_category}
    assert cats.get("optimizer_state", 0) >= 0.3 * dev.peak_allocated_bytes
    assert "mem_optimizer_dominant" in [f.id for f in memory_findings(report)]


def test_real_gpu_trace_peak_equals_total_allocated(traces_dir: Path) -> None:
    import gzip

    path = traces_dir / "tracelens" / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("name") == "[memory]"]
    cuda = [e["args"] for e in events if e["args"].get("Device Type") == 1]
    report = analyze_memory(load_memory(path))
    dev = next(d for d in report.devices if d.device == "cuda:0")
    assert dev.peak_allocated_bytes == max(a["Total Allocated"] for a in cuda)
    assert dev.peak_reserved_bytes == max(a["Total Reserved"] for a in cuda)
    assert dev.capacity_bytes and dev.capacity_bytes > 70 << 30


def test_2021_trace_without_totals_or_addresses(traces_dir: Path) -> None:
    import gzip

    path = traces_dir / "kineto-tbplugin" / "samples" / "resnet50_num_workers_4" / "worker0.1623212756351.pt.trace.json.gz"
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("name") == "[memory]"]
    report = analyze_memory(load_memory(path))
    for dev in report.devices:
        signed = [e["args"]["Bytes"] for e in sorted(events, key=lambda e: e["ts"])
                  if (e["args"].get("Device Type") == 1) == (dev.device != "cpu")]
        running = peak = low = 0
        for b in signed:
            running += b
            peak, low = max(peak, running), min(low, running)
        assert dev.peak_allocated_bytes == peak - low  # seeded so the running total never goes below 0
        assert dev.live_at_peak == []
    assert any("no Addr" in w for w in report.warnings) and any("rebuilt" in w for w in report.warnings)
