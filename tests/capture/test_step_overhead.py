"""What aiprof does per step stays cheap without losing a feature (issue #23): idle profiler steps skip
torch.profiler's ``step()`` yet record the scheduled steps; the inference detector stands down in a
training loop before a ``torch.compile``'d model is traced (no recompilation, no hooks left), and still
finds the model of a no-grad loop, eager or compiled. Behaviour only: no timing is asserted here (the cost
is measured in ``bench/compile_capture.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from capture_helpers import meta_of, step_names

import aiprof
from aiprof.capture import steps
from aiprof.capture.options import Schedule

torch = pytest.importorskip("torch")


def _global_hooks() -> int:
    from torch.nn.modules import module as module_mod

    return len(module_mod._global_forward_pre_hooks) + len(module_mod._global_forward_hooks)


def test_idle_until_agrees_with_torch_profiler_schedule() -> None:
    from torch.profiler import ProfilerAction, schedule

    for s in (Schedule(), Schedule(1, 1, 2, 3, 2), Schedule(0, 2, 1, 0), Schedule(4, 0, 1, 2, 0), Schedule(2, 1, 1, 0, 5)):
        fn = schedule(wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat, skip_first=s.skip_first)
        busy = [i for i in range(80) if fn(i) != ProfilerAction.NONE]
        for step in range(60):
            expected = next((i for i in busy if i >= step), None)
            got = s.idle_until(step)
            assert (got if got != float("inf") else None) == expected, (s, step)


def test_idle_steps_skip_the_profiler_yet_every_cycle_records_its_steps(tmp_path: Path) -> None:
    """Two cycles after a skip: the steps the schedule names are recorded, numbered as torch numbers them."""
    out = tmp_path / "run"
    model = torch.nn.Linear(8, 1)
    with aiprof.profile(out, schedule=Schedule(3, 1, 2, 2, 1), telemetry=False, profile_memory=False, quiet=True) as prof:
        from aiprof.capture import session

        recorder = session.current().recorder  # type: ignore[union-attr]
        for _ in range(25):
            model(torch.randn(2, 8)).sum().backward()
            prof.step()
        assert recorder._prof.step_num == recorder.steps == 25
    assert meta_of(out)["ranks"][0]["steps_seen"] == 25
    assert meta_of(out)["ranks"][0]["recorded_steps"] == [5, 6, 11, 12]
    assert step_names(out / "rank0.pt.trace.json.gz") == [f"ProfilerStep#{n}" for n in (11, 12, 5, 6)]


def test_detector_stands_down_at_a_grad_enabled_top_level_forward() -> None:
    before = _global_hooks()
    found: list[Any] = []
    remove = steps.install_inference_detector(found.append)
    assert _global_hooks() == before + 2
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    model(torch.randn(2, 4)).sum().backward()
    assert _global_hooks() == before and not found
    with torch.no_grad():  # gone for good: a training loop's evaluation does not make it the step model
        model(torch.randn(2, 4))
        model(torch.randn(2, 4))
    assert not found
    remove()


def test_detector_finds_the_model_of_a_no_grad_loop_and_leaves() -> None:
    """An inference loop whose inputs go through a parameterless module with gradients on (an image
    transform) before the no-grad model: the transform does not make the detector stand down."""
    before = _global_hooks()
    found: list[Any] = []
    steps.install_inference_detector(found.append)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    transform = torch.nn.Tanh()
    for _ in range(3):
        x = transform(torch.randn(2, 4))
        with torch.no_grad():
            model(x)
    assert found == [model] and _global_hooks() == before


def test_compiled_training_under_aiprof_compiles_once_and_marks_every_step(tmp_path: Path) -> None:
    """A torch.compile'd model trained under ``aiprof.profile`` (optimizer steps, no explicit step): the
    detector is gone before Dynamo traces the model, so it is compiled once (no guard on aiprof's hooks
    fails later) and each optimizer step is a step."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = _global_hooks()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    compiled = torch.compile(model)
    out = tmp_path / "run"
    graphs = counters["stats"]["unique_graphs"]
    with aiprof.profile(out, schedule=Schedule(2, 1, 2), telemetry=False, profile_memory=False, quiet=True):
        for _ in range(8):
            compiled(torch.randn(4, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            assert _global_hooks() == before  # nothing of aiprof's in any module call after the first
    assert counters["stats"]["unique_graphs"] - graphs == 1  # forward compiled once
    assert meta_of(out)["ranks"][0]["steps_seen"] == 8
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#3", "ProfilerStep#4"]


def test_compiled_no_grad_loop_is_still_found(tmp_path: Path) -> None:
    """The detector still finds a torch.compile'd model run without gradients: its forwards are the steps."""
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    compiled = torch.compile(model)
    out = tmp_path / "run"
    with aiprof.profile(out, schedule=Schedule(1, 1, 2), telemetry=False, profile_memory=False, quiet=True), torch.no_grad():
        for _ in range(7):
            compiled(torch.randn(4, 16))
    # the first two forwards find the model; each later forward begins a step
    assert meta_of(out)["ranks"][0]["steps_seen"] >= 4
    assert step_names(out / "rank0.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]
