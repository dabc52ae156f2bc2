"""The streaming reader gives exactly what the whole-file path gives, wherever the cuts fall."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from kineto_builder import TraceBuilder

from aiprof.trace.kineto import builder as column_builder
from aiprof.trace.kineto import loader, source, stream
from aiprof.trace.model import Trace


def whole_file(path: Path) -> Trace:
    data, _ = loader.read_bytes(path)
    raw = loader.decode(path, data)
    return column_builder.Builder(raw, path).run(raw.events, 0, "file order")


def same(a: Trace, b: Trace) -> None:
    for field in dataclasses.fields(a.columns):
        x, y = getattr(a.columns, field.name), getattr(b.columns, field.name)
        if field.name in ("name", "cat"):
            x, y = np.array(a.strings, dtype=object)[x], np.array(b.strings, dtype=object)[y]
        assert np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else (x == y).all(), field.name
    assert a.event_count == b.event_count
    assert a.base_time_ns == b.base_time_ns and a.devices == b.devices and a.metadata == b.metadata
    assert a.op_args.data == b.op_args.data and a.thread_names == b.thread_names
    assert a.warnings == b.warnings


def tricky_trace(tmp_path: Path, name: str) -> Path:
    b = TraceBuilder()
    b.device_properties(0, "NVIDIA H100 80GB HBM3")
    for step in range(30):
        b.step(step, ts=step * 100, dur=100)
        op = b.cpu_op(
            "weird },{ name ]}", ts=step * 100 + 1, dur=20, shapes=[[4, 8], [8, 16]],
            args={"nested": [{"a": 1}, {"b": [2, {"c": 3}]}], "text": '"}, {"ph": "X"'},
        )
        b.launch(op, kernel_ts=step * 100 + 30, kernel_dur=10)
        b.memory(ts=step * 100 + 2, nbytes=1024, total_allocated=4096, device=0)
    data = json.loads(b.dumps())
    # Kineto writes log lines full of "]" after the events: the array's end must still be found.
    data["INFO"] = ["INFO:x.cpp:1] a]", "b]]"]
    data["traceName"] = "/tmp/x.json"
    path = tmp_path / name
    text = json.dumps(data, indent=1).encode()
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return path


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
@pytest.mark.parametrize("chunk", [64, 300, 4096, 1 << 22])
def test_streaming_equals_whole_file_for_any_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, chunk: int
) -> None:
    path = tricky_trace(tmp_path, name)
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(source, "PIECE_BYTES", max(chunk // 2, 16))
    monkeypatch.setattr(source, "BLOCK_BYTES", 97)
    streamed = stream.stream_load(path)
    assert streamed is not None, "a well-formed trace must stream"
    same(streamed, whole_file(path))


@pytest.mark.parametrize(
    "content",
    [b"[]", b'[{"ph": "X", "ts": 1, "dur": 1}]', b'{"traceEvents": [{"ph": "X", "ts": NaN}]}', b'{"traceEvents": [{"ph"'],
)
def test_unusual_files_fall_back_to_the_whole_file_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    assert stream.stream_load(path) is None


def test_truncated_gzip_falls_back(tmp_path: Path) -> None:
    path = tricky_trace(tmp_path, "t.json.gz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert stream.stream_load(path) is None
