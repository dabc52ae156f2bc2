"""What ``aiprof run`` / ``aiprof.profile`` add for a torch.compile'd model, on CPU (torch + Inductor's C++
backend): a small MLP trained compiled, each mode in a fresh process (Dynamo's state is per process), the
modes interleaved (none, aiprof, none, …) ``--repeat`` times.

1. **Per step**: the median step time of the steady compiled steps (after the compile and ``--warm``
   steps) under ``aiprof.profile`` with the profiler not recording (a schedule whose wait outlasts the
   run: what remains is aiprof's hooks around the compiled calls: step detection, module hooks), against
   no aiprof. Ratio = aiprof / none of the medians over the runs.
2. **At the flush**: the capture of Dynamo's compile records (:mod:`aiprof.capture.dynamo`: the baseline
   taken when the session begins and the record built at the end, JSON included), timed in the measured
   process after its steps (median of 20 calls), as a share of one median step. It runs once per process,
   never per step.

Goal: ≤ 2 % of a step for each. Run:  python bench/compile_capture.py [--repeat 5]
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

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model)
    x = torch.randn(64, 256)

    def step() -> None:
        compiled(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times: list[float] = []
    flush: list[float] = []

    def loop(prof: Any) -> None:
        for i in range(args.warm + args.steps):
            t0 = time.perf_counter()
            step()
            if prof is not None:
                prof.step()
            if i >= args.warm:
                times.append(time.perf_counter() - t0)

    if args.mode == "aiprof":
        import aiprof
        from aiprof.capture.dynamo import DynamoBaseline, dynamo_record

        with aiprof.profile(out=args.out, schedule=(10_000, 0, 1), telemetry=False, profile_memory=False,
                            quiet=True) as prof:
            loop(prof)
        for _ in range(20):
            t0 = time.perf_counter()
            data = dynamo_record(DynamoBaseline.now())
            DynamoBaseline.now()
            flush.append(time.perf_counter() - t0)
        assert data is None or data.startswith(b"{")
    else:
        loop(None)
    Path(args.result).write_text(json.dumps({"steps": times, "flush": flush}))


def run(mode: str, args: argparse.Namespace, tmp: Path, k: int) -> dict[str, Any]:
    result = tmp / f"{mode}{k}.json"
    cmd = [sys.executable, __file__, "--worker", "--mode", mode, "--out", str(tmp / f"run-{mode}{k}"),
           "--result", str(result), "--steps", str(args.steps), "--warm", str(args.warm)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor-cache"),
           "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=900)
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warm", type=int, default=10)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--mode", default="none")
    p.add_argument("--out", default="")
    p.add_argument("--result", default="")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    medians: dict[str, list[float]] = {"none": [], "aiprof": []}
    flush: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        run("none", args, tmp, -1)  # fills Inductor's cache: every measured process compiles alike
        for k in range(args.repeat):
            for mode in ("none", "aiprof"):
                data = run(mode, args, tmp, k)
                medians[mode].append(statistics.median(data["steps"]))
                flush += data["flush"]
    none, ours = statistics.median(medians["none"]), statistics.median(medians["aiprof"])
    step_flush = statistics.median(flush)
    print(f"median step, none:   {1e3 * none:.3f} ms  (runs: {', '.join(f'{1e3 * v:.3f}' for v in medians['none'])})")
    print(f"median step, aiprof: {1e3 * ours:.3f} ms  (runs: {', '.join(f'{1e3 * v:.3f}' for v in medians['aiprof'])})")
    print(f"per step: aiprof / none = {ours / none:.4f} ({100 * (ours / none - 1):+.2f} %)")
    print(f"Dynamo compile records at the flush: {1e3 * step_flush:.3f} ms once = {100 * step_flush / none:.2f} % of one step")


if __name__ == "__main__":
    main()
