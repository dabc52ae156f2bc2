"""Inferred categories by phase and lifetime (Kineto traces), and their agreement with torch's own."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.model import CATEGORY_NAMES, Action

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory_categories.py"


def _span(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _mem(ts: float, nbytes: int, addr: int, total: int) -> dict[str, Any]:
    args = {"Bytes": nbytes, "Addr": addr, "Device Type": 0, "Device Id": -1, "Total Allocated": total,
            "Total Reserved": total}
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": args}


def _categories(tmp_path: Path, events: list[dict[str, Any]]) -> dict[int, str]:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    data = load_memory(path)
    analyze_memory(data)
    ev = data.events
    rows = np.flatnonzero(ev.action == int(Action.ALLOC))
    return {int(ev.addr[r]): CATEGORY_NAMES[ev.category[r]] for r in rows}


def test_step_tail_allocations_follow_their_lifetime(tmp_path: Path) -> None:
    # two steps: forward [0, 100), backward [100, 200), optimizer [200, 300), then a tail [300, 400) where the
    # loop keeps a copy of the output (addr 4, never freed) and computes a metric (addr 5, freed in the step)
    events: list[dict[str, Any]] = []
    for k in range(2):
        t0 = 1000.0 * k
        events += [
            _span(f"ProfilerStep#{k}", t0, 400, cat="user_annotation"),
            _span("autograd::engine::evaluate_function: MmBackward0", t0 + 100, 100),
            _span("Optimizer.step#Adam.step", t0 + 200, 100, cat="user_annotation"),
        ]
    base = 10 * 1024
    events += [
        _mem(10, 1024, 1, base + 1024),  # forward, freed in backward: activation
        _mem(150, -1024, 1, base),
        _mem(250, 4096, 2, base + 4096),  # optimizer, live past it: optimizer state
        _mem(320, 512, 4, base + 4608),  # tail, kept past the step
        _mem(330, 256, 5, base + 4864),  # tail, freed within the step
        _mem(340, -256, 5, base + 4608),
        _mem(1010, 64, 6, base + 4672),
    ]
    cats = _categories(tmp_path, events)
    assert cats[1] == "activation" and cats[2] == "optimizer_state"
    assert cats[4] == "activation"
    assert cats[5] == "temporary"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("memory_categories_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.torch
@pytest.mark.parametrize("story", ["leak", "optimizer"])
def test_agreement_with_torch_memory_profile(tmp_path: Path, story: str) -> None:
    pytest.importorskip("torch")
    bench = _bench()
    cmp = bench.compare(*bench.record(tmp_path, story))
    recorded = cmp.torch_recorded
    assert cmp.peak_bytes == sum(cmp.mine.values())
    assert cmp.recorded_bytes == sum(recorded.values()) > 0  # the same bytes, at one instant
    assert cmp.unknown() <= 0.05
    if story == "leak":
        assert cmp.agreement() >= 0.9
    else:  # Adam: state and gradients exactly as torch says; the rest is torch's labels of Adam's `denom`
        assert cmp.mine_recorded["optimizer_state"] == recorded["optimizer_state"] > 0
        assert cmp.mine_recorded["gradient"] == recorded["gradient"] > 0
