"""Every shared trace decoded with helper processes (cut into many small runs, so that every trace is
shared out) is identical, bit for bit, to the one a single process builds from the same runs."""

from __future__ import annotations

import pytest
from test_load_all_traces import FILES, NOT_TRACES, ROOT
from trace_compare import identical

from aiprof.trace.kineto import source, stream

pytestmark = pytest.mark.skipif(not FILES, reason=f"shared traces not found at {ROOT}")


@pytest.mark.parametrize("rel", [f for f in FILES if f not in NOT_TRACES])
def test_helpers_match_one_process_on_every_shared_trace(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / rel
    monkeypatch.setattr(stream, "CHUNK_BYTES", 256 << 10)
    monkeypatch.setattr(source, "PIECE_BYTES", 64 << 10)
    serial = stream.stream_load(path, workers=0)  # cut the same way (string ids follow the runs)
    if serial is None:
        pytest.skip("not a streamable file (the whole-file path loads it)")
    shared = stream.stream_load(path, workers=2)
    assert shared is not None
    identical(shared, serial)
