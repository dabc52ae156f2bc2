"""Uses the Python API; under ``aiprof run`` it must attach to the CLI's capture, not start another."""

from __future__ import annotations

import sys

import torch

import aiprof

model = torch.nn.Linear(4, 1)
with aiprof.profile(out=sys.argv[1], quiet=True) as prof:
    for _ in range(5):
        model(torch.randn(2, 4)).sum().backward()
        prof.step()
