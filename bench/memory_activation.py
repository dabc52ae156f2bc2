"""Does mem_activation_dominant's estimated saving match what checkpointing really saves? (CPU, real torch)

    python bench/memory_activation.py [--batch 2048 --width 128 --depth 4]

Records an activation-dominated MLP training step with profile_memory=True, reads the finding's estimate and
its segment count s, applies the fix it names (``checkpoint_sequential(model, s, x)``), records again, and
prints the estimate against the measured drop of the peak (goal: within 30 %).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any


def record(out: Path, batch: int, width: int, depth: int, segments: int | None, steps: int = 3) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.checkpoint import checkpoint_sequential

    torch.manual_seed(0)
    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(steps + 1):
            opt.zero_grad(set_to_none=True)
            y = checkpoint_sequential(model, segments, x, use_reentrant=False) if segments else model(x)
            y.square().mean().backward()
            opt.step()
            prof.step()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    args = parser.parse_args()
    from aiprof.memory import analyze_memory, load_memory
    from aiprof.memory.units import binary
    from aiprof.rules.memory_findings import memory_findings

    tmp = Path(tempfile.mkdtemp())
    before = analyze_memory(load_memory(record(tmp / "before.json", args.batch, args.width, args.depth, None)))
    found = [f for f in memory_findings(before) if f.id == "mem_activation_dominant"]
    if not found:
        print("mem_activation_dominant did not fire; categories:", before.devices[0].live_at_peak_by_category)
        return 1
    estimate = int(found[0].evidence["est_saving_bytes"])
    segments = int(found[0].evidence["segments"])
    after = analyze_memory(load_memory(record(tmp / "after.json", args.batch, args.width, args.depth, segments)))
    saved = before.devices[0].peak_allocated_bytes - after.devices[0].peak_allocated_bytes
    error = (estimate - saved) / saved if saved else float("inf")
    print(f"peak before {binary(before.devices[0].peak_allocated_bytes)}, after checkpoint_sequential(s={segments}) "
          f"{binary(after.devices[0].peak_allocated_bytes)}: saved {binary(saved)}; estimated {binary(estimate)} "
          f"({error:+.0%}; goal within ±30 %)")
    return 0 if abs(error) <= 0.30 else 1


if __name__ == "__main__":
    sys.exit(main())
