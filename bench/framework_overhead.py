"""Integration overhead: ``aiprof.lightning.Profiler`` against Lightning's own ``PyTorchProfiler`` at the same
torch.profiler settings (schedule, shapes, memory), and against no profiler, on a small CPU LightningModule.

Each run is a fresh process; the three modes are interleaved (none, lightning, aiprof, none, ...) so load on
a shared machine hits them alike, ``--repeat`` times. The workload times its own training batches
(``perf_counter`` at every ``on_train_batch_end``); reported: the median batch time of the recorded steps
(the schedule's active window) and of the whole fit, per mode. Run:
``python bench/framework_overhead.py [--repeat 3] [--steps 40]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WAIT, WARMUP, ACTIVE = 5, 2, 20
MODES = ("none", "lightning", "aiprof")


def worker(mode: str, steps: int, out: Path) -> None:
    import pytorch_lightning as pl
    import torch

    class Timer(pl.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_end(self, *args: Any) -> None:
            self.times.append(time.perf_counter())

    class Model(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU())
                                             for _ in range(6)], torch.nn.Linear(256, 1))

        def training_step(self, batch: Any, i: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def train_dataloader(self) -> Any:
            g = torch.Generator().manual_seed(0)
            data = torch.utils.data.TensorDataset(torch.randn(steps * 64, 256, generator=g),
                                                  torch.randn(steps * 64, 1, generator=g))
            return torch.utils.data.DataLoader(data, batch_size=64)

    torch.manual_seed(0)
    profiler: Any = None
    if mode == "lightning":
        from pytorch_lightning.profilers import PyTorchProfiler

        profiler = PyTorchProfiler(dirpath=str(out.parent), filename="pl", record_shapes=True, profile_memory=True,
                                   schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE))
    elif mode == "aiprof":
        import aiprof.lightning

        profiler = aiprof.lightning.Profiler(out=out.parent / "run", schedule=(WAIT, WARMUP, ACTIVE), summary=False)
    timer = Timer()
    trainer = pl.Trainer(max_steps=steps, profiler=profiler, callbacks=[timer], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    started = time.perf_counter()
    trainer.fit(Model())
    total = time.perf_counter() - started
    marks = [started, *timer.times]
    batches = [b - a for a, b in zip(marks, marks[1:])]
    out.write_text(json.dumps({"batches_s": batches, "fit_s": total}))


def measure(repeat: int, steps: int) -> dict[str, dict[str, float]]:
    found: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for _ in range(repeat):
        for mode in MODES:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "times.json"
                subprocess.run([sys.executable, __file__, "--worker", mode, "--steps", str(steps), "--out", str(out)],
                               check=True, capture_output=True)
                found[mode].append(json.loads(out.read_text()))
    recorded = slice(WAIT + WARMUP, WAIT + WARMUP + ACTIVE)
    result = {}
    for mode, runs in found.items():
        result[mode] = {
            "recorded_batch_ms": 1e3 * statistics.median(statistics.median(r["batches_s"][recorded]) for r in runs),
            "all_batches_ms": 1e3 * statistics.median(statistics.median(r["batches_s"][1:]) for r in runs),
            "fit_s": statistics.median(r["fit_s"] for r in runs),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--worker", choices=MODES)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.out)
        return
    result = measure(args.repeat, args.steps)
    base = result["lightning"]["recorded_batch_ms"]
    for mode, row in result.items():
        print(f"{mode:10s} recorded batch {row['recorded_batch_ms']:7.2f} ms  all batches {row['all_batches_ms']:7.2f} ms"
              f"  fit {row['fit_s']:6.2f} s")
    print(f"aiprof vs Lightning's PyTorchProfiler, recorded steps: {100 * (result['aiprof']['recorded_batch_ms'] / base - 1):+.1f} %")


if __name__ == "__main__":
    main()
