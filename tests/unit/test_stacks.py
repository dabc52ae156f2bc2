"""Host time by Python frame (analysis/stacks.py) on tiny synthetic traces: exact self/total arithmetic,
recursion counted once, clipping to steps, misnested spans, the time-nesting fallback, user frames, source
lines given to findings, and the 'not recorded' result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kineto_builder import TraceBuilder

import aiprof
from aiprof.analysis.stacks import (
    NOT_RECORDED,
    WITH_STACK_OVERHEAD_PCT,
    StackProfile,
    source_lines_of,
    is_user_frame,
    stack_profile,
)
from aiprof.analysis.steps import step_windows

US = 1000  # ns per µs


def _load(b: TraceBuilder, tmp_path: Path) -> Any:
    return aiprof.load(b.write(tmp_path / "t.json"))


def _frame(p: StackProfile, name: str) -> Any:
    found = [f for f in p.frames + p.user_lines if f.name == name]
    assert found, (name, [f.name for f in p.frames])
    return found[0]


def _one_step(b: TraceBuilder) -> None:
    """One step, 0..100 µs: main (0-100) > step (10-60) > _call_impl (20-50) > _call_impl (22-48) >
    linear (25-45); a second user call 70-90 with a library frame 72-80 under it."""
    b.step(0, ts=0, dur=100)
    main = b.python("train.py(10): main", 0, 100)
    step = b.python("train.py(20): step", 10, 50, parent=main)
    outer = b.python("torch/nn/modules/module.py(1782): _call_impl", 20, 30, parent=step)
    inner = b.python("torch/nn/modules/module.py(1782): _call_impl", 22, 26, parent=outer)
    b.python("<built-in function linear>", 25, 20, parent=inner)
    other = b.python("train.py(30): log", 70, 20, parent=main)
    b.python("logging/__init__.py(1500): info", 72, 8, parent=other)


def test_self_and_total_are_exact(tmp_path: Path) -> None:
    b = TraceBuilder()
    _one_step(b)
    trace = _load(b, tmp_path)
    p = stack_profile(trace, step_windows(trace))
    assert p.recorded and p.steps == 1 and p.window_ns == 100 * US and p.python_ns == p.main_python_ns == 100 * US
    assert p.parents_from == "Python parent id"
    main = _frame(p, "train.py(10): main")
    assert (main.self_ns, main.total_ns, main.calls) == (30 * US, 100 * US, 1)  # 100 - 50 - 20
    step = _frame(p, "train.py(20): step")
    assert (step.self_ns, step.total_ns) == (20 * US, 50 * US)
    call = _frame(p, "torch/nn/modules/module.py(1782): _call_impl")
    # Recursion: the two nested calls' self times add (4 + 6), the total counts the outer call once.
    assert (call.calls, call.self_ns, call.total_ns) == (2, 10 * US, 30 * US)
    linear = _frame(p, "<built-in function linear>")
    assert (linear.self_ns, linear.total_ns, linear.user) == (20 * US, 20 * US, False)
    # own: a user frame's self time plus the library frames below it, down to the next user frame.
    own = {f.name: f.own_ns for f in p.user_lines}
    assert own == {"train.py(20): step": 50 * US, "train.py(10): main": 30 * US, "train.py(30): log": 20 * US}
    assert [f.name for f in p.user_lines][0] == "train.py(20): step"
    assert p.no_user_frame_ns == 0


def test_call_tree_nodes_add_up(tmp_path: Path) -> None:
    b = TraceBuilder()
    _one_step(b)
    trace = _load(b, tmp_path)
    p = stack_profile(trace, step_windows(trace))
    by_name = {n.name: n for n in p.tree if n.name.startswith(("train", "<"))}
    root = by_name["train.py(10): main"]
    assert root.parent == -1 and root.total_ns == 100 * US and root.self_ns == 30 * US
    kids = [n for n in p.tree if n.parent == root.id]
    assert sum(k.total_ns for k in kids) + root.self_ns == root.total_ns
    assert sum(n.self_ns for n in p.tree) == p.python_ns  # every ns in exactly one node's self time
    calls = [n for n in p.tree if n.name.endswith("_call_impl")]
    assert len(calls) == 2 and calls[1].parent == calls[0].id  # a path per depth: recursion is two nodes


def test_time_is_clipped_to_the_steps_and_summed(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=40)
    b.step(1, ts=60, dur=40)
    root = b.python("train.py(5): loop", 0, 100)
    b.python("train.py(9): between", 45, 10, parent=root)  # outside both steps
    b.python("train.py(12): work", 30, 40, parent=root)  # 10 µs in step 0, 10 in step 1
    trace = _load(b, tmp_path)
    p = stack_profile(trace, step_windows(trace))
    assert p.steps == 2 and p.window_ns == 80 * US
    assert _frame(p, "train.py(12): work").total_ns == 20 * US
    assert _frame(p, "train.py(5): loop").self_ns == 60 * US
    assert all(f.name != "train.py(9): between" for f in p.frames)  # no time inside a step


def test_misnested_spans_are_cut_so_self_times_add_up(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    root = b.python("train.py(1): run", 0, 50)
    b.python("train.py(2): late", 40, 30, parent=root)  # outlives its parent by 20 µs
    b.python("train.py(3): a", 5, 20, parent=root)
    b.python("train.py(4): b", 15, 20, parent=root)  # overlaps its sibling by 10 µs
    trace = _load(b, tmp_path)
    p = stack_profile(trace, step_windows(trace))
    assert _frame(p, "train.py(2): late").total_ns == 10 * US
    assert _frame(p, "train.py(4): b").total_ns == 10 * US
    assert sum(f.self_ns for f in p.frames) == _frame(p, "train.py(1): run").total_ns == 50 * US


def test_parents_by_time_without_python_ids(tmp_path: Path) -> None:
    b = TraceBuilder()
    _one_step(b)
    for ev in b.events:
        if ev.get("cat") == "python_function":
            ev["args"] = {}
    trace = _load(b, tmp_path)
    p = stack_profile(trace, step_windows(trace))
    assert p.parents_from == "time nesting"
    assert _frame(p, "train.py(10): main").self_ns == 30 * US
    assert _frame(p, "torch/nn/modules/module.py(1782): _call_impl").total_ns == 30 * US


def test_not_recorded_says_how_to_record(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mm", ts=10, dur=20)
    trace = _load(b, tmp_path)
    p = stack_profile(trace, step_windows(trace))
    assert not p.recorded and "aiprof run --with-stack" in p.hint and "overhead" in p.hint
    assert p.hint == NOT_RECORDED.format(pct=WITH_STACK_OVERHEAD_PCT) and f"{WITH_STACK_OVERHEAD_PCT:.0f} %" in p.hint


@pytest.mark.parametrize(
    ("name", "user"),
    [
        ("train.py(42): step", True),
        ("my_project/models/net.py(7): forward", True),
        ("/home/me/code/train.py(3): main", True),
        ("torch/nn/modules/module.py(1782): _call_impl", False),
        ("typing.py(2268): cast", False),
        ("logging/__init__.py(1720): getEffectiveLevel", False),
        ("/usr/lib/python3.11/threading.py(359): wait", False),
        ("/venv/lib/python3.11/site-packages/transformers/x.py(1): f", False),
        ("<built-in method add_ of Tensor object at 0x7f>", False),
        ("nn.Module: Linear_0", False),
        ("<frozen importlib._bootstrap>(1207): _find_and_load", False),
        ("/tmp/torchinductor_root/ab/cabc.py(12): call", False),
        ("aiprof/capture/session.py(88): step", False),
        ("aiprof/workloads/planted.py(120): step", True),
    ],
)
def test_user_frames(name: str, user: bool) -> None:
    assert is_user_frame(name) is user


def test_findings_naming_ops_get_their_source_lines(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    main = b.python("train.py(10): main", 0, 100)
    fwd = b.python("model.py(33): forward", 5, 60, parent=main)
    lib = b.python("torch/nn/functional.py(1): relu", 10, 30, parent=fwd)
    b.cpu_op("aten::relu", ts=12, dur=20)
    b.cpu_op("aten::mm", ts=70, dur=25)  # under main only
    del lib
    trace = _load(b, tmp_path)
    evidences: list[dict[str, Any]] = [
        {"top_ops": [{"name": "aten::relu", "ns_per_step": 1}]},
        {"ops": [{"op": "aten::mm"}, {"op": "aten::relu"}]},
        {"source_line": "kept.py(1): f", "top_ops": [{"name": "aten::mm"}]},
        {"note": "aten::mm"},  # not under an op key: not an op reference
    ]
    before = [dict(e) for e in evidences]
    assert source_lines_of(trace, step_windows(trace), evidences) == [
        ["model.py(33): forward"],
        ["train.py(10): main", "model.py(33): forward"],  # by op time
        [],  # already has a source line
        [],
    ]
    assert evidences == before  # the evidence is not touched: the diagnosis adds the lines


def test_source_lines_need_stacks(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::relu", ts=12, dur=20)
    trace = _load(b, tmp_path)
    assert source_lines_of(trace, step_windows(trace), [{"top_ops": [{"name": "aten::relu"}]}]) == [[]]


def test_the_diagnosis_adds_host_time(tmp_path: Path) -> None:
    from aiprof.analysis.modules import ModuleProfile
    from aiprof.analysis.run import analyze_trace
    from aiprof.pipeline import diagnose_hook

    b = TraceBuilder()
    _one_step(b)
    trace = _load(b, tmp_path)
    out = diagnose_hook(trace, analyze_trace(trace))
    assert isinstance(out.stacks, StackProfile) and out.stacks.recorded
    assert isinstance(out.modules, ModuleProfile) and not out.modules.recorded
    bare = TraceBuilder()
    bare.step(0, ts=0, dur=10)
    (tmp_path / "x").mkdir()
    nsys = _load(bare, tmp_path / "x")
    nsys.metadata["source"] = "nsys"  # an Nsight Systems report: no advice to use --with-stack
    out = diagnose_hook(nsys, analyze_trace(nsys))
    assert out.stacks is None and out.modules is None


def test_a_compiled_backward_kernel_takes_the_line_of_its_forward_graph(tmp_path: Path) -> None:
    """Inductor's backward kernels run on the autograd thread under CompiledFunctionBackward, with no user
    frame above them: they take the line of the forward graph (CompiledFunction) that made the node."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=200)
    main = b.python("train.py(10): main", 0, 200)
    fwd_line = b.python("model.py(42): forward", 5, 60, parent=main)
    b.cpu_op("Torch-Compiled Region: 0/0", ts=6, dur=50)
    graph = b.cpu_op("CompiledFunction", ts=8, dur=40, seq=7)
    b.launch(graph, kernel="triton_poi_fused_gelu_0", kernel_ts=12, kernel_dur=5)
    b.python("train.py(12): main", 100, 90, parent=main)  # loss.backward(): the main thread waits
    bwd = b.cpu_op("CompiledFunctionBackward", ts=110, dur=60, seq=7, fwd_tid=1, tid=2)
    kernel_op = b.cpu_op("triton_red_fused_sum_0", ts=115, dur=20, tid=2)
    b.launch(kernel_op, kernel="triton_red_fused_sum_0", kernel_ts=118, kernel_dur=9)
    del fwd_line, bwd
    trace = _load(b, tmp_path)
    assert source_lines_of(trace, step_windows(trace), [{"kernel": "triton_red_fused_sum_0"},
                                                        {"kernel": "triton_poi_fused_gelu_0"}]) == [
        ["model.py(42): forward"], ["model.py(42): forward"]]
