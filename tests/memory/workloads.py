"""Tiny CPU workloads with a known memory story, profiled with real torch (``profile_memory=True``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _mlp(torch: Any, width: int, depth: int) -> Any:
    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers)


class _Checkpointed:
    def __init__(self, torch: Any, model: Any) -> None:
        self.torch, self.model = torch, model

    def __call__(self, x: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        for layer in self.model:
            x = checkpoint(layer, x, use_reentrant=False)
        return x


def record(
    out: Path, story: str, *, steps: int = 5, batch: int = 256, width: int = 256, depth: int = 4,
    checkpointing: bool = False, warmup: int = 1,
) -> Path:
    """Profile ``steps`` training steps (after ``warmup`` warm-up steps) of an MLP and write the Chrome trace to ``out``.

    story: ``leak`` keeps each step's output alive in a list (grows every step); ``activation`` has a wide
    batch so activations dominate the peak; ``optimizer`` uses Adam on wide layers with a tiny batch.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = _mlp(torch, width, depth)
    forward = _Checkpointed(torch, model) if checkpointing else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if story == "optimizer" else torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width)
    kept: list[Any] = []
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True, record_shapes=False,
        schedule=schedule(wait=0, warmup=warmup, active=steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
    ) as prof:
        for _ in range(steps + warmup):
            opt.zero_grad(set_to_none=True)
            y = forward(x)
            loss = y.square().mean()
            loss.backward()
            opt.step()
            if story == "leak":
                kept.append(keep_for_later(y))
            prof.step()
    return out


def keep_for_later(y: Any) -> Any:
    return y.detach().clone()
