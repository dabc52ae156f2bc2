"""A CPU training loop that leaks a graph per step: a validation forward without ``torch.no_grad()`` summed
into a running tensor (``val_total += loss``) keeps every step's activations alive. Profiled with
``profile_memory=True``; writes ``trace.json`` into argv[1]. With ``fixed`` as argv[2], the twin that
accumulates ``loss.item()`` under ``torch.no_grad()``."""

import os
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
fixed = sys.argv[2:] == ["fixed"]
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, xv = torch.randn(128, 256), torch.randn(512, 256)
val_total: object = 0.0
schedule = torch.profiler.schedule(wait=0, warmup=1, active=6, repeat=1)
path = os.path.join(sys.argv[1], "trace.json")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule, profile_memory=True,
                            record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
    for _ in range(7):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if fixed:
            with torch.no_grad():
                val_total = float(val_total) + model(xv).square().mean().item()  # type: ignore[arg-type]
        else:
            val_total = val_total + model(xv).square().mean()  # keeps this step's graph: a leak
        prof.step()
