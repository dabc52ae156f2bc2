"""Fuzzing the loader: whatever bytes or events it is given, it returns a Trace or raises one of our
one-line errors (never a raw exception), and valid traces keep their exact ns timestamps."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kineto_builder import TraceBuilder

from aiprof.errors import NoTracesError, TraceError
from aiprof.trace.kineto.loader import load_file
from aiprof.trace.model import Trace

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SEED_TRACE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "hta" / "cpu_only"


def try_load(path: Path) -> Trace | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return load_file(path)
        except (TraceError, NoTracesError) as err:
            assert "\n" not in str(err) and str(err)
            return None


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
keys = st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "bp", "s"])
phases = st.sampled_from(["X", "i", "M", "s", "f", "C", "B", "", "x"])
cats = st.sampled_from(["cpu_op", "kernel", "Kernel", "gpu_memcpy", "cuda_runtime", "ac2g", "python_function", "?"])
arg_keys = st.sampled_from(["External id", "correlation", "stream", "device", "Bytes", "grid", "Input Dims", "Python id"])
events = st.one_of(
    values,
    st.dictionaries(keys, values, max_size=8),
    st.fixed_dictionaries(
        {"ph": phases, "cat": cats, "name": st.text(max_size=6), "pid": values, "tid": values,
         "ts": values, "dur": values, "args": st.dictionaries(arg_keys, values, max_size=4)}
    ),
)


@FUZZ
@given(st.lists(events, max_size=12), st.booleans(), st.booleans())
def test_random_event_lists(tmp_path: Path, items: list[Any], bare: bool, gz: bool) -> None:
    doc: Any = items if bare else {"traceEvents": items, "baseTimeNanoseconds": 5}
    data = json.dumps(doc).encode()
    path = tmp_path / "t.json"
    path.write_bytes(gzip.compress(data) if gz else data)
    trace = try_load(path)
    if trace is not None:
        assert (trace.columns.dur >= 0).all() and np.all(np.diff(trace.columns.ts) >= 0)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(data)
    try_load(path)
    path.write_bytes(b"\x1f\x8b" + data)
    try_load(path)


def _seed() -> bytes:
    files = sorted(SEED_TRACE.glob("*.json.gz"))
    if files:
        return gzip.decompress(files[0].read_bytes())
    b = TraceBuilder()
    b.launch(b.cpu_op("aten::mm", ts=1, dur=5), kernel_ts=3, kernel_dur=2)
    return b.dumps().encode()


SEED = _seed()


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.binary(max_size=4), st.integers(0, 6)), min_size=1, max_size=6),
       st.integers(0, len(SEED)))
def test_mutated_real_trace(tmp_path: Path, edits: list[tuple[int, bytes, int]], cut: int) -> None:
    data = bytearray(SEED)
    for at, insert, remove in edits:
        data[at : at + remove] = insert
    path = tmp_path / "t.json"
    path.write_bytes(bytes(data[: max(cut, len(data) // 2)]))
    try_load(path)


@FUZZ
# relative timestamps up to 2^43 µs (~100 days) convert exactly; see builder._to_ns
@given(st.lists(st.tuples(st.integers(0, 8_796_093_022_207_999), st.integers(0, 10**12)), min_size=1, max_size=30),
       st.sampled_from(["new", "legacy"]))
def test_valid_traces_round_trip_ns(tmp_path: Path, spans: list[tuple[int, int]], schema: str) -> None:
    b = TraceBuilder(schema, legacy_origin_us=0)  # type: ignore[arg-type]
    expected = []
    for i, (ts_ns, dur_ns) in enumerate(spans):
        if schema == "legacy":
            ts_ns, dur_ns = ts_ns // 1000 * 1000, dur_ns // 1000 * 1000
        ev = b.cpu_op(f"op{i}", ts=_us(ts_ns), dur=_us(dur_ns))  # type: ignore[arg-type]
        expected.append((b.ns(ev, "ts"), b.ns(ev, "dur"), f"op{i}"))
        assert expected[-1][:2] == (ts_ns, dur_ns)
    path = b.write(tmp_path / "t.json.gz")
    trace = load_file(path)
    got = sorted((int(t), int(d), trace.strings[n]) for t, d, n in zip(trace.columns.ts, trace.columns.dur, trace.columns.name))
    assert got == sorted(expected)


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"
