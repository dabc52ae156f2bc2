"""A 2-rank DDP fit (gloo, CPU) under torchrun with aiprof.lightning.Profiler: both ranks write one run dir.

Usage: python -m torch.distributed.run --nproc_per_node=2 lightning_ddp.py RUN_DIR STEPS
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

import aiprof.lightning

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_lightning import SlowPairs, Tiny  # noqa: E402


def main() -> None:
    run_dir, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    trainer = pl.Trainer(max_steps=steps, strategy="ddp", accelerator="cpu", devices=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         profiler=aiprof.lightning.Profiler(out=run_dir, schedule=(1, 1, 3)))
    trainer.fit(Tiny(SlowPairs(256), batch=4))
    print(f"rank {trainer.global_rank} global_step {trainer.global_step}")


if __name__ == "__main__":
    main()
