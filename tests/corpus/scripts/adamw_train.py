"""A CPU training loop with AdamW and no ``.item()`` of its own: the optimizer reads each parameter's step
counter with ``.item()`` (its single-tensor path on CPU). Writes ``trace.json`` into argv[1]."""

import os
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(24)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(32, 64)
schedule = torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1)
path = os.path.join(sys.argv[1], "trace.json")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                            on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
    for _ in range(5):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()
