"""Op statistics and the forward→backward link on tiny hand-written Kineto traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

import aiprof
from aiprof.analysis.ops import cpu_self_ns, op_stats, top_level_ops
from aiprof.trace.links import forward_of
from aiprof.trace.model import Trace


def op(name: str, ts: float, dur: float, ext: int, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"External id": ext, **args}}


def launch(ts: float, corr: int, ext: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 2,
            "args": {"correlation": corr, "External id": ext}}


def kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def load(tmp_path: Path, events: list[dict[str, Any]]) -> Trace:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


def linear_trace(tmp_path: Path) -> Trace:
    """aten::linear [0,100) > aten::t [5,15) and aten::addmm [20,90) (launches gemm, 50 µs);
    aten::linear itself launches a 10 µs bias kernel at 95; a second top-level aten::relu launches one."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 200},
        op("aten::linear", 0.0, 100.0, 1, **{"Input Dims": [[8, 16], [32, 16], [32]]}),
        op("aten::t", 5.0, 10.0, 2, **{"Input Dims": [[32, 16]]}),
        op("aten::addmm", 20.0, 70.0, 3, **{"Input Dims": [[32], [8, 16], [16, 32]]}),
        launch(30.0, 10, 3),
        kernel("gemm", 40.0, 50.0, 10),
        launch(95.0, 11, 1),
        kernel("bias", 100.0, 10.0, 11),
        op("aten::relu", 120.0, 30.0, 4, **{"Input Dims": [[8, 32]]}),
        launch(125.0, 12, 4),
        kernel("relu", 130.0, 5.0, 12),
        op("aten::relu", 160.0, 30.0, 5, **{"Input Dims": [[4, 32]]}),
    ]
    return load(tmp_path, events)


def test_self_cpu_and_gpu_self_and_total(tmp_path: Path) -> None:
    trace = linear_trace(tmp_path)
    stats = {g.name: g for g in op_stats(trace).groups}
    linear = stats["aten::linear"]
    assert linear.cpu_total_ns == 100_000
    assert linear.cpu_self_ns == 100_000 - 10_000 - 70_000
    assert linear.gpu_self_ns == 10_000 and linear.kernel_count_self == 1
    assert linear.gpu_total_ns == 60_000 and linear.kernel_count_total == 2
    addmm = stats["aten::addmm"]
    assert addmm.cpu_self_ns == 70_000  # the launch call stays in self time
    assert addmm.gpu_self_ns == addmm.gpu_total_ns == 50_000
    assert stats["aten::t"].gpu_total_ns == 0
    relu = stats["aten::relu"]
    assert relu.count == 2 and relu.cpu_total_ns == 60_000 and relu.cpu_mean_ns == 30_000
    assert relu.gpu_total_ns == 5_000 and relu.kernel_count_total == 1


def test_top_level_only_adds_up_to_all_gpu_work(tmp_path: Path) -> None:
    trace = linear_trace(tmp_path)
    top = op_stats(trace, top_level_only=True)
    assert {g.name for g in top.groups} == {"aten::linear", "aten::relu"}  # ProfilerStep is not an op
    assert top.op_count == 3
    assert sum(g.gpu_total_ns for g in top.groups) == 65_000
    mask = top_level_ops(trace)
    assert {trace.name_of(int(r)) for r in np.flatnonzero(mask)} == {"aten::linear", "aten::relu"}


def test_group_by_input_shapes(tmp_path: Path) -> None:
    trace = linear_trace(tmp_path)
    groups = op_stats(trace, by_shapes=True).groups
    relus = sorted((g.input_shapes, g.count, g.gpu_total_ns) for g in groups if g.name == "aten::relu")
    assert relus == [("[[4,32]]", 1, 0), ("[[8,32]]", 1, 5_000)]
    out = msgspec.to_builtins(op_stats(trace, by_shapes=True))
    json.dumps(out)
    assert out["by_shapes"] is True and all("cpu_self_ns" in g for g in out["groups"])


def test_self_time_is_never_negative_with_overhanging_child(tmp_path: Path) -> None:
    # Clock skew: the child ends after the parent.
    trace = load(tmp_path, [op("outer", 0.0, 10.0, 1), op("inner", 5.0, 20.0, 2)])
    outer = int(np.flatnonzero(trace.columns.ts == 0)[0])
    assert cpu_self_ns(trace)[outer] == 5_000


def test_forward_of_by_sequence_number_picks_the_last_started_forward_op(tmp_path: Path) -> None:
    events = [
        op("aten::linear", 0.0, 50.0, 1, tid=10, **{"Sequence number": 7, "Fwd thread id": 0}),
        op("aten::t", 1.0, 5.0, 2, tid=10, **{"Sequence number": 7, "Fwd thread id": 0}),
        op("aten::addmm", 10.0, 30.0, 3, tid=10, **{"Sequence number": 8, "Fwd thread id": 0}),
        op("autograd::engine::evaluate_function: AddmmBackward0", 100.0, 20.0, 4, tid=20,
           **{"Sequence number": 8, "Fwd thread id": 1}),
        op("AddmmBackward0", 101.0, 15.0, 5, tid=20, **{"Sequence number": 8, "Fwd thread id": 1}),
        op("TBackward0", 130.0, 5.0, 6, tid=20, **{"Sequence number": 7, "Fwd thread id": 1}),
        op("OrphanBackward0", 140.0, 5.0, 7, tid=20, **{"Sequence number": 99, "Fwd thread id": 1}),
    ]
    trace = load(tmp_path, events)
    fwd = forward_of(trace)
    named = {trace.name_of(int(r)): trace.name_of(int(fwd[r])) for r in np.flatnonzero(fwd >= 0)}
    assert named == {
        "autograd::engine::evaluate_function: AddmmBackward0": "aten::addmm",
        "AddmmBackward0": "aten::addmm",
        "TBackward0": "aten::t",
    }
    orphan = int(np.flatnonzero(trace.columns.ts == 140_000)[0])
    assert fwd[orphan] == -1
    assert (fwd[trace.columns.seq < 0] == -1).all()


def test_forward_of_prefers_the_fwdbwd_flow(tmp_path: Path) -> None:
    events = [
        op("aten::mul", 0.0, 10.0, 1, tid=10, **{"Sequence number": 3, "Fwd thread id": 0}),
        op("aten::mul", 20.0, 10.0, 2, tid=10, **{"Sequence number": 3, "Fwd thread id": 0}),
        op("MulBackward0", 100.0, 10.0, 3, tid=20, **{"Sequence number": 3, "Fwd thread id": 1}),
        # The flow says the *first* mul is the forward op (sequence rule alone would pick the second).
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 42, "pid": 1, "tid": 10, "ts": 0.0},
        {"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 42, "pid": 1, "tid": 20, "ts": 100.0, "bp": "e"},
    ]
    trace = load(tmp_path, events)
    fwd = forward_of(trace)
    bwd = int(np.flatnonzero(trace.columns.ts == 100_000)[0])
    assert trace.columns.ts[fwd[bwd]] == 0


def test_empty_op_stats(tmp_path: Path) -> None:
    trace = load(tmp_path, [kernel("k", 0.0, 1.0, 1)])
    assert op_stats(trace).groups == ()
    assert (forward_of(trace) == -1).all()
    assert msgspec.to_builtins(op_stats(trace, top_level_only=True))["op_count"] == 0
    with pytest.raises(KeyError):
        _ = {g.name: g for g in op_stats(trace).groups}["x"]
