"""The whole run from a real ``aiprof run`` of a tiny CPU training script: every step timed, the batch
size recorded from the batches' shapes, the section in every format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_helpers import EXAMPLE, FAST, SCRIPTS, run_aiprof

from aiprof import app, rundir

pytestmark = [pytest.mark.usefixtures("torch_available"), pytest.mark.torch]


def test_whole_run_of_a_real_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--no-summary", "--", "python",
                     str(SCRIPTS / "tiny_train.py"), "--steps", "12")
    assert res.returncode == 0, res.stderr
    waits = rundir.read_waits(out / "dataloader.rank0.csv")
    assert waits is not None and 4 in waits.samples  # TensorDataset batches of 4 rows of 16 floats
    assert all(t == -1 for t in waits.tokens)  # float features and float targets: no token ids
    report = app.analyze([out], app.AnalyzeOptions(workers=1))
    whole = report.whole_run
    assert whole
    assert whole.steps >= 10 and whole.first_step == 0  # the first iteration is part of setup (step -1)
    assert whole.samples_per_step == 4 and whole.samples_per_s and whole.tokens_per_s is None
    recorded = sorted(s.number for s in report.ranks[0].steps)
    assert whole.recorded is not None and whole.recorded.steps == recorded and whole.recorded.found == len(recorded)
    assert whole.median_ns > 0 and whole.p90_ns >= whole.median_ns and whole.p99_ns >= whole.p90_ns
    term = app.render(report, "terminal", app.RenderOptions(width=200))
    assert "Whole run" in term and "samples/s" in term
    assert "### Whole run" in app.render(report, "md")
    html = app.render(report, "html")
    assert 'id="wholerun"' in html and 'class="chart wholerun"' in html and "step number" in html
    assert ">recorded<" in html
    doc = json.loads(app.render(report, "json"))
    assert doc["whole_run"]["steps"] == whole.steps


def test_token_ids_give_tokens_per_second(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), *FAST, "--no-summary", "--", "python", str(EXAMPLE),
                     "--steps", "8", "--batch-size", "4", "--seq", "16", "--layers", "1", "--dim", "32", timeout=240)
    assert res.returncode == 0, res.stderr
    report = app.analyze([out], app.AnalyzeOptions(workers=1))
    whole = report.whole_run
    assert whole and whole.samples_per_step == 4 and whole.tokens_per_step == 4 * 16
    assert whole.tokens_per_s is not None and whole.samples_per_s is not None
    assert abs(whole.tokens_per_s - 16 * whole.samples_per_s) < 1


def test_batch_size_from_shapes() -> None:
    import torch

    from aiprof.capture.dataloader import batch_size

    T = torch.Tensor
    assert batch_size(torch.zeros(8, 3, 32, 32), T) == (8, -1)
    assert batch_size((torch.zeros(8, 3), torch.zeros(8, dtype=torch.long)), T) == (8, -1)  # labels are not tokens
    assert batch_size([torch.zeros(4, 128, dtype=torch.long), torch.zeros(4, 128, dtype=torch.long)], T) == (4, 512)
    batch = {"attention_mask": torch.ones(2, 7, dtype=torch.long), "input_ids": torch.zeros(2, 9, dtype=torch.long)}
    assert batch_size(batch, T) == (2, 18)  # input_ids first
    assert batch_size({"x": [torch.zeros(5, 2)]}, T) == (5, -1)
    assert batch_size(["a", "b"], T) == (-1, -1)
    assert batch_size(torch.zeros(3, 4, dtype=torch.bool), T) == (3, -1)
