"""What ``aiprof run`` / ``aiprof.profile`` add for a torch.compile'd model, on CPU (torch + Inductor's C++
backend): a small MLP trained compiled (4 × Linear(256, 256) + ReLU, batch 64, SGD, one thread).

1. **Per step**: in one process (Dynamo's caches are per process), blocks of ``--block`` steady compiled
   steps alternate between no aiprof and ``aiprof.profile`` with the profiler not recording (a schedule
   whose wait outlasts the block: what remains is what aiprof adds around the compiled calls, its step
   detection and module hooks), ``--blocks`` pairs, each block's first ``--warm`` steps left out (a
   changed hook set makes Dynamo check guards anew). Per pair the ratio of the two blocks' median steps;
   the result is the median of those ratios over the pairs of ``--repeat`` processes, so load drift on a
   shared machine hits both sides of a pair alike.
2. **At the flush**: the capture of Dynamo's compile records (:mod:`aiprof.capture.dynamo`: the baseline
   taken when a session begins and the record built at its end, JSON included), timed in the measured
   process after its steps (median of 20 calls), as a share of one median step. It runs once per session,
   never per step.

Goal: ≤ 2 % of a step for each. Run:  python bench/compile_capture.py [--repeat 3]
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

    def block(prof: Any) -> float:
        times: list[float] = []
        for i in range(args.warm + args.block):
            t0 = time.perf_counter()
            compiled(x).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if prof is not None:
                prof.step()
            if i >= args.warm:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    pairs: list[list[float]] = []
    for k in range(args.blocks + 1):  # the first pair compiles both hook sets: left out
        plain = block(None)
        with aiprof.profile(out=f"{args.out}-{k}", schedule=(10_000, 0, 1), telemetry=False, profile_memory=False,
                            quiet=True) as prof:
            if args.no_detector:  # attribution: without the inference detector's global module hooks
                from aiprof.capture import session

                current = session.current()
                if current is not None and current._remove_detector is not None:
                    current._remove_detector()
            ours = block(prof)
        if k:
            pairs.append([plain, ours])
    flush: list[float] = []
    for _ in range(20):
        t0 = time.perf_counter()
        data = dynamo_record(DynamoBaseline.now())
        DynamoBaseline.now()
        flush.append(time.perf_counter() - t0)
    assert data is None or data.startswith(b"{")
    Path(args.result).write_text(json.dumps({"pairs": pairs, "flush": flush}))


def run(args: argparse.Namespace, tmp: Path, k: int) -> dict[str, Any]:
    result = tmp / f"result{k}.json"
    cmd = [sys.executable, __file__, "--worker", "--out", str(tmp / f"run{k}"), "--result", str(result),
           "--block", str(args.block), "--blocks", str(args.blocks), "--warm", str(args.warm),
           *(["--no-detector"] if args.no_detector else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor-cache"),
           "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=900)
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--block", type=int, default=30)
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--no-detector", action="store_true",
                   help="remove the inference detector's global module hooks in the aiprof blocks (attribution)")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--out", default="")
    p.add_argument("--result", default="")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    pairs: list[list[float]] = []
    flush: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        for k in range(args.repeat):
            data = run(args, Path(d), k)
            pairs += data["pairs"]
            flush += data["flush"]
    ratios = [ours / plain for plain, ours in pairs]
    plain = statistics.median(p[0] for p in pairs)
    ours = statistics.median(p[1] for p in pairs)
    ratio = statistics.median(ratios)
    step_flush = statistics.median(flush)
    print(f"{len(pairs)} block pairs of {args.block} steps, {args.repeat} processes")
    print(f"median step, no aiprof: {1e3 * plain:.3f} ms; under aiprof.profile (not recording): {1e3 * ours:.3f} ms")
    print(f"per step: median paired ratio aiprof / none = {ratio:.4f} ({100 * (ratio - 1):+.2f} %); "
          f"ratios p25-p75 {statistics.quantiles(ratios, n=4)[0]:.4f}-{statistics.quantiles(ratios, n=4)[2]:.4f}")
    print(f"Dynamo compile records at the flush: {1e3 * step_flush:.3f} ms once per session = "
          f"{100 * step_flush / plain:.2f} % of one step")


if __name__ == "__main__":
    main()
