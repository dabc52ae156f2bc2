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
args = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
loader = DataLoader(data, batch_size=4, num_workers=args.num_workers, shuffle=False)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

step = 0
while step < args.steps:
    for x, y in loader:
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
