"""Telemetry sampler (real psutil probes, an injected clock) and the counter tracks merged into traces."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.capture import telemetry
from aiprof.capture.telemetry import SystemProbe, TelemetrySampler, read_rows
from aiprof.capture.traces import add_telemetry, counter_events

pytest.importorskip("psutil")


class FakeClock:
    """Unix ns that advance 100 ms per reading."""

    def __init__(self, start: int = 1_700_000_000_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 100_000_000
        return self.now


def test_sampler_rows_on_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    sampler = TelemetrySampler(tmp_path / "t.csv", [SystemProbe()], interval_s=3600, clock=clock)
    sampler.start()  # takes one sample; the thread then waits an hour
    for _ in range(4):
        sampler.sample_once()
    sampler.stop()
    assert not sampler.running
    rows = list(read_rows(tmp_path / "t.csv"))
    assert len(rows) == sampler.samples == 6  # start + 4 + the final one in stop()
    times = [r["t_unix_ns"] for r in rows]
    assert times == sorted(times) and times[1] - times[0] == 100_000_000
    row = rows[-1]
    assert 0 <= row["cpu_pct"] <= 100
    assert row["proc_rss_bytes"] > 10_000_000  # this Python process
    assert row["tree_processes"] >= 1
    assert row["mem_used_bytes"] > 0
    assert list(read_rows(tmp_path / "t.csv", times[2], times[3])) == rows[2:4]


def test_sampler_thread_stops_and_memory_is_bounded(tmp_path: Path) -> None:
    sampler = TelemetrySampler(tmp_path / "t.csv", [SystemProbe()], interval_s=0.005)
    sampler.start()
    deadline = threading.Event()
    while sampler.samples < 80 and not deadline.wait(0.01):
        pass
    sampler.stop()
    sampler.stop()  # idempotent
    assert sampler.samples >= 80
    assert len(sampler.recent) <= telemetry._KEEP_ROWS
    assert not [t for t in threading.enumerate() if t.name == "aiprof-telemetry"]
    assert sum(1 for _ in read_rows(tmp_path / "t.csv")) == sampler.samples


def test_failing_probe_gives_empty_cells_not_a_crash(tmp_path: Path) -> None:
    class Broken:
        columns = ["x", "y"]

        def read(self) -> list[float | int | None]:
            raise RuntimeError("sensor gone")

        def close(self) -> None:
            pass

    sampler = TelemetrySampler(tmp_path / "t.csv", [Broken()], clock=FakeClock())
    row = sampler.sample_once()
    assert row[1:] == [None, None] and "sensor gone" in sampler.errors[0]


def test_no_gpu_is_skipped_cleanly() -> None:
    if "pynvml" in sys.modules or _importable("pynvml"):
        pytest.skip("nvidia-ml-py is installed here")
    probe, note = telemetry.open_gpu_probe()
    assert probe is None and note.startswith("skipped:")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A stand-in for nvidia-ml-py (no GPU here): the NVML calls and units the probe relies on."""
    nvml: Any = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    nvml.NVMLError = NVMLError
    nvml.NVML_CLOCK_SM = 1
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 2
    nvml.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87, memory=40)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 * 2**30, total=80 * 2**30)
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: 1980 if kind == 1 else 0

    def power(h: str) -> int:
        if h == "h1":
            raise NVMLError("not supported")
        return 350_000

    nvml.nvmlDeviceGetPowerUsage = power
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    yield nvml


def test_gpu_probe_reads_nvml_units(fake_nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    probe, note = telemetry.open_gpu_probe()
    assert probe is not None and "1 GPU" in note
    values = dict(zip(probe.columns, probe.read()))
    assert values == {
        "gpu1_util_pct": 87, "gpu1_mem_util_pct": 40, "gpu1_mem_used_bytes": 3 * 2**30,
        "gpu1_sm_clock_mhz": 1980, "gpu1_power_w": None, "gpu1_throttle_reasons": 4,
    }
    assert telemetry.visible_gpus(4, "2,0,-1,3") == [2, 0]
    assert telemetry.visible_gpus(2, "GPU-uuid") == [0, 1]


def test_counters_on_the_kineto_clock() -> None:
    base = 1_790_000_000_000_000_000
    rows = [
        {"t_unix_ns": base + 1_000_000, "cpu_pct": 50.0, "cpu0_pct": 40.0, "cpu1_pct": 60.0, "disk_read_bytes": 0.0, "gpu0_util_pct": 90.0},
        {"t_unix_ns": base + 101_000_000, "cpu_pct": 70.0, "cpu0_pct": 80.0, "cpu1_pct": 60.0, "disk_read_bytes": 5e6, "gpu0_util_pct": 95.0},
    ]
    events = counter_events(rows, base, pid=42)
    assert all(e["ph"] == "C" and e["pid"] == 42 for e in events)
    cpu = [e for e in events if e["name"] == "CPU utilisation (%)"]
    assert [e["ts"] for e in cpu] == [1000.0, 101000.0]  # µs relative to baseTimeNanoseconds
    disk = [e for e in events if e["name"] == "Disk I/O (MB/s)"]
    assert disk[0]["args"]["read"] == pytest.approx(50.0)  # 5 MB in 0.1 s
    cores = [e for e in events if e["name"] == "CPU per core (%)"]
    assert cores[0]["args"] == {"core 0": 40.0, "core 1": 60.0}
    assert [e["args"]["value"] for e in events if e["name"] == "GPU0 utilisation (%)"] == [90.0, 95.0]


def test_add_telemetry_keeps_rows_inside_the_trace_span() -> None:
    base = 1_790_000_000_000_000_000
    doc = {"baseTimeNanoseconds": base, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1000.0, "dur": 500.0},
    ]}
    seen: list[tuple[int, int]] = []

    def rows_for(a: int, b: int) -> list[dict[str, float]]:
        seen.append((a, b))
        return [{"t_unix_ns": base + 1_200_000, "cpu_pct": 10.0}]

    assert add_telemetry(doc, rows_for, margin_us=100.0) == 1
    assert seen == [(base + 900_000, base + 1_600_000)]
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert counters and counters[0]["ts"] == 1200.0 and counters[0]["pid"] == 7
