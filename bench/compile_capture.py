"""What ``aiprof run`` / ``aiprof.profile`` add for a torch.compile'd model, on CPU (torch + Inductor's C++
backend): a small MLP trained compiled (4 × Linear(256, 256) + ReLU, batch 64, SGD, one thread).

1. **Per step**: in one process (Dynamo's caches are per process), blocks of ``--block`` steady compiled
   steps rotate between no aiprof and ``aiprof.profile`` with the profiler not recording (a schedule whose
   wait outlasts the block: what remains is what aiprof adds around the compiled calls), in two modes:
   ``explicit`` (the script calls ``prof.step()``) and ``auto`` (no call: the optimizer hook marks the steps,
   as under ``aiprof run``). ``--blocks`` rounds, each block's first ``--warm`` steps left out. Per round the
   ratio of each mode's block median step to the plain block's; the result is the median of those ratios
   over the rounds of ``--repeat`` processes, so load drift on a shared machine hits both sides alike. A
   step is timed in the training thread's CPU time (``time.thread_time``: with one thread it holds all of
   the step's work, and waiting for a core on a shared machine is not counted); wall time is printed too,
   and the ratio of each block's 10th-percentile step CPU time ("CPU p10": another job on the machine only
   ever adds to a step's time, through caches and a shared core, so the fast steps show the work itself).
2. **At the flush**: the capture of Dynamo's compile records (:mod:`aiprof.capture.dynamo`: the baseline
   taken when a session begins and the record built at its end, JSON included), timed in the measured
   process after its steps (median of 20 calls), as a share of one median step. It runs once per session,
   never per step.

Goal: ≤ 2 % of a step for each. Run:  python bench/compile_capture.py [--repeat 3] [--src OTHER/src]
(``--src``: measure another checkout's aiprof, e.g. a ``git worktree`` of an older commit, for before/after.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


MODES = ("plain", "explicit", "auto")


def worker(args: argparse.Namespace) -> None:
    import torch

    import aiprof
    from aiprof.capture.dynamo import DynamoBaseline, dynamo_record

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model)
    x = torch.randn(64, 256)

    def block(prof: Any) -> tuple[float, float, float]:
        cpu: list[float] = []
        wall: list[float] = []
        for i in range(args.warm + args.block):
            t0, w0 = time.thread_time(), time.perf_counter()
            compiled(x).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if prof is not None:
                prof.step()
            if i >= args.warm:
                cpu.append(time.thread_time() - t0)
                wall.append(time.perf_counter() - w0)
        return statistics.median(cpu), statistics.median(wall), statistics.quantiles(cpu, n=10)[0]

    rounds: list[dict[str, tuple[float, float, float]]] = []
    for k in range(args.blocks + 1):  # the first round compiles (and meets aiprof's hooks): left out
        times: dict[str, tuple[float, float, float]] = {}
        for mode in MODES:
            if mode == "plain":
                times[mode] = block(None)
                continue
            with aiprof.profile(out=f"{args.out}-{k}-{mode}", schedule=(10_000, 0, 1), telemetry=False,
                                profile_memory=False, quiet=True) as prof:
                times[mode] = block(prof if mode == "explicit" else None)
        if k:
            rounds.append(times)
    flush: list[float] = []
    for _ in range(20):
        t0 = time.perf_counter()
        data = dynamo_record(DynamoBaseline.now())
        DynamoBaseline.now()
        flush.append(time.perf_counter() - t0)
    assert data is None or data.startswith(b"{")
    Path(args.result).write_text(json.dumps({"rounds": rounds, "flush": flush}))


def run(args: argparse.Namespace, tmp: Path, k: int) -> dict[str, Any]:
    result = tmp / f"result{k}.json"
    cmd = [sys.executable, __file__, "--worker", "--out", str(tmp / f"run{k}"), "--result", str(result),
           "--block", str(args.block), "--blocks", str(args.blocks), "--warm", str(args.warm)]
    src = str(Path(args.src).resolve()) if args.src else str(ROOT / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor-cache"),
           "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONWARNINGS": "ignore"}
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=900)
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def _quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--block", type=int, default=30)
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--src", default="", help="the aiprof sources to measure (default: this checkout's src/)")
    p.add_argument("--json", default="", help="also write the rounds and the summary here")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--out", default="")
    p.add_argument("--result", default="")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    rounds: list[dict[str, list[float]]] = []
    flush: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        for k in range(args.repeat):
            data = run(args, Path(d), k)
            rounds += data["rounds"]
            flush += data["flush"]
    print(f"{len(rounds)} rounds of {args.block}-step blocks, {args.repeat} processes, aiprof from "
          f"{args.src or ROOT / 'src'}")
    summary: dict[str, Any] = {}
    for clock, c in (("CPU", 0), ("CPU p10", 2), ("wall", 1)):
        plain = statistics.median(r["plain"][c] for r in rounds)
        print(f"[{clock} time] {'p10' if c == 2 else 'median'} step, no aiprof: {1e3 * plain:.3f} ms")
        for mode in MODES[1:]:
            ratios = [r[mode][c] / r["plain"][c] for r in rounds]
            ratio = statistics.median(ratios)
            lo, hi = _quartiles(ratios)
            us = 1e6 * (statistics.median(r[mode][c] for r in rounds) - plain)
            summary[f"{clock}.{mode}"] = {"ratio": ratio, "p25": lo, "p75": hi, "plain_ms": 1e3 * plain, "added_us": us}
            print(f"  {mode:8s}: median paired ratio {ratio:.4f} ({100 * (ratio - 1):+.2f} %), p25-p75 "
                  f"{100 * (lo - 1):+.2f} .. {100 * (hi - 1):+.2f} %; median step {us:+.1f} µs")
    step_flush = statistics.median(flush)
    plain_cpu = statistics.median(r["plain"][0] for r in rounds)
    print(f"Dynamo compile records at the flush: {1e3 * step_flush:.3f} ms once per session = "
          f"{100 * step_flush / plain_cpu:.2f} % of one step")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": rounds, "flush": flush, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
