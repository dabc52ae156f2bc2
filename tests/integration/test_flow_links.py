"""The op each ``fwdbwd`` flow is bound to: the binary-search path equals the sort-everything path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_load_all_traces import FILES, NOT_TRACES, ROOT

from aiprof.errors import TraceError
from aiprof.trace import links
from aiprof.trace.kineto.loader import load_file
from aiprof.trace.model import Kind, Trace


def _both(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    fb = np.flatnonzero(trace.flows.is_fwdbwd)
    ops = np.flatnonzero(trace.columns.kind == int(Kind.CPU_OP))
    return links._flow_ops(trace, fb), links._flow_ops_by_sort(trace, fb, ops)


@pytest.mark.skipif(not FILES, reason=f"shared traces not found at {ROOT}")
def test_flow_ops_match_on_shared_traces() -> None:
    with_flows = 0
    for rel in FILES:
        if rel in NOT_TRACES:
            continue
        try:
            trace = load_file(ROOT / rel)
        except TraceError:
            continue
        if not trace.flows.is_fwdbwd.any():
            continue
        fast, sorted_ = _both(trace)
        assert np.array_equal(fast, sorted_), rel
        assert (fast >= 0).any(), rel
        with_flows += 1
    assert with_flows >= 5  # the shared traces with fwdbwd flows (7 when this was written)


def test_crowded_instants_and_preferences(tmp_path: Path) -> None:
    """Many ops and flows on the same ns (the sort path takes over) and ties between candidates."""
    events: list[dict[str, object]] = []
    for t in range(3):  # 3 instants, each with 40 ops on 2 threads: some with a sequence number
        for i in range(40):
            args = {"Sequence number": i} if i % 3 == 0 else {}
            events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1 + i % 2,
                           "ts": 100 * t, "dur": 5 + i % 7, "args": args})
        for i in range(60):
            events.append({"ph": "s" if i % 2 == 0 else "f", "cat": "fwdbwd", "name": "fwdbwd", "id": t * 100 + i // 2,
                           "pid": 1, "tid": 1 + i % 2, "ts": 100 * t, "bp": "e"})
    path = tmp_path / "crowded.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_file(path)
    fast, sorted_ = _both(trace)
    assert np.array_equal(fast, sorted_) and (fast >= 0).all()
    fb = np.flatnonzero(trace.flows.is_fwdbwd)
    c = trace.columns
    ops = np.flatnonzero(c.kind == int(Kind.CPU_OP))
    counts = np.searchsorted(c.ts[ops], trace.flows.ts[fb], "right") - np.searchsorted(c.ts[ops], trace.flows.ts[fb])
    assert counts.sum() > 4 * (ops.size + fb.size)  # this trace takes the sort path
    few = np.flatnonzero(trace.flows.is_fwdbwd)[:4]
    assert np.array_equal(links._flow_ops(trace, few), links._flow_ops_by_sort(trace, few, ops))
    chosen = links._flow_ops(trace, few)
    assert (c.seq[chosen] >= 0).all()  # an op with a sequence number wins over a longer one without
