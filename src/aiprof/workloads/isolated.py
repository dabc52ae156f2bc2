"""Run a workload in a fresh Python process, as a user's job runs: ``python -m aiprof.workloads.isolated``.

Timing one variant right after the other in the same process is skewed on the CPU: the first variant's
big allocations change the C allocator's state (mmap thresholds, trimmed heap), and the second variant
then pays page faults it would never pay alone. Fresh processes give each variant a clean start.

Even alone, glibc's *dynamic* mmap threshold makes a workload of 16 MB tensors flip between two modes
from one process to the next (every allocation a fresh mmap that page-faults, or reuse of the heap), and
the profiled op times with it: the fusion estimate varied by ±50 % between identical runs. Each process
therefore gets fixed allocator thresholds (tensors up to 32 MB from the heap, the heap never trimmed),
the same for the profiled run and both timed variants, so the estimate and the measured fix see one
allocator behaviour (the estimate then stays within 12–16 % of the measured saving, run after run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence


# glibc tunables read at process start; an explicit value also turns off the dynamic threshold.
_ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def _run(args: list[str]) -> dict[str, object]:
    env = {**_ALLOCATOR_ENV, **os.environ}  # a user's own settings win
    proc = subprocess.run(
        [sys.executable, "-m", "aiprof.workloads.isolated", *args],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"workload subprocess failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def step_times_ns(name: str, fixed: bool, *, steps: int = 8, warmup: int = 3, device: str = "cpu") -> list[int]:
    """Wall time of each measured step of one variant, run alone in a fresh process."""
    out = _run(["time", name, "1" if fixed else "0", str(steps), str(warmup), device])
    return [int(t) for t in out["times_ns"]]  # type: ignore[attr-defined]


def measure_saving_ns(name: str, *, rounds: int = 2, steps: int = 8, warmup: int = 3, device: str = "cpu") -> tuple[int, int]:
    """Median step time before and after the fix, each variant alone in fresh processes, alternating
    ``rounds`` times so both see the same background load."""
    times: tuple[list[int], list[int]] = ([], [])
    for _ in range(rounds):
        for k in (0, 1):
            times[k].extend(step_times_ns(name, bool(k), steps=steps, warmup=warmup, device=device))
    return int(statistics.median(times[0])), int(statistics.median(times[1]))


def profile(name: str, fixed: bool, out_dir: str, *, steps: int = 6, warmup: int = 3, device: str = "cpu") -> str:
    """Profile one variant in a fresh process; returns the trace path."""
    out = _run(["profile", name, "1" if fixed else "0", str(steps), str(warmup), device, out_dir])
    return str(out["trace"])


def profile_with_cost(
    name: str, fixed: bool, out_dir: str, *, steps: int = 6, warmup: int = 3, device: str = "cpu"
) -> tuple[str, int]:
    """Profile one variant in a fresh process, then measure there what the profiler adds per recorded
    op (:func:`aiprof.workloads.base.profiler_ns_per_op`): the cost host-overhead estimates subtract,
    taken in the process and the moment the trace was, not in a test runner that has run for minutes.
    Returns the trace path and that cost."""
    out = _run(["profile", name, "1" if fixed else "0", str(steps), str(warmup), device, out_dir, "--profiler-cost"])
    cost = out["profiler_ns_per_op"]
    if not isinstance(cost, int):
        raise RuntimeError(f"workload subprocess reported no profiler cost: {out}")
    return str(out["trace"]), cost


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiprof.workloads.isolated")
    parser.add_argument("what", choices=["time", "profile"])
    parser.add_argument("name")
    parser.add_argument("fixed", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("warmup", type=int)
    parser.add_argument("device")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--profiler-cost", action="store_true", help="also measure the profiler's cost per op")
    args = parser.parse_args(argv)
    from aiprof.workloads.base import _step_times, profile_workload, profiler_ns_per_op

    if args.what == "time":
        times = _step_times(args.name, bool(args.fixed), args.steps, args.warmup, args.device)
        print(json.dumps({"times_ns": times}))
    else:
        path = profile_workload(args.name, bool(args.fixed), args.out, steps=args.steps, warmup=args.warmup, device=args.device)
        result: dict[str, object] = {"trace": str(path)}
        if args.profiler_cost:
            result["profiler_ns_per_op"] = profiler_ns_per_op()
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
