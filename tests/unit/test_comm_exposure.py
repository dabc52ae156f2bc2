"""Exposed vs hidden communication per group and phase on a hand-written FSDP-like step, numbers worked by hand:
all-gathers under ``FSDP::pre_forward`` (forward) and, re-gathered, under backward; a reduce-scatter from the
post-backward hook inside ``autograd::engine::evaluate_function``; an all-gather under ``Optimizer.step`` (a
ZeRO-style optimizer); a broadcast whose ops name no phase (the launch time decides) and one launched after
the backward ended (``other``); two process groups; compute kernels that hide part of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiprof
from aiprof.analysis.comm import comm_section
from aiprof.analysis.steps import step_windows
from aiprof.trace.model import Trace

PG = {"dp": {"Process Group Name": "1", "Process Group Description": "mesh_dp", "Group size": 4},
      "tp": {"Process Group Name": "2", "Process Group Description": "mesh_tp", "Group size": 2}}


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(events: list[dict[str, Any]], corr: int, op: str, ts: float, kernel: str, kts: float, kdur: float,
            tid: int = 1, collective: str | None = None, group: str | None = None) -> None:
    """A CPU op at ``ts`` (1 µs) that launches ``kernel`` on the device at ``kts`` for ``kdur`` µs."""
    events.append(_x("cpu_op", op, ts, 1.0, tid, **{"External id": corr}))
    events.append(_x("cuda_runtime", "cudaLaunchKernel", ts + 0.2, 0.5, tid, correlation=corr,
                     **{"External id": corr}))
    meta = ({"Collective name": collective, **PG[group]} if collective and group else {})
    events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7 if collective else 8,
                   "ts": kts, "dur": kdur, "args": {"device": 0, "stream": 7 if collective else 8,
                                                     "correlation": corr, **meta}})


def _trace(tmp_path: Path) -> Trace:
    ev: list[dict[str, Any]] = [_x("user_annotation", "ProfilerStep#1", 0.0, 1000.0)]
    # forward (0-300 µs on the host): FSDP all-gather of the dp group, hidden 20 of its 50 µs by a GEMM
    ev.append(_x("user_annotation", "FSDP::pre_forward", 10.0, 20.0))
    _launch(ev, 1, "_c10d_functional::all_gather_into_tensor", 12.0, "ncclDevKernel_AllGather_RING_LL", 100, 50,
            collective="allgather", group="dp")
    _launch(ev, 2, "aten::mm", 40.0, "volta_sgemm_128x64_nn", 130, 100)  # compute 130-230 µs
    # a broadcast whose ops name no phase, before the first backward op: forward by time; fully exposed 20 µs
    _launch(ev, 3, "c10d::broadcast_", 50.0, "ncclDevKernel_Broadcast_RING_LL", 240, 20,
            collective="broadcast", group="tp")
    # backward (400-700 µs, on the autograd thread): a re-gather and the post-backward reduce-scatter
    ev.append(_x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 400.0, 300.0, tid=2))
    ev.append(_x("user_annotation", "FSDP::pre_backward", 401.0, 10.0, tid=2))
    _launch(ev, 4, "_c10d_functional::all_gather_into_tensor", 402.0, "ncclDevKernel_AllGather_RING_LL", 450, 40,
            tid=2, collective="allgather", group="dp")
    _launch(ev, 5, "aten::mm", 420.0, "volta_sgemm_128x64_nn", 480, 60, tid=2)  # compute 480-540 µs
    _launch(ev, 6, "_c10d_functional::reduce_scatter_tensor", 600.0, "ncclDevKernel_ReduceScatter_RING_LL",
            520, 60, tid=2, collective="reduce_scatter", group="dp")  # 520-580: 20 µs hidden
    # a broadcast launched on the main thread inside the backward span, its ops naming nothing: backward
    _launch(ev, 7, "c10d::broadcast_", 650.0, "ncclDevKernel_Broadcast_RING_LL", 660, 10,
            collective="broadcast", group="tp")
    # the optimizer (720-800 µs): a ZeRO all-gather of the parameters, exposed 30 µs
    ev.append(_x("user_annotation", "Optimizer.step#Zero.step", 720.0, 80.0))
    _launch(ev, 8, "_c10d_functional::all_gather_into_tensor", 730.0, "ncclDevKernel_AllGather_RING_LL", 750, 30,
            collective="allgather", group="dp")
    # after the optimizer and the backward: a tp broadcast by time, for the next step (other), 10 µs
    _launch(ev, 9, "c10d::broadcast_", 850.0, "ncclDevKernel_Broadcast_RING_LL", 900, 10,
            collective="broadcast", group="tp")
    path = tmp_path / "fsdp.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


def test_phases_groups_and_hidden_time_by_hand(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    (d,) = comm_section(trace, step_windows(trace), 50).exposure
    us = 1000
    rows = {(r.group, r.phase, r.collective): (r.kernels, r.comm_ns, r.hidden_ns, r.exposed_ns) for r in d.rows}
    assert rows == {
        ("1", "forward", "all_gather"): (1, 50 * us, 20 * us, 30 * us),
        ("2", "forward", "broadcast"): (1, 20 * us, 0, 20 * us),
        ("1", "backward", "all_gather"): (1, 40 * us, 10 * us, 30 * us),
        ("1", "backward", "reduce_scatter"): (1, 60 * us, 20 * us, 40 * us),
        ("2", "backward", "broadcast"): (1, 10 * us, 0, 10 * us),
        ("1", "optimizer", "all_gather"): (1, 30 * us, 0, 30 * us),
        ("2", "other", "broadcast"): (1, 10 * us, 0, 10 * us),
    }
    # The backward all-gather (450-490) and reduce-scatter (520-580) do not overlap: the phase adds them up
    phases = {p.phase: (p.kernels, p.comm_ns, p.hidden_ns) for p in d.by_phase}
    assert phases == {"forward": (2, 70 * us, 20 * us), "backward": (3, 110 * us, 30 * us),
                      "optimizer": (1, 30 * us, 0), "other": (1, 10 * us, 0)}
    assert [p.phase for p in d.by_phase] == ["forward", "backward", "optimizer", "other"]
    groups = {g.group: (g.group_desc, g.group_size, g.kernels, g.comm_ns, g.exposed_ns) for g in d.by_group}
    assert groups == {"1": ("mesh_dp", 4, 4, 180 * us, 130 * us), "2": ("mesh_tp", 2, 3, 40 * us, 40 * us)}
    assert [g.group for g in d.by_group] == ["1", "2"]  # most exposed first
    assert (d.kernels, d.comm_ns, d.hidden_ns, d.exposed_ns, d.steps) == (7, 220 * us, 50 * us, 170 * us, 1)
    assert d.phase_from_time == 3  # the three broadcasts
    assert d.hidden_pct == round(100 * 50 / 220, 1)


def test_the_exposed_total_is_the_timeline_bucket(tmp_path: Path) -> None:
    from aiprof.analysis.run import analyze_trace

    trace = _trace(tmp_path)
    rank = analyze_trace(trace)
    comm = rank.sections["communication"]
    (d,) = comm.exposure
    assert d.exposed_ns == sum(s.breakdown_ns["communication"] for s in rank.primary.steps)


def test_no_communication_no_exposure(tmp_path: Path) -> None:
    ev = [_x("user_annotation", "ProfilerStep#1", 0.0, 100.0)]
    _launch(ev, 1, "aten::mm", 10.0, "volta_sgemm_128x64_nn", 20, 50)
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    section = comm_section(trace, step_windows(trace), 50)
    assert section.exposure == []
    import msgspec

    assert b"exposure" not in msgspec.json.encode(section)  # absent from the JSON, not an empty list


def test_a_cpu_run_by_hand(tmp_path: Path) -> None:
    """gloo: the host-side collectives are the communication, hidden where another thread's CPU op computes."""
    meta = {"Process Group Name": "0", "Process Group Description": "default_pg", "Group size": 2}
    ev = [
        _x("user_annotation", "ProfilerStep#1", 0.0, 1000.0),
        _x("cpu_op", "aten::mm", 0.0, 100.0),
        _x("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 200.0, 300.0),
        _x("cpu_op", "c10d::allreduce_", 300.0, 100.0),  # backward by its ops; its group from the nested op
        _x("cpu_op", "record_param_comms", 300.0, 100.0, **meta),
        _x("cpu_op", "gloo:all_reduce", 350.0, 100.0, tid=9),  # gloo's thread, no ops around: by time
        _x("cpu_op", "aten::add", 380.0, 40.0, tid=5),  # another thread computes 380-420
        _x("user_annotation", "Optimizer.step#SGD.step", 600.0, 100.0),
        _x("cpu_op", "c10d::allreduce_", 610.0, 30.0),  # optimizer by its ops
        _x("cpu_op", "c10d::broadcast_", 800.0, 20.0),  # after the backward: other
    ]
    path = tmp_path / "gloo.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    (d,) = comm_section(trace, step_windows(trace), 50).exposure
    us = 1000
    # compute: 0-100, 200-300 and 400-500 (the backward op minus its own thread's all-reduce), 380-420
    assert {(r.group, r.phase, r.collective): (r.kernels, r.comm_ns, r.hidden_ns) for r in d.rows} == {
        ("0", "backward", "all_reduce"): (1, 100 * us, 20 * us),
        ("default", "backward", "all_reduce"): (1, 100 * us, 70 * us),
        ("default", "optimizer", "all_reduce"): (1, 30 * us, 0),
        ("default", "other", "broadcast"): (1, 20 * us, 0),
    }
    assert {p.phase: (p.comm_ns, p.hidden_ns) for p in d.by_phase} == {
        "backward": (150 * us, 70 * us), "optimizer": (30 * us, 0), "other": (20 * us, 0)}
    assert [(g.group, g.group_desc, g.group_size, g.comm_ns, g.exposed_ns) for g in d.by_group] == [
        ("0", "default_pg", 2, 100 * us, 80 * us), ("default", None, None, 150 * us, 80 * us)]
    assert (d.device, d.kernels, d.comm_ns, d.hidden_ns, d.exposed_ns, d.phase_from_time) == (
        -1, 4, 200 * us, 70 * us, 130 * us, 2)
    from aiprof.analysis.run import analyze_trace

    rank = analyze_trace(trace)
    assert rank.primary.kind == "cpu"
    assert d.exposed_ns == sum(s.breakdown_ns["communication"] for s in rank.primary.steps) == 130 * us
