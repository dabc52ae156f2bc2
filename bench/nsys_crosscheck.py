"""GPU cross-check of the Nsight Systems reader against torch.profiler (issue 14's proof; needs a CUDA GPU,
torch with CUDA and ``nsys`` on PATH).

The same 20-step PyTorch run (3 unprofiled warm-up steps first) is captured twice: with torch.profiler
(Kineto JSON) and with ``nsys profile --pytorch=autograd-nvtx --capture-range=cudaProfilerApi`` (exported to
SQLite). aiprof then reads both and checks: equal kernel counts per kernel name, per-kernel median
durations within 1 % (names with >= 5 launches), median step time within 2 %, and the same top three
findings. The small outputs stay in ``--out`` (keep them as fixtures).

    python bench/nsys_crosscheck.py --out crosscheck/            # capture both, compare (the one command)
    python bench/nsys_crosscheck.py --compare A.json B.sqlite    # the comparison alone (no GPU)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

STEPS, WARMUP = 20, 3


def workload(mode: str, out: Path) -> None:
    """The profiled program: a small conv net, one ``.item()`` per step (a host round trip to find)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 3, 64, 64, device="cuda"), torch.randint(0, 10, (64,), device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    if mode == "kineto":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(STEPS):
                step()
                prof.step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(out / "kineto.json"))
    else:  # under nsys: the capture range is the profiled loop, each step an NVTX ProfilerStep#i range
        torch.cuda.profiler.start()
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            for i in range(STEPS):
                torch.cuda.nvtx.range_push(f"ProfilerStep#{i}")
                step()
                torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def capture(out: Path) -> tuple[Path, Path]:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise SystemExit("nsys is not on PATH")
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve())]
    subprocess.run([*me, "--workload", "kineto", "--out", str(out)], check=True)
    subprocess.run([nsys, "profile", "--force-overwrite", "true", "--trace", "cuda,nvtx", "--pytorch",
                    "autograd-nvtx", "--capture-range", "cudaProfilerApi", "--capture-range-end", "stop",
                    "--output", str(out / "nsys"), *me, "--workload", "nsys", "--out", str(out)], check=True)
    subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
                    str(out / "nsys.sqlite"), str(out / "nsys.nsys-rep")], check=True)
    return out / "kineto.json", out / "nsys.sqlite"


def facts(path: Path) -> dict[str, Any]:
    """Kernel durations per name, step times and the top three findings, as aiprof reads ``path``."""
    import aiprof
    from aiprof import app

    trace = aiprof.load(path)
    kernels = trace.kernels()  # type: ignore[union-attr]
    durations: dict[str, list[int]] = defaultdict(list)
    for name, dur in zip(kernels.names, kernels.column("dur").tolist()):
        durations[name].append(int(dur))
    report = app.analyze([path], app.AnalyzeOptions(workers=1))
    steps = [s.duration_ns for s in report.ranks[0].steps]
    return {"kernels": dict(durations), "steps": steps, "top3": [f.id for f in report.findings[:3]]}


def compare(a_path: Path, b_path: Path) -> bool:
    a, b = facts(a_path), facts(b_path)
    ok = True

    def check(what: str, good: bool, detail: str) -> None:
        nonlocal ok
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {what}: {detail}")

    counts_a = {k: len(v) for k, v in a["kernels"].items()}
    counts_b = {k: len(v) for k, v in b["kernels"].items()}
    differ = sorted(k for k in counts_a.keys() | counts_b.keys() if counts_a.get(k) != counts_b.get(k))
    check("kernel counts", not differ, f"{sum(counts_a.values())} vs {sum(counts_b.values())} kernels, "
          f"{len(counts_a)} names" + (f"; differ: {differ[:3]}" if differ else ""))
    worst, name = 0.0, ""
    for k, va in a["kernels"].items():
        vb = b["kernels"].get(k, [])
        if len(va) >= 5 and len(vb) >= 5:
            ma, mb = statistics.median(va), statistics.median(vb)
            dev = abs(ma - mb) / ma if ma else 0.0
            worst, name = max((worst, name), (dev, k))
    check("per-kernel median durations within 1 %", worst <= 0.01, f"largest difference {worst:.2%} ({name[:60]})")
    sa, sb = statistics.median(a["steps"] or [0]), statistics.median(b["steps"] or [0])
    dev = abs(sa - sb) / sa if sa else 1.0
    check("median step time within 2 %", dev <= 0.02 and len(a["steps"]) == len(b["steps"]),
          f"{sa / 1e6:.3f} vs {sb / 1e6:.3f} ms ({dev:.2%}), {len(a['steps'])} vs {len(b['steps'])} steps")
    check("top three findings", a["top3"] == b["top3"], f"{a['top3']} vs {b['top3']}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("crosscheck"))
    parser.add_argument("--workload", choices=["kineto", "nsys"], help=argparse.SUPPRESS)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("KINETO", "NSYS"))
    args = parser.parse_args(argv)
    if args.workload:
        workload(args.workload, args.out)
        return 0
    kineto, nsys = args.compare if args.compare else capture(args.out)
    return 0 if compare(kineto, nsys) else 1


if __name__ == "__main__":
    sys.exit(main())
