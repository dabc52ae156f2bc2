"""``Trainer(profiler=aiprof.lightning.Profiler())`` on a tiny LightningModule on the CPU: the steps aiprof
records are ``trainer.global_step``, a step holds its ``accumulate_grad_batches`` batches, validation is kept
apart (its batches are not the step's data-loader waits; meta.json says when it ran), and a planted slow
dataset comes out first with Lightning's fix (the DataLoader of the ``train_dataloader()``)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

import aiprof.lightning  # noqa: E402
from aiprof import app  # noqa: E402
from tiny_lightning import SlowPairs, Tiny  # noqa: E402

STEPS, ACCUMULATE, BATCH = 8, 2, 2
SLEEP_S = 0.05  # per sample: 0.2 s of loading per step against about a millisecond of compute


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, aiprof.lightning.Profiler, Path, str]:
    run = tmp_path_factory.mktemp("pl") / "run"
    torch.manual_seed(0)
    profiler = aiprof.lightning.Profiler(out=run, schedule=(1, 1, 4))
    trainer = pl.Trainer(max_steps=STEPS, accumulate_grad_batches=ACCUMULATE, profiler=profiler, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         accelerator="cpu", devices=1, val_check_interval=2 * ACCUMULATE, num_sanity_val_steps=1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.fit(Tiny(SlowPairs(64, SLEEP_S), SlowPairs(6, SLEEP_S), batch=BATCH))  # 3 batches per validation
    return trainer, profiler, run, printed.getvalue()


def _meta(run: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((run / "meta.json").read_text())
    return meta


def test_steps_are_the_global_steps(fitted: tuple[Any, aiprof.lightning.Profiler, Path, str]) -> None:
    trainer, profiler, run, _ = fitted
    assert profiler.run_dir == run and trainer.global_step == STEPS
    meta = _meta(run)
    assert meta["status"] == "complete"
    (rank,) = meta["ranks"]
    framework = meta["framework"]
    assert rank["steps_seen"] == STEPS == framework["global_step"] == framework["steps_marked"]
    assert [n + framework["step_offset"] for n in rank["recorded_steps"]] == [3, 4, 5, 6]
    assert framework["loops"]["training_batches"] == STEPS * ACCUMULATE


def test_validation_is_kept_apart(fitted: tuple[Any, aiprof.lightning.Profiler, Path, str]) -> None:
    _, _, run, _ = fitted
    framework = _meta(run)["framework"]
    # Every 4 batches = 2 global steps; the sanity check (before training) is not captured.
    assert framework["evaluations_after_steps"] == [2, 4, 6, 8]
    assert framework["loops"]["validation_runs"] == 4
    (waits,) = run.glob("dataloader.rank0*.csv")
    rows = list(csv.DictReader(waits.open()))
    # Each step fetched its 2 training batches; the 3 validation batches of a validation are not among them.
    assert [int(r["batches"]) for r in rows] == [ACCUMULATE] * STEPS
    assert all(int(r["samples"]) == ACCUMULATE * BATCH for r in rows)


def test_the_trace_says_it_is_lightning(fitted: tuple[Any, aiprof.lightning.Profiler, Path, str]) -> None:
    _, _, run, _ = fitted
    trace = aiprof.load(next(run.glob("rank0*.pt.trace.json*")))
    from aiprof.rules.framework import LIGHTNING, trace_framework

    assert not isinstance(trace, aiprof.RunSet)
    names = set(trace.strings)
    assert aiprof.lightning.FETCH in names, sorted(n for n in names if n.startswith("["))
    assert "[Strategy]SingleDeviceStrategy.training_step" in names
    assert trace_framework(trace) == LIGHTNING
    meta = _meta(run)["framework"]
    assert meta["name"] == "lightning" and meta["version"] == pl.__version__
    assert meta["settings"]["accumulate_grad_batches"] == ACCUMULATE and meta["settings"]["precision"] == "32-true"


def test_slow_data_comes_first_in_lightnings_words(fitted: tuple[Any, aiprof.lightning.Profiler, Path, str]) -> None:
    _, _, run, printed = fitted
    first = app.analyze([run]).findings[0]
    assert first.id == "data_loading"
    assert "train_dataloader()" in first.fix and "num_workers=" in first.fix and "TrainingArguments" not in first.fix
    assert f"aiprof: run directory: {run}  [complete]" in printed and "Findings" in printed
