"""Hugging Face Accelerate on the CPU: what ``Accelerator(kwargs_handlers=[ProfileKwargs(output_trace_dir=...)])``
writes is analysed as it is, and ``aiprof.accelerate.profile(accelerator)`` adds the run directory, the
per-step loader waits and the Accelerator's settings: one step per real optimizer update (the accumulation
micro-batches inside it), and a planted slow dataset first with the fix through ``accelerator.prepare``."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")

import aiprof.accelerate  # noqa: E402
from aiprof import app  # noqa: E402

ACCUMULATE, UPDATES, BATCH = 2, 8, 2
SLEEP_S = 0.04


class SlowPairs(torch.utils.data.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return ACCUMULATE * UPDATES * BATCH

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        time.sleep(SLEEP_S)
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randn(1, generator=g)


def _prepared(accelerator: Any) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(SlowPairs(), batch_size=BATCH)
    prepared: tuple[Any, Any, Any] = accelerator.prepare(model, optimizer, loader)
    return prepared


def _train(accelerator: Any, model: Any, optimizer: Any, loader: Any, prof: Any = None) -> None:
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        if prof is not None and accelerator.sync_gradients:
            prof.step()


def test_profile_kwargs_output_is_a_run(tmp_path: Path) -> None:
    from accelerate.utils import ProfileKwargs

    out = tmp_path / "trace"
    handler = ProfileKwargs(activities=["cpu"], record_shapes=True, output_trace_dir=str(out),
                            schedule_option={"wait": 1, "warmup": 1, "active": 4, "repeat": 1})
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATE, kwargs_handlers=[handler])
    model, optimizer, loader = _prepared(accelerator)
    with accelerator.profile() as prof:
        _train(accelerator, model, optimizer, loader, prof)
    assert [p.name for p in out.iterdir()] == ["profile_0.json"]
    report = app.analyze([out])
    assert len(report.ranks) == 1 and len(report.ranks[0].steps) == 4
    assert report.findings[0].id == "data_loading"


def test_the_helper_adds_steps_settings_and_the_fix(tmp_path: Path) -> None:
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATE)
    model, optimizer, loader = _prepared(accelerator)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), aiprof.accelerate.profile(accelerator, tmp_path / "run",
                                                                        schedule=(1, 1, 4)) as run:
        _train(accelerator, model, optimizer, loader)
    assert run.run_dir == tmp_path / "run"
    meta = json.loads((run.run_dir / "meta.json").read_text())
    assert meta["status"] == "complete"
    framework = meta["framework"]
    assert framework["name"] == "accelerate" and framework["version"] == accelerate.__version__
    assert framework["settings"]["gradient_accumulation_steps"] == ACCUMULATE
    assert framework["settings"]["mixed_precision"] == "no" and framework["settings"]["num_processes"] == 1
    # One step per real update: Accelerate skips optimizer.step() on the accumulation micro-batches.
    assert meta["ranks"][0]["steps_seen"] == UPDATES == framework["steps_marked"]
    (waits,) = run.run_dir.glob("dataloader.rank0*.csv")
    batches = [int(r["batches"]) for r in csv.DictReader(waits.open())]
    # Accelerate's loader fetches one batch ahead: step 0 holds one more, the last step one less.
    assert batches == [ACCUMULATE + 1] + [ACCUMULATE] * (UPDATES - 2) + [ACCUMULATE - 1]
    first = app.analyze([run.run_dir]).findings[0]
    assert first.id == "data_loading" and "accelerator.prepare(DataLoader(dataset" in first.fix
    assert f"aiprof: run directory: {run.run_dir}  [complete]" in printed.getvalue()
