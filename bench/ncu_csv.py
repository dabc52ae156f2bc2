"""Nsight Compute CSV import: time and peak memory of ``read_ncu`` on a generated ``ncu --csv --page raw
--print-units base`` export of N kernels (a header, a units row, one row per kernel, ~130 bytes a row: 300k
rows is ~39 MB, the size that took 21 s and 1.1 GB when the reader read the file whole).

Each repeat runs in a fresh process (peak RSS is that process's ``ru_maxrss``); prints the median wall
seconds, rows per second and the peak RSS. ``PYTHONPATH=…/src`` times another checkout on the same file.
Run:  python bench/ncu_csv.py [--rows 300000] [--repeat 3] [--csv FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
          "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
UNITS = ["", "", "", "", "", "", "", "", "", "", "", "nsecond", "byte", "byte", "inst", "%"]


def build(path: Path, rows: int) -> Path:
    """Write the export, streamed (a row at a time)."""
    quote = lambda cells: ",".join(f'"{c}"' for c in cells) + "\n"  # noqa: E731
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("==PROF== Disconnected from process 4242\n")
        fh.write(quote(HEADER))
        fh.write(quote(UNITS))
        for i in range(rows):
            fh.write(quote([i, 4242, "bench", "host", f"kernel_{i % 50}(float*, int)", 1, 7, "(256, 1, 1)",
                            "(120, 1, 1)", 0, "8.0", 2000 + i % 977, 1_000_000 + i, 500_000, 4096, "12.5"]))
    return path


_CHILD = """
import json, resource, sys, time
from pathlib import Path
from aiprof.trace.readers.ncu import read_ncu
t0 = time.perf_counter()
results = read_ncu(Path(sys.argv[1]))
wall = time.perf_counter() - t0
print(json.dumps({"rows": len(results), "wall_s": wall,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--csv", type=Path, help="keep the export here (built when absent)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.csv or Path(tmp) / "ncu.csv"
        if not path.exists():
            build(path, args.rows)
        runs = []
        for _ in range(args.repeat):
            done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                                  env=dict(os.environ), check=True)
            runs.append(json.loads(done.stdout))
        wall = statistics.median(r["wall_s"] for r in runs)
        rss = statistics.median(r["peak_rss_mb"] for r in runs)
        rows = runs[0]["rows"]
        print(f"{path.stat().st_size / 1e6:.1f} MB, {rows:,} kernels: {wall:.2f} s wall ({rows / wall:,.0f} rows/s), "
              f"peak RSS {rss:,.0f} MB (median of {args.repeat})")


if __name__ == "__main__":
    main()
