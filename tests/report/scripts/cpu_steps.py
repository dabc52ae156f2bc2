"""A small CPU training loop for the report tests: a DataLoader, an MLP, and a pause in every step so
each recorded step lasts at least 50 ms whatever the machine (telemetry samples fall inside it)."""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(512, 64), torch.randint(0, 8, (512,)))
for x, y in DataLoader(data, batch_size=64):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    time.sleep(0.05)
    opt.step()
    opt.zero_grad()
