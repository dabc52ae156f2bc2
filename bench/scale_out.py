"""Scale-out: the cross-rank reduce at 1,024 and 10,000 ranks, ranks per minute on each executor, parallel
efficiency from 1 to 2 workers, and the projected time of a 1,024 × 50 MB job on 16 cores.

- reduce: :func:`aiprof.analysis.arrival.cross_rank` over the synthetic job of tests/unit/arrival_job.py
  (28 collectives per step, 3 steps per rank), median of ``--repeat`` runs in this process;
- executors: ``aiprof analyze`` of the Megatron TP8 set (8 ranks) as a fresh subprocess with ``--executor
  local --jobs N`` and ``--executor dask`` (a LocalCluster of N workers started by the command: its start-up
  is part of the time, as a user would see it), N = 1 and 2; median wall time;
- projection: the per-rank wall time of one large rank (the 87 MB HTA MTIA trace, ``aiprof analyze`` alone)
  scaled by size to 50 MB, times 1,024 ranks, over 16 cores (one rank per core at a time), plus the
  measured reduce at 1,024 ranks.

Usage: python bench/scale_out.py [--repeat 3] [--quick]   (prints a table; numbers go to bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TRACES = ROOT / ".." / "shared" / "traces"
sys.path.insert(0, str(ROOT / "tests" / "unit"))


def reduce_seconds(world: int, repeat: int) -> tuple[float, int]:
    from arrival_job import synthetic_job

    from aiprof.analysis.arrival import cross_rank

    tables = synthetic_job(world=world)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        x = cross_rank(tables)
        times.append(time.perf_counter() - t0)
        assert x is not None
    return statistics.median(times), sum(len(t) for _, t in tables)


def analyze_seconds(args: list[str], repeat: int) -> float:
    import tempfile

    times = []
    with tempfile.TemporaryDirectory(prefix="aiprof-scale-") as tmp:
        for i in range(repeat):
            out = Path(tmp) / f"report{i}.json"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "aiprof", "analyze", *args, "-o", str(out)],
                           check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="reduce only, and 1,024 ranks only")
    opts = parser.parse_args()
    print("cross-rank reduce (synthetic job, median of runs):")
    for world in (1024,) if opts.quick else (1024, 10_000):
        seconds, rows = reduce_seconds(world, opts.repeat)
        print(f"  {world:>6} ranks, {rows:>9,} collective rows: {seconds:.2f} s")
    if opts.quick:
        return
    megatron = str(TRACES / "astra-sim" / "megatron_tp8")
    print("aiprof analyze megatron_tp8 (8 ranks), median wall time:")
    walls: dict[str, float] = {}
    for label, extra in (("local, 1 worker", ["--executor", "local", "--jobs", "1"]),
                         ("local, 2 workers", ["--executor", "local", "--jobs", "2"]),
                         ("dask LocalCluster, 1 worker", ["--executor", "dask", "--jobs", "1"]),
                         ("dask LocalCluster, 2 workers", ["--executor", "dask", "--jobs", "2"])):
        walls[label] = analyze_seconds([megatron, *extra], opts.repeat)
        print(f"  {label:<30} {walls[label]:6.2f} s  {8 / walls[label] * 60:6.1f} ranks/min")
    for kind in ("local", "dask LocalCluster"):
        one, two = walls[f"{kind}, 1 worker"], walls[f"{kind}, 2 workers"]
        print(f"  parallel efficiency 1 -> 2 workers ({kind}): {one / two / 2:.0%}")
    mtia = TRACES / "hta" / "mtia_trace_single_rank" / "mtia_rank_0.json.gz"
    if mtia.is_file():
        per_rank = analyze_seconds([str(mtia)], opts.repeat)
        reduce_1024, _ = reduce_seconds(1024, opts.repeat)
        size_mb = 87.0  # the trace's decompressed JSON (docs/performance.md)
        projected = per_rank * (50 / size_mb) * 1024 / 16 + reduce_1024
        print(f"MTIA 87 MB rank: {per_rank:.2f} s wall; projected 1,024 x 50 MB ranks on 16 cores: "
              f"{projected / 60:.1f} min (goal <= 5 min)")


if __name__ == "__main__":
    main()
