"""The native columniser (``aiprof/trace/kineto/_columnar.c``) builds every shared trace bit for bit as the
pure-Python path does, and reads every run of them itself (a run it leaves to the pure path is correct
but slow, so one here is a regression)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_load_all_traces import FILES, NOT_TRACES, ROOT
from trace_compare import identical

from aiprof.trace.kineto import builder as column_builder
from aiprof.trace.kineto import stream
from aiprof.trace.model import Trace

pytestmark = [
    pytest.mark.skipif(not FILES, reason=f"shared traces not found at {ROOT}"),
    pytest.mark.skipif(not column_builder.native_enabled(), reason="the native columniser is not built (or AIPROF_NATIVE=0)"),
]


def _load(path: Path, monkeypatch: pytest.MonkeyPatch, native: object) -> tuple[Trace | None, int, int]:
    """Load in this process only (same runs for both paths); how many runs went to the native path and
    how many it gave back."""
    fed = fallbacks = 0
    feed = column_builder.Builder.feed_array

    def counting(builder: column_builder.Builder, blob: bytes | memoryview) -> int:
        nonlocal fed, fallbacks
        before = builder.native_fallbacks
        try:
            return feed(builder, blob)
        finally:
            fed += 1
            fallbacks += builder.native_fallbacks - before

    with monkeypatch.context() as patch:
        patch.setattr(column_builder, "_native", native)
        patch.setattr(column_builder.Builder, "feed_array", counting)
        trace = stream.stream_load(path, workers=0)
    return trace, fed, fallbacks


@pytest.mark.parametrize("rel", [f for f in FILES if f not in NOT_TRACES])
def test_native_matches_pure_on_every_shared_trace(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / rel
    pure, _, _ = _load(path, monkeypatch, None)
    if pure is None:
        pytest.skip("not a streamable file (the whole-file path loads it)")
    native, fed, fallbacks = _load(path, monkeypatch, column_builder._native)
    assert native is not None
    identical(native, pure)
    assert fallbacks == 0, f"{fallbacks} of {fed} runs fell back to the pure-Python path"
