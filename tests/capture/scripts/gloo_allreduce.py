"""Two processes on the CPU (gloo, a FileStore on a local file): a matmul then a blocking all_reduce per
step, under torch.profiler; each rank writes ``rank<N>.json`` into the folder given as argv[1]."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank: int, world: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(out, "store"), world), rank=rank, world_size=world)
    grad = torch.randn(2_000_000)
    w = torch.randn(128, 128)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1)
    path = os.path.join(out, f"rank{rank}.json")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(4):
            y = w @ w
            for _ in range(3 if rank == 0 else 1):  # rank 0 works longer: rank 1 waits in the all-reduce
                y = y @ w
            dist.all_reduce(grad)
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
    mp.spawn(work, args=(2, folder), nprocs=2)
