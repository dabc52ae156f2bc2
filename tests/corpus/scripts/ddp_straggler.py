"""Two CPU processes (gloo, a FileStore on a local file) train a small model with DistributedDataParallel;
rank 1 runs extra Python every step (a planted loop standing in for per-rank logging or data munging), so
rank 0 waits for it in the gradient all-reduce. Each rank writes ``rank<N>.json`` into argv[1]; with
``balanced`` as argv[2], neither rank does extra work; with ``compute``, rank 1's extra work is matrix
products (traced ops) instead of Python."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

EXTRA_ITERATIONS = 300_000  # ~20-150 ms of pure Python on one core (more on a busy machine)
EXTRA_PRODUCTS = 40  # 256x256 matrix products: ~10-40 ms on one core


def extra_compute() -> None:
    a = torch.randn(256, 256)
    for _ in range(EXTRA_PRODUCTS):
        a = torch.mm(a, a).tanh()


def extra_python() -> int:
    total = 0
    for i in range(EXTRA_ITERATIONS):
        total += i * i % 7
    return total


def work(rank: int, world: int, out: str, mode: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(out, "store"), world), rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1)
    path = os.path.join(out, f"rank{rank}.json")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(6):
            if rank == 1 and mode == "python":
                extra_python()
            elif rank == 1 and mode == "compute":
                extra_compute()
            loss = model(x).square().mean()
            loss.backward()  # DDP all-reduces the gradients here: rank 0 waits for rank 1
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.barrier()  # both ranks are done before either tears the group down
    dist.destroy_process_group()
    # Leave without running C++ static destructors: a gloo/Kineto thread still joinable at interpreter
    # exit aborts the process ('terminate called without an active exception', SIGABRT) now and then,
    # after the trace is written. The trace file is complete here (export_chrome_trace is synchronous).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    mp.spawn(work, args=(2, folder, sys.argv[2] if len(sys.argv) > 2 else "python"), nprocs=2)
