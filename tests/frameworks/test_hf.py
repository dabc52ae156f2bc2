"""``Trainer(callbacks=[aiprof.hf.Callback()])`` on a tiny GPT-2 built from a config (no download), on the CPU:
the steps aiprof records are the Trainer's global steps, a step holds its gradient-accumulation
micro-batches, meta.json names the framework and its data-loader settings, and a planted slow dataset comes
out first with the fix in the Trainer's own argument, ``TrainingArguments(dataloader_num_workers=…)``."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import aiprof.hf  # noqa: E402
from aiprof import app  # noqa: E402

STEPS, ACCUMULATE, BATCH = 8, 2, 2
SLEEP_S = 0.05  # per sample: 0.2 s of loading per step against a few ms of compute


class SlowTokens(torch.utils.data.Dataset):  # type: ignore[misc]
    """Token ids for a causal LM, each sample slow to produce (a planted data-loading bottleneck)."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> dict[str, Any]:
        time.sleep(SLEEP_S)
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, aiprof.hf.Callback, Path, str]:
    tmp = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    args = transformers.TrainingArguments(
        output_dir=str(tmp / "out"), max_steps=STEPS, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE, report_to=[], save_strategy="no", logging_steps=1000,
        use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
    )
    callback = aiprof.hf.Callback(out=tmp / "run", schedule=(1, 1, 4))
    trainer = transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args,
                                   train_dataset=SlowTokens(), callbacks=[callback])
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.train()
    return trainer, callback, tmp / "run", printed.getvalue()


def test_steps_are_the_trainers_global_steps(trained: tuple[Any, aiprof.hf.Callback, Path, str]) -> None:
    trainer, callback, run, _ = trained
    assert callback.run_dir == run and trainer.state.global_step == STEPS
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "complete"
    (rank,) = meta["ranks"]
    assert rank["steps_seen"] == STEPS == meta["framework"]["steps_marked"] == meta["framework"]["global_step"]
    # ProfilerStep#N is global step N + step_offset; the recorded steps are global steps 3..6.
    offset = meta["framework"]["step_offset"]
    assert offset == 1 and [n + offset for n in rank["recorded_steps"]] == [3, 4, 5, 6]


def test_a_step_holds_its_accumulated_micro_batches(trained: tuple[Any, aiprof.hf.Callback, Path, str]) -> None:
    _, _, run, _ = trained
    (waits,) = run.glob("dataloader.rank0*.csv")
    rows = list(csv.DictReader(waits.open()))
    assert [int(r["step"]) for r in rows] == list(range(STEPS))
    # Step 0 also holds accelerate's one-batch prefetch; every other step fetches exactly its micro-batches.
    assert all(int(r["batches"]) == ACCUMULATE for r in rows[1:])
    assert all(int(r["samples"]) == ACCUMULATE * BATCH for r in rows[1:])


def test_the_metadata_names_the_framework_and_its_loader(trained: tuple[Any, aiprof.hf.Callback, Path, str]) -> None:
    _, _, run, _ = trained
    framework = json.loads((run / "meta.json").read_text())["framework"]
    assert framework["name"] == "transformers" and framework["version"] == transformers.__version__
    assert framework["integration"] == "aiprof.hf.Callback"
    settings = framework["settings"]
    assert settings["dataloader_num_workers"] == 0 and settings["gradient_accumulation_steps"] == ACCUMULATE
    assert settings["per_device_train_batch_size"] == BATCH and "dataloader_pin_memory" in settings
    assert all(isinstance(v, (str, int, float, bool, type(None))) for v in settings.values())


def test_slow_data_comes_first_in_the_trainers_words(trained: tuple[Any, aiprof.hf.Callback, Path, str]) -> None:
    _, _, run, printed = trained
    report = app.analyze([run])
    first = report.findings[0]
    assert first.id == "data_loading"
    assert "TrainingArguments(dataloader_num_workers=" in first.fix and "DataLoader(dataset" not in first.fix
    # The same end-of-run summary as `aiprof run`.
    assert f"aiprof: run directory: {run}  [complete]" in printed
    assert "Findings" in printed and "TrainingArguments(dataloader_num_workers=" in printed.replace("\n", " ")
