"""Allocator snapshots whose numbers no allocator writes (sizes of 2^80, a device of 2^63, time_us NaN, values
just past int64's range or the reader's): the entry, segment or block holding one is skipped with a warning,
and the plain, streaming and native readers give the same data; ``aiprof memory`` reports (exit 0). The
restricted unpickler is not loosened (tests/memory/test_unpickle.py)."""

from __future__ import annotations

import copy
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiprof.cli import main
from aiprof.memory.snapshot import MAX_TIME_US, MAX_VALUE, read_snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from snapshots import block, entry, segment, snapshot  # noqa: E402

Edit = Callable[[dict[str, Any]], None]


def base(entries: int = 300) -> dict[str, Any]:
    trace = [entry("alloc", 0x1000 + 4096 * i, 4096, 10 + i) for i in range(entries)]
    return snapshot([segment(0x1000, [block(0x1000, 4096), block(0x2000, 4096, "inactive")])], trace)


def at(part: str, key: str, value: Any) -> Edit:
    def edit(s: dict[str, Any]) -> None:
        target = {"entry": lambda: s["device_traces"][0][5], "segment": lambda: s["segments"][0],
                  "block": lambda: s["segments"][0]["blocks"][0]}[part]()
        target[key] = value
    return edit


EXTREMES = [2**80, 2**63, 2**63 - 1, MAX_VALUE + 1, -(2**63), float("nan"), float("inf"), -1e300]
EDITS = [(f"{part}.{key}={value!r}"[:40], at(part, key, value))
         for part, keys in (("entry", ("size", "addr", "stream", "time_us")), ("segment", ("device", "total_size", "address")),
                            ("block", ("size", "requested_size", "address")))
         for key in keys for value in EXTREMES]


def read(path: Path, stream: bool, native: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AIPROF_NATIVE", native)
    data = read_snapshot(path, stream=stream)
    e = data.events
    return (e.t_ns.tolist(), e.addr.tolist(), e.size.tolist(), e.action.tolist(), data.segments.total.tolist(),
            data.blocks.size.tolist(), data.warnings)


@pytest.mark.parametrize("name,edit", EDITS, ids=[n for n, _ in EDITS])
def test_every_path_skips_the_same_out_of_range_values(name: str, edit: Edit, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    doc = base()
    edit(doc)
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(doc))
    got = [read(path, stream, native, monkeypatch) for stream in (True, False) for native in ("1", "0")]
    assert all(g == got[0] for g in got), name
    t, addr, size = (np.asarray(v) for v in got[0][:3])
    assert (np.abs(t) <= MAX_TIME_US * 1000).all() and (np.abs(size) <= MAX_VALUE).all()
    assert (np.abs(addr) <= MAX_VALUE).all()


def test_the_range_rule_keeps_real_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = base(10)
    doc["device_traces"][0][3]["size"] = 80 << 30  # an 80 GiB allocation, a real one
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(doc))
    t, _, size, *_rest, warnings = read(path, False, "1", monkeypatch)
    assert len(size) == 10 and size[3] == 80 << 30 and not warnings


@pytest.mark.parametrize("edit", [at("entry", "size", 2**80), at("segment", "device", 2**63),
                                  at("entry", "time_us", float("nan"))], ids=["size-2^80", "device-2^63", "time-nan"])
def test_aiprof_memory_reports_with_a_warning(edit: Edit, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(base(20))
    edit(doc)
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(doc))
    assert main(["memory", str(path), "--format", "json", "-o", str(tmp_path / "m.json")]) == 0
    assert "skipped" in (tmp_path / "m.json").read_text()
