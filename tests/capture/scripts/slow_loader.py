"""A training loop whose DataLoader is the bottleneck: every sample sleeps in ``__getitem__`` (num_workers=0),
so the loop waits for each batch far longer than the tiny model computes."""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--sleep-ms", type=float, default=5.0)
args, _ = p.parse_known_args()  # other arguments (fake secrets in the tests) are ignored


class Slow(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(args.sleep_ms / 1000)
        return torch.randn(16), torch.randn(1)


torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(DataLoader(Slow(), batch_size=4, num_workers=0)):
    if step >= args.steps:
        break
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
