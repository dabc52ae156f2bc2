"""An inference loop with no optimizer: steps come from --step-marker (a Module class or a function)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import infer_lib  # noqa: E402


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


model = Net().eval()
with torch.no_grad():
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
        infer_lib.predict(model, torch.randn(4, 8))
print("inference done", flush=True)
