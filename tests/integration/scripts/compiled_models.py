"""Four tiny torch.compile'd models, each profiled by aiprof.profile into OUT/<mode>, in one process
(one torch import; Inductor's caches shared through TORCHINDUCTOR_CACHE_DIR):

  shape   a new batch size every step, dynamic=False: Dynamo recompiles every step
  padded  the same batches padded to one size: one compile
  brk     `.item()` in a Python `if` inside forward: a graph break every call
  clean   one shape: one compile in the first step, nothing after
  blind   as shape, profiled without record_shapes: only the run's dynamo.rank0.json says what changed

usage: python compiled_models.py OUT [MODE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import aiprof

STEPS = 5


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.relu(self.fc(x)) * 2 + 1).sum()


class Branchy(Net):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.fc(x))
        if y.sum().item() > 0:  # BREAK-LINE: a graph break (a Python branch on a tensor's value)
            y = y * 2
        return (y + 1).sum()


def batch(mode: str, step: int) -> torch.Tensor:
    rows = 4 + step if mode in ("shape", "padded", "blind") else 4
    x = torch.randn(rows, 16)
    if mode == "padded":
        x = torch.nn.functional.pad(x, (0, 0, 0, 4 + STEPS - rows))  # every batch padded to one size
    return x


def run(out: Path, mode: str) -> None:
    torch._dynamo.reset()
    model = torch.compile(Branchy() if mode == "brk" else Net(), dynamic=False)
    with aiprof.profile(out=out / mode, schedule=(0, 0, STEPS), with_stack=mode == "brk", telemetry=False,
                        profile_memory=False, quiet=True, record_shapes=mode != "blind") as prof:
        for step in range(STEPS):
            model(batch(mode, step))
            prof.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    for name in sys.argv[2:] or ["shape", "padded", "brk", "clean", "blind"]:
        run(target, name)
