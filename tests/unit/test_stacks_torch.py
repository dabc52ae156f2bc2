"""Python stacks and modules on real torch.profiler traces (CPU, a tiny model, a few steps): the test's own
frames are the user lines, the module hierarchy is the model's, backward time lands on the module whose
forward op caused it, and ``aiprof.profile(with_stack=True)`` gives a report with both sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import aiprof  # noqa: E402
from aiprof.analysis.modules import module_profile  # noqa: E402
from aiprof.analysis.stacks import stack_profile  # noqa: E402
from aiprof.analysis.steps import step_windows  # noqa: E402


class Block(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.act = torch.nn.ReLU()

    def forward(self, x: Any) -> Any:
        return self.act(self.fc(x))


class Net(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.body = Block()
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x: Any) -> Any:
        return self.head(self.body(x))


def train_step(model: Any, opt: Any, x: Any) -> None:
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()


def _record(tmp_path: Path, with_stack: bool) -> Path:
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3), with_stack=with_stack,
                 record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(4):
            train_step(model, opt, x)
            prof.step()
    return path


def test_real_stacks_and_modules(tmp_path: Path) -> None:
    trace = aiprof.load(_record(tmp_path, with_stack=True))
    windows = step_windows(trace)
    stacks = stack_profile(trace, windows)
    assert stacks.recorded and stacks.steps == 3 and stacks.parents_from == "Python parent id"
    names = [f.name for f in stacks.user_lines]
    assert any(n.endswith(": train_step") and "test_stacks_torch.py(" in n for n in names), names
    assert any(n.endswith(": forward") for n in names)
    assert not any(n.startswith(("torch/", "<built-in")) for n in names)
    step = next(f for f in stacks.user_lines if f.name.endswith(": train_step"))
    assert step.calls == 3 and 0 < step.own_ns <= step.total_ns <= stacks.window_ns
    assert sum(f.self_ns for f in stacks.frames) <= stacks.python_ns
    modules = module_profile(trace, windows)
    paths = [m.path for m in modules.modules]
    assert set(paths) == {"Net_0", "Net_0/Block_0", "Net_0/Block_0/Linear_0", "Net_0/Block_0/ReLU_0", "Net_0/Linear_1"}
    by = {m.path: m for m in modules.modules}
    assert all(by[p].calls == 3 for p in paths)
    assert modules.backward_from in ("fwdbwd flows", "sequence numbers")
    # Each Linear's addmm has a backward op (AddmmBackward0) paired with it: its module gets the time.
    assert by["Net_0/Block_0/Linear_0"].backward_self_ns > 0 and by["Net_0/Linear_1"].backward_self_ns > 0
    assert by["Net_0"].backward_ns >= by["Net_0/Block_0"].backward_ns + by["Net_0/Linear_1"].backward_ns
    net = by["Net_0"]
    assert net.forward_ns >= by["Net_0/Block_0"].forward_ns + by["Net_0/Linear_1"].forward_ns


def test_real_trace_without_stacks(tmp_path: Path) -> None:
    trace = aiprof.load(_record(tmp_path, with_stack=False))
    windows = step_windows(trace)
    assert not stack_profile(trace, windows).recorded
    assert not module_profile(trace, windows).recorded


def test_profile_api_with_stack_report(tmp_path: Path) -> None:
    from aiprof import app
    from aiprof.analysis.modules import ModuleProfile
    from aiprof.analysis.stacks import StackProfile

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    out = tmp_path / "run"
    with aiprof.profile(out, schedule=(0, 1, 2), telemetry=False, quiet=True, with_stack=True) as prof:
        for _ in range(4):
            train_step(model, opt, x)
            prof.step()
    doc = app.analyze([out], app.AnalyzeOptions(workers=1))
    stacks, modules = doc.ranks[0].stacks, doc.ranks[0].modules
    assert isinstance(stacks, StackProfile) and stacks.recorded
    assert any(f.name.endswith(": train_step") for f in stacks.user_lines)
    assert isinstance(modules, ModuleProfile) and modules.modules[0].path == "Net_0"
