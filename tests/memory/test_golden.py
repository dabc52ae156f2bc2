"""Golden results: the memory report and the event columns of fixed inputs, byte for byte as they were
before the analysis was made faster (``fixtures/golden_*.json``). A change that alters any figure fails here;
regenerate the fixtures (``python tests/memory/test_golden.py``) only for an intended change of results."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from aiprof.memory.analysis import analyze_memory
from aiprof.memory.load import load_memory
from aiprof.memory.model import MemoryData

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
SHARED_SNAPSHOT = HERE.parents[1] / ".." / "shared" / "traces" / "memory" / "transformer_lm_snapshot.pickle"


def _digest(values: Any) -> str:
    return hashlib.sha1(np.ascontiguousarray(values).tobytes()).hexdigest() + ":" + str(values.dtype)


def _columns(data: MemoryData) -> dict[str, str]:
    out = {f"events.{name}": _digest(getattr(data.events, name)) for name in data.events.__dataclass_fields__}
    for table in ("segments", "blocks"):
        value = getattr(data, table)
        if value is not None:
            out.update({f"{table}.{name}": _digest(getattr(value, name)) for name in value.__dataclass_fields__})
    out["stacks"] = hashlib.sha1(repr(data.stacks).encode()).hexdigest()
    out["seeded_blocks"] = str(data.seeded_blocks)
    return out


def result(path: Path) -> dict[str, Any]:
    """What the golden files hold for ``path``: column digests as read and after the analysis, and the report."""
    data = load_memory(path)
    read = _columns(data)
    report = analyze_memory(data)
    doc = msgspec.to_builtins(report)
    doc.pop("path")  # where the input lay
    for device in doc["devices"]:  # the timeline's points by digest (keeps the fixture small)
        device["timeline"] = hashlib.sha1(json.dumps(device["timeline"], sort_keys=True).encode()).hexdigest()
    return {"read": read, "analysed": _columns(data), "report": doc}


def synthetic(path: Path) -> Path:
    """The benchmark's synthetic snapshot at ~300 KB (forward/backward-like live set, shared frames)."""
    spec = importlib.util.spec_from_file_location("bench_memory_snapshot", HERE.parents[1] / "bench" / "memory_snapshot.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    trace, segments, _ = bench.synthetic_parts(300_000)
    entries = list(trace)
    obj = {"segments": segments, "device_traces": [entries], "allocator_settings": {"expandable_segments": False},
           "external_annotations": []}
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


def _inputs(tmp: Path) -> dict[str, Path]:
    return {"shared_snapshot": SHARED_SNAPSHOT, "synthetic_snapshot": synthetic(tmp / "synthetic.pickle")}


@pytest.mark.parametrize("name", ["shared_snapshot", "synthetic_snapshot"])
def test_results_equal_the_golden_ones(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _inputs(tmp_path)[name]
    if not path.exists():
        pytest.skip(f"{path} is not here")
    want = json.loads((FIXTURES / f"golden_{name}.json").read_text())
    got = json.loads(json.dumps(result(path)))
    assert got["read"] == want["read"]
    assert got["analysed"] == want["analysed"]
    assert got["report"] == want["report"]


@pytest.mark.parametrize("native", ["1", "0"])
def test_synthetic_without_the_native_scan_is_the_same(native: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPROF_NATIVE", native)
    want = json.loads((FIXTURES / "golden_synthetic_snapshot.json").read_text())
    got = json.loads(json.dumps(result(synthetic(tmp_path / "s.pickle"))))
    assert got == want


if __name__ == "__main__":  # regenerate
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, path in _inputs(Path(tmp)).items():
            (FIXTURES / f"golden_{name}.json").write_text(json.dumps(result(path), indent=1, sort_keys=True) + "\n")
            print(name, (FIXTURES / f"golden_{name}.json").stat().st_size, file=sys.stderr)
