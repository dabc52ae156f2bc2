"""The memory checks of issue 13 that need a GPU, in one script (run it where a CUDA device is lent).

    python bench/memory_gpu.py --out tests/memory/fixtures/gpu      # records, then checks; ~1 min on an H200
    python bench/memory_gpu.py --check tests/memory/fixtures/gpu    # checks what an earlier run recorded

1. **peak**: a small transformer training step (after a warm-up step that creates Adam's state), with the
   allocator history recorded around it after ``torch.cuda.reset_peak_memory_stats()``: aiprof's peak must
   equal ``torch.cuda.max_memory_allocated()`` to the byte, and the snapshot's reserved and allocated bytes
   ``memory_reserved()`` / ``memory_allocated()`` at the dump.
2. **capacity OOM**: with 1 GiB live, one request of the device's whole memory: the verdict must be
   ``capacity``.
3. **fragmentation OOM**: segments of 2 GiB each holding a live 1.25 GiB block and a free 0.75 GiB remainder
   (split blocks, which the allocator cannot release), the rest of the device filled with 0.9 GiB blocks,
   then a 1 GiB request: more than 1 GiB is free in all, no free block holds it: the verdict must be
   ``fragmentation``.
4. **cost**: the step's time with and without the allocator history with Python stacks (what
   ``aiprof run --memory`` records), medians of 20 steps.

The OOM snapshots are dumped by the allocator's OOM observer, as ``aiprof run --memory`` does. Each snapshot
(small: the history covers a few hundred events) and ``expected.json`` (torch's own figures) go to ``--out``;
``tests/memory/test_gpu_fixtures.py`` checks them with :func:`check` when they are there. Exit status 0 when
every check agrees.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

GiB = 1 << 30


def _dump(path: Path) -> None:
    import torch

    with open(path, "wb") as fh:
        pickle.dump(torch.cuda.memory._snapshot(), fh, protocol=4)


def _model(torch: Any) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).cuda()
    return model, torch.optim.Adam(model.parameters()), torch.randn(16, 128, 256, device="cuda")


def record_peak(out: Path) -> dict[str, int]:
    import torch

    model, opt, x = _model(torch)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    step()  # Adam's state
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    step()
    torch.cuda.synchronize()
    figures = {"max_memory_allocated": torch.cuda.max_memory_allocated(),
               "memory_allocated": torch.cuda.memory_allocated(), "memory_reserved": torch.cuda.memory_reserved()}
    _dump(out / "peak.pickle")
    torch.cuda.memory._record_memory_history(enabled=None)
    model = opt = x = None  # drop the references (the closure's cells too) before emptying the cache
    torch.cuda.empty_cache()
    return figures


_OOM_TARGET: list[Path] = []


def _observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    if _OOM_TARGET:
        _dump(_OOM_TARGET.pop())


def record_capacity_oom(out: Path) -> dict[str, int]:
    import torch

    torch.cuda.empty_cache()
    live = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    request = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    _OOM_TARGET.append(out / "oom_capacity.pickle")
    try:
        torch.empty(request, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        pass
    torch.cuda.memory._record_memory_history(enabled=None)
    del live
    torch.cuda.empty_cache()
    return {"request": request}


def record_fragmentation_oom(out: Path) -> dict[str, int]:
    import torch

    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    live: list[Any] = []
    big, kept, filler, request = 2 * GiB, 5 * GiB // 4, 9 * GiB // 10, GiB
    try:  # (an OOM while filling only ends the filling: the observer has no target yet)
        while torch.cuda.mem_get_info()[0] > big + GiB:
            t = torch.empty(big, dtype=torch.uint8, device="cuda")  # a new 2 GiB segment
            del t  # cached whole
            live.append(torch.empty(kept, dtype=torch.uint8, device="cuda"))  # splits it: 0.75 GiB stays free
        while torch.cuda.mem_get_info()[0] > filler + (64 << 20):  # fill with blocks no remainder can hold
            live.append(torch.empty(filler, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        pass
    _OOM_TARGET.append(out / "oom_fragmentation.pickle")
    try:
        torch.empty(request, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        pass
    torch.cuda.memory._record_memory_history(enabled=None)
    del live
    torch.cuda.empty_cache()
    return {"request": request}


def measure_cost(steps: int = 20) -> dict[str, float]:
    import torch

    model, opt, x = _model(torch)

    def timed() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for _ in range(3):
        timed()
    plain = statistics.median(timed() for _ in range(steps))
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    recorded = statistics.median(timed() for _ in range(steps))
    torch.cuda.memory._record_memory_history(enabled=None)
    return {"step_ms": plain * 1e3, "step_ms_with_history": recorded * 1e3}


def record(out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    getattr(torch._C, "_cuda_attach_out_of_memory_observer")(_observer)
    expected: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    expected["peak"] = record_peak(out)
    expected["capacity"] = record_capacity_oom(out)
    expected["fragmentation"] = record_fragmentation_oom(out)
    expected["cost"] = measure_cost()
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


def check(folder: Path) -> list[str]:
    """What disagrees between aiprof's reading of the recorded snapshots and torch's figures ([] when all
    agree)."""
    from aiprof.memory import analyze_memory, load_memory

    expected = json.loads((folder / "expected.json").read_text())
    problems: list[str] = []
    peak = next(d for d in analyze_memory(load_memory(folder / "peak.pickle")).devices if d.device == "cuda:0")
    want = expected["peak"]
    if peak.peak_allocated_bytes != want["max_memory_allocated"]:
        problems.append(f"peak {peak.peak_allocated_bytes} != max_memory_allocated {want['max_memory_allocated']}")
    state = peak.snapshot
    if state is None or state.reserved_bytes != want["memory_reserved"]:
        problems.append(f"snapshot reserved {state and state.reserved_bytes} != memory_reserved {want['memory_reserved']}")
    if state is None or state.allocated_bytes != want["memory_allocated"]:
        problems.append(f"snapshot allocated {state and state.allocated_bytes} != memory_allocated {want['memory_allocated']}")
    for kind in ("capacity", "fragmentation"):
        path = folder / f"oom_{kind}.pickle"
        if not path.exists():
            problems.append(f"{path.name}: the OOM observer wrote no snapshot")
            continue
        ooms = [o for d in analyze_memory(load_memory(path)).devices for o in d.ooms]
        if not ooms:
            problems.append(f"{path.name}: no OOM event in the snapshot")
        elif ooms[-1].verdict != kind or ooms[-1].request_bytes < expected[kind]["request"]:
            problems.append(f"{path.name}: verdict {ooms[-1].verdict} for {ooms[-1].request_bytes} bytes "
                            f"({ooms[-1].explanation})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="record into this folder, then check")
    group.add_argument("--check", type=Path, help="check an earlier recording")
    args = parser.parse_args()
    folder = args.out or args.check
    if args.out:
        record(folder)
    expected = json.loads((folder / "expected.json").read_text())
    print(json.dumps(expected, indent=1))
    problems = check(folder)
    print("\n".join(problems) or "all checks agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
