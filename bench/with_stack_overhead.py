"""What ``with_stack`` (``aiprof run --with-stack``) costs: the recorded steps' time with torch.profiler's
Python tracer on, against the same profiler without it, on the planted workloads (``aiprof.workloads``;
``data_loading`` is the one ``aiprof demo`` profiles).

Per workload and round: a fresh build, two warm-up steps, then ``--steps`` steps under
``torch.profiler.profile(record_shapes=True, profile_memory=True)`` (aiprof's defaults), each step timed with
``perf_counter``; the two modes alternate (off, on, off, on …) so that load on a shared machine hits both
alike. The overhead of a round is median(on) / median(off) − 1; the result is the median over rounds, with
their range. One intra-op thread, as the workloads run in the tests. The trace is not exported (the
export happens after the recorded steps and is not step time).

Last, the cost per Python call: a loop of 100k calls of a trivial function, with and without ``with_stack``
(a step's overhead is about this times its Python calls).

Run:  python bench/with_stack_overhead.py [--rounds 5] [--steps 6] [--workloads data_loading host_overhead]
The number in ``aiprof.analysis.stacks.WITH_STACK_OVERHEAD_PCT`` (quoted by reports without stacks) is the
``data_loading`` median; bench/RESULTS.md keeps the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def measure(name: str, rounds: int, steps: int, warmup: int = 2) -> dict[str, Any]:
    """One build of the workload; ``rounds`` profiler sessions per mode, alternating (off, on / on, off …),
    each ``steps`` timed steps (wall and this process's CPU time)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from aiprof.workloads import WORKLOADS

    torch.set_num_threads(1)
    runner = WORKLOADS[name].build(False, "cpu")
    wall: dict[bool, list[int]] = {False: [], True: []}
    cpu: dict[bool, list[int]] = {False: [], True: []}
    try:
        for _ in range(warmup):
            runner.step()
        for r in range(rounds):
            for mode in ((False, True) if r % 2 == 0 else (True, False)):
                with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True, with_stack=mode):
                    for _ in range(steps):
                        w0, c0 = time.perf_counter_ns(), time.process_time_ns()
                        runner.step()
                        wall[mode].append(time.perf_counter_ns() - w0)
                        cpu[mode].append(time.process_time_ns() - c0)
    finally:
        runner.close()
    med = {k: statistics.median(v) for k, v in (("wall_off", wall[False]), ("wall_on", wall[True]),
                                                ("cpu_off", cpu[False]), ("cpu_on", cpu[True]))}
    return {
        "workload": name,
        # The Python tracer works synchronously on the profiled thread: the CPU time it adds is time added to
        # the step. Against the step's CPU time without it (an upper bound of the wall-time overhead: a step's
        # wall time is its CPU time plus its waits), which a busy machine disturbs far less than wall time.
        "overhead_pct": 100 * (med["cpu_on"] / med["cpu_off"] - 1),
        "wall_overhead_pct": 100 * (med["wall_on"] / med["wall_off"] - 1),
        **{k: v / 1e6 for k, v in med.items()},
    }


def _call(i: int) -> int:
    return i


def per_call_ns(calls: int = 100_000, rounds: int = 6) -> float:
    """CPU time the Python tracer adds per Python call: a loop of ``calls`` calls of a trivial function,
    profiled with and without ``with_stack`` (alternating), median of the rounds."""
    import torch  # noqa: F401
    from torch.profiler import ProfilerActivity, profile

    cpu: dict[bool, list[int]] = {False: [], True: []}
    for r in range(rounds):
        for mode in ((False, True) if r % 2 == 0 else (True, False)):
            with profile(activities=[ProfilerActivity.CPU], with_stack=mode):
                start = time.process_time_ns()
                for i in range(calls):
                    _call(i)
                cpu[mode].append(time.process_time_ns() - start)
    return (statistics.median(cpu[True]) - statistics.median(cpu[False])) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=["data_loading", "host_overhead"])
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {args.rounds} sessions x {args.steps} recorded steps per mode, 1 thread")
    print("| workload | step wall, profiler | step CPU, profiler | step CPU, + with_stack | overhead (CPU ratio − 1) "
          "| wall ratio − 1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.workloads:
        r = measure(name, args.rounds, args.steps)
        print(f"| {name} | {r['wall_off']:.1f} ms | {r['cpu_off']:.1f} ms | {r['cpu_on']:.1f} ms | {r['overhead_pct']:+.1f} % "
              f"| {r['wall_overhead_pct']:+.1f} % |", flush=True)
    print(f"\nPer Python call: +{per_call_ns():.0f} ns of CPU with with_stack (100k calls of a trivial function).")


if __name__ == "__main__":
    main()
