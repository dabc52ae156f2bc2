"""Time per nn.Module (analysis/modules.py): the hierarchy against the TensorBoard plugin's module-view
fixture, forward/backward/device arithmetic on synthetic traces, annotations as modules, none recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kineto_builder import TraceBuilder

import aiprof
from aiprof.analysis.modules import ModuleProfile, module_profile
from aiprof.analysis.steps import step_windows

US = 1000
TB_FIXTURE = Path("kineto-tbplugin/unit-fixtures/TestModuleView.test_build_module_hierarchy.json")


def _by_path(p: ModuleProfile) -> dict[str, Any]:
    return {m.path: m for m in p.modules}


def test_tensorboard_module_view_fixture(traces_dir: Path) -> None:
    """The plugin's test_build_module_hierarchy: two roots, Conv2 and MyModule; MyModule has one child,
    Linear (tb_plugin/test/test_profiler.py, TestModuleView). Over the whole trace, as the plugin counts."""
    trace = aiprof.load(traces_dir / TB_FIXTURE)
    p = module_profile(trace, None)
    assert p.recorded and p.source == "python_function"
    roots = sorted(m.name for m in p.modules if m.parent == -1)
    assert roots == ["Conv2", "MyModule"]
    mods = _by_path(p)
    children = [m.name for m in p.modules if m.parent >= 0 and p.modules[m.parent].name == "MyModule"]
    assert children == ["Linear"] and set(mods) == {"Conv2", "MyModule", "MyModule/Linear"}
    # The events' own numbers: MyModule 3 x 211 µs, Linear 3 x 62 µs, Conv2 1 x 211 µs.
    assert (mods["MyModule"].calls, mods["MyModule"].forward_ns) == (3, 3 * 211 * US)
    assert (mods["MyModule/Linear"].calls, mods["MyModule/Linear"].forward_ns) == (3, 3 * 62 * US)
    assert mods["MyModule"].forward_self_ns == 3 * (211 - 62) * US
    assert (mods["Conv2"].calls, mods["Conv2"].forward_ns) == (1, 211 * US)


def _training_step(b: TraceBuilder, t0: float, seq0: int) -> None:
    """Net_0 > Linear_0 (addmm, seq), ReLU_0 (relu, seq); then the backward ops on another thread."""
    net = b.python("nn.Module: Net_0", t0 + 1, 40)
    b.python("nn.Module: Linear_0", t0 + 2, 20, parent=net)
    mm = b.cpu_op("aten::addmm", ts=t0 + 5, dur=10, seq=seq0)
    b.launch(mm, kernel="sgemm", kernel_ts=t0 + 8, kernel_dur=4)
    b.python("nn.Module: ReLU_0", t0 + 25, 10, parent=net)
    b.cpu_op("aten::relu", ts=t0 + 27, dur=5, seq=seq0 + 1)
    # Backward: the wrapper and its node share the forward op's sequence number; count once (outermost).
    b.cpu_op("autograd::engine::evaluate_function: ReluBackward0", ts=t0 + 50, dur=6, seq=seq0 + 1, fwd_tid=1, tid=2)
    b.cpu_op("ReluBackward0", ts=t0 + 51, dur=4, seq=seq0 + 1, fwd_tid=1, tid=2)
    w = b.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", ts=t0 + 60, dur=20, seq=seq0, fwd_tid=1, tid=2)
    node = b.cpu_op("AddmmBackward0", ts=t0 + 61, dur=15, seq=seq0, fwd_tid=1, tid=2)
    mm_b = b.cpu_op("aten::mm", ts=t0 + 62, dur=10, tid=2)
    b.launch(mm_b, kernel="sgemm_bwd", kernel_ts=t0 + 70, kernel_dur=6)
    b.cpu_op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", ts=t0 + 85, dur=3, tid=2)
    del w, node


def test_forward_backward_and_device_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.step(1, ts=100, dur=100)
    _training_step(b, 0, 10)
    _training_step(b, 100, 20)
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    p = module_profile(trace, step_windows(trace))
    assert p.recorded and p.steps == 2 and p.backward_from == "sequence numbers" and p.has_device
    mods = _by_path(p)
    assert list(mods) == ["Net_0", "Net_0/Linear_0", "Net_0/ReLU_0"]  # depth first, biggest sibling first
    net, lin, relu = mods["Net_0"], mods["Net_0/Linear_0"], mods["Net_0/ReLU_0"]
    assert (net.calls, net.forward_ns, net.forward_self_ns) == (2, 80 * US, 2 * (40 - 20 - 10) * US)
    assert (lin.forward_ns, relu.forward_ns) == (40 * US, 20 * US)
    assert (lin.backward_self_ns, relu.backward_self_ns) == (2 * 20 * US, 2 * 6 * US)
    assert net.backward_self_ns == 0 and net.backward_ns == 2 * 26 * US
    assert (lin.device_forward_ns, lin.device_backward_ns) == (2 * 4 * US, 2 * 6 * US)
    assert (net.device_forward_ns, net.device_backward_ns) == (2 * 4 * US, 2 * 6 * US)
    assert relu.device_forward_ns == 0
    assert p.backward_unattributed_ns == 0  # AccumulateGrad has no sequence number: it is not a linked op
    assert (lin.depth, lin.parent) == (1, 0)


def test_module_annotations_without_stacks(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.annotation("nn.Module: Encoder", ts=10, dur=50)
    b.annotation("nn.Module: Attention", ts=15, dur=20)
    b.annotation("nn.Module: Attention", ts=40, dur=10)
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    p = module_profile(trace, step_windows(trace))
    assert p.source == "annotation"
    mods = _by_path(p)
    assert set(mods) == {"Encoder", "Encoder/Attention"}
    assert (mods["Encoder/Attention"].calls, mods["Encoder/Attention"].forward_ns) == (2, 30 * US)
    assert mods["Encoder"].forward_self_ns == 20 * US


def test_no_modules_says_how_to_record(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mm", ts=10, dur=20)
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    p = module_profile(trace, step_windows(trace))
    assert not p.recorded and "--with-stack" in p.hint and p.modules == []
