"""``--memory`` capture: the CPU path with a real tiny torch run, and the CUDA logic with a stand-in torch."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from aiprof.capture.memory import MemoryCapture
from aiprof.capture.options import CaptureOptions, Schedule
from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.model import MemoryInputError


def test_cpu_run_directory_feeds_aiprof_memory(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import aiprof

    out = tmp_path / "run"
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(128, 64)
    with aiprof.profile(out, schedule=(1, 1, 3), telemetry=False, quiet=True, memory=True, profile_memory=False) as prof:
        for _ in range(6):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    report = analyze_memory(load_memory(out))
    (dev,) = report.devices
    assert dev.device == "cpu" and len(dev.steps) == 3
    assert dev.peak_allocated_bytes >= 128 * 64 * 4  # at least one activation of the batch
    assert not (out / "memory").exists()  # no CUDA: no allocator history, no stats


class _FakeCuda:
    """torch.cuda's memory API, recording what the capture asks."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.memory = types.SimpleNamespace(
            _record_memory_history=lambda **kw: self.calls.append(("history", kw.get("enabled"))),
            _snapshot=lambda: {"segments": [], "device_traces": [[]]},
        )

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def memory_stats(self) -> dict[str, int]:
        return {"allocated_bytes.all.current": 10, "num_alloc_retries": 2, "reserved_bytes.all.current": 20}

    def current_device(self) -> int:
        return 0


def test_history_only_around_the_recorded_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = _FakeCuda()
    observers: list[Any] = []
    fake = types.SimpleNamespace(cuda=cuda, _C=types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append))
    monkeypatch.setitem(sys.modules, "torch", fake)
    cap = MemoryCapture(tmp_path, Schedule(wait=1, warmup=1, active=2), rank=0)
    for step in range(1, 6):  # step N begins (ProfilerStep#N); steps 2 and 3 are recorded
        cap.on_step(step)
    assert cuda.calls == [("history", "all"), ("history", None)]
    assert len(observers) == 1
    observers[0](0, 1 << 30, 0, 0)  # an OOM: dumped at once
    names = sorted(p.name for p in (tmp_path / "memory").glob("*.pickle"))
    assert names == ["oom.rank0.pickle", "snapshot.rank0.pickle"]
    rows = [json.loads(line) for line in (tmp_path / "memory" / "memory_stats.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4] and rows[0]["num_alloc_retries"] == 2
    # the run directory reads back: the OOM snapshot first, the stats with it
    data = load_memory(tmp_path)
    assert data.source == "snapshot" and len(data.stats) == 5
    assert analyze_memory(data).stats is not None


def test_memory_option_travels_as_json() -> None:
    options = CaptureOptions(memory=True)
    assert CaptureOptions.from_json(options.to_json()).memory is True


def test_empty_run_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MemoryInputError, match="no memory snapshot"):
        load_memory(tmp_path)
