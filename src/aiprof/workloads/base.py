"""The workload protocol, the registry, and the two ways to run one: profiled (a Kineto trace) and
plain (median step time, for measuring what a fix really saved)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Runner(Protocol):
    """One built workload: ``step()`` runs one training step; ``close()`` frees workers."""

    def step(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Workload:
    """A planted bottleneck. ``build(fixed, device)`` returns a :class:`Runner`."""

    name: str
    finding_id: str  # what aiprof must report first; "" for the clean baseline
    description: str
    fix: str  # what ``fixed=True`` changes, in words
    build: Callable[[bool, str], Runner]


WORKLOADS: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    WORKLOADS[workload.name] = workload
    return workload


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


class _Threads:
    """One intra-op thread while a workload runs: on a shared 2-core machine OpenMP's spinning barriers
    turn other processes' load into 10x slowdowns of 2-thread ops, which would drown every planted effect."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.saved = 0

    def __enter__(self) -> None:
        import torch

        self.saved = torch.get_num_threads()
        if not self.device.startswith("cuda"):
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_num_threads(self.saved)


def measure_step_ns(name: str, fixed: bool, *, steps: int = 8, warmup: int = 2, device: str = "cpu") -> int:
    """Median wall time of one step, without the profiler (what a user's run really takes)."""
    return int(statistics.median(_step_times(name, fixed, steps, warmup, device)))


def _step_times(name: str, fixed: bool, steps: int, warmup: int, device: str) -> list[int]:
    with _Threads(device):
        runner = WORKLOADS[name].build(fixed, device)
        try:
            times: list[int] = []
            for i in range(warmup + steps):
                start = time.perf_counter_ns()
                runner.step()
                _sync(device)
                if i >= warmup:
                    times.append(time.perf_counter_ns() - start)
            return times
        finally:
            runner.close()


def measure_saving_ns(
    name: str, *, steps: int = 12, warmup: int = 2, rounds: int = 3, device: str = "cpu"
) -> tuple[int, int]:
    """Median step time before and after the fix. The two variants alternate in blocks (``rounds`` of
    ``warmup`` + ``steps // rounds`` steps each), so both see the same background load; within a block a
    variant runs alone, as it would for a user — interleaving single steps lets one variant's allocations
    evict the other's memory (page faults that neither would pay on its own)."""
    with _Threads(device):
        runners = (WORKLOADS[name].build(False, device), WORKLOADS[name].build(True, device))
        try:
            times: tuple[list[int], list[int]] = ([], [])
            per_block = max(steps // rounds, 1)
            for _ in range(rounds):
                for k, runner in enumerate(runners):
                    for i in range(warmup + per_block):
                        start = time.perf_counter_ns()
                        runner.step()
                        _sync(device)
                        if i >= warmup:
                            times[k].append(time.perf_counter_ns() - start)
            return int(statistics.median(times[0])), int(statistics.median(times[1]))
        finally:
            for runner in runners:
                runner.close()


def profiler_ns_per_op(rounds: int = 5, iterations: int = 400) -> int:
    """What torch.profiler (record_shapes + profile_memory, as :func:`profile_workload` runs it) adds to
    each recorded event (op or [memory] instant) on this machine: tiny-op loops timed with and without it, interleaved, median of the
    rounds. Host-overhead savings are measured on profiled traces; this is the part that is not real."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x, scale = torch.randn(8, 64), torch.rand(64)

    def loop() -> None:
        for j in range(iterations):
            (x[:, j % 64] * scale[j % 64]).sum().item()

    with _Threads("cpu"):
        loop()
        costs: list[float] = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            loop()
            plain = time.perf_counter_ns() - start
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
                start = time.perf_counter_ns()
                loop()
                profiled = time.perf_counter_ns() - start
            ops = sum(1 for e in prof.events() if e.device_type.name == "CPU")
            costs.append(max(profiled - plain, 0) / max(ops, 1))
    return int(statistics.median(costs))


def profile_workload(
    name: str,
    fixed: bool,
    out_dir: str | Path,
    *,
    steps: int = 5,
    warmup: int = 2,
    device: str = "cpu",
    with_stack: bool = False,
) -> Path:
    """Profile ``steps`` steps after ``warmup`` with torch.profiler; returns the Chrome trace written."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}{'-fixed' if fixed else ''}.pt.trace.json"
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    runner = WORKLOADS[name].build(fixed, device)

    def ready(prof: Any) -> None:
        prof.export_chrome_trace(str(path))

    try:
        with _Threads(device), profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=warmup, active=steps, repeat=1),
            on_trace_ready=ready,
            record_shapes=True,
            profile_memory=True,
            with_stack=with_stack,
        ) as prof:
            for _ in range(warmup + steps):
                runner.step()
                prof.step()
        _sync(device)
    finally:
        runner.close()
    del torch
    return path
