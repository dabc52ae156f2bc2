"""A CPU training loop whose model and inputs are float64 by mistake (``model.double()``, a NumPy batch
left as float64): the matrix work runs at half the float32 rate. Writes ``trace.json`` into argv[1]; with
``float32`` as argv[2], the fixed twin (``model.float()``, ``torch.from_numpy(x).float()``)."""

import os
import sys

import numpy as np
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
fixed = sys.argv[2:] == ["float32"]
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
model = model.float() if fixed else model.double()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batch = np.random.default_rng(0).standard_normal((256, 256))  # float64: NumPy's default
schedule = torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1)
path = os.path.join(sys.argv[1], "trace.json")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule, record_shapes=True,
                            on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
    for _ in range(5):
        x = torch.from_numpy(batch).float() if fixed else torch.from_numpy(batch)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()
