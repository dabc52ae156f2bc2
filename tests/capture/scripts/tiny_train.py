"""A very small training loop for capture tests: an MLP, a real DataLoader, optional failure modes."""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--crash-at", type=int, default=-1, help="raise ValueError at this step")
p.add_argument("--hang-at", type=int, default=-1, help="print READY and sleep at this step (for signals)")
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--explicit", action="store_true", help="call aiprof.step() instead of relying on the hook")
p.add_argument("--num-workers", type=int, default=0)
p.add_argument("--fill-disk", default="", help="at --fill-at, write this file until the disk is full (a checkpoint too large)")
p.add_argument("--fill-at", type=int, default=-1)
p.add_argument("--leave-kb", type=int, default=0, help="then give back this much of the disk")
args = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
loader = DataLoader(data, batch_size=4, num_workers=args.num_workers, shuffle=False)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)



def fill_disk(path: str, leave_kb: int) -> None:
    """Write ``path`` until the disk is full, then shorten it by ``leave_kb``: what a large checkpoint does."""
    chunk = b"\0" * 4096
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
        size = fh.seek(0, os.SEEK_END)
        fh.truncate(max(0, size - leave_kb * 1024))
    print(f"filled the disk at step {step}", flush=True)


step = 0
while step < args.steps:
    for x, y in loader:
        if step == args.fill_at and args.fill_disk:
            fill_disk(args.fill_disk, args.leave_kb)
        if step == args.crash_at:
            raise ValueError(f"boom at step {step}")
        if step == args.hang_at:
            print(f"READY pid={os.getpid()}", flush=True)
            # Short sleeps: a signal the kernel hands to another thread does not interrupt the main
            # thread's sleep; Python runs the handler when the main thread next wakes up.
            for _ in range(600):
                time.sleep(0.1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.explicit:
            import aiprof

            aiprof.step()
        step += 1
        if step >= args.steps:
            break
print(f"done {step} steps pid={os.getpid()}", flush=True)
sys.exit(args.exit_code)
