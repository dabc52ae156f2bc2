"""End-to-end ``aiprof analyze`` time of two source trees on the same traces: did a set of commits move speed?

Each run is a fresh ``python -m aiprof analyze TRACE --format json -o FILE`` process (interpreter start-up and
imports included, as a user sees it) with ``PYTHONPATH`` pointing at one tree's ``src``; the two trees alternate
run by run so that the machine's drift falls on both alike. Prints the median wall time per tree and the ratio
(after / before) per trace. Both trees must hold the same native extensions (copy the ``.so`` files of one
build into the other when the C sources did not change), or the comparison measures the build, not the code.

Run:  python bench/analyze_commits.py BEFORE_SRC AFTER_SRC [--runs 7] [TRACE ...]
      e.g. a ``git worktree add /tmp/before <commit>`` for BEFORE_SRC=/tmp/before/src, AFTER_SRC=src
bench/RESULTS.md keeps the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
DEFAULT = (
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
    "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz",
)


def one_run(src: Path, trace: Path, out: Path) -> float:
    """Seconds of one fresh ``aiprof analyze`` process on ``trace`` with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(trace), "--format", "json", "-o",
                           str(out), "--force"], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{trace.name}: aiprof analyze failed with {src}: {done.stderr.strip()[-300:]}")
    return elapsed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="src folder of the tree before")
    parser.add_argument("after", type=Path, help="src folder of the tree after")
    parser.add_argument("traces", nargs="*", help=f"traces under {SHARED} (default: {len(DEFAULT)} large ones)")
    parser.add_argument("--runs", type=int, default=7, help="runs per tree and trace (alternating)")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(f"{'trace':<58} {'before':>8} {'after':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for rel in args.traces or DEFAULT:
            trace = SHARED / rel
            if not trace.exists():
                print(f"{rel}: not in this copy of the shared traces, skipped")
                continue
            times: dict[str, list[float]] = {"before": [], "after": []}
            for i in range(args.runs):
                order = ("before", "after") if i % 2 == 0 else ("after", "before")
                for side in order:
                    src = args.before if side == "before" else args.after
                    times[side].append(one_run(src.resolve(), trace, Path(tmp) / f"{side}.json"))
            before, after = statistics.median(times["before"]), statistics.median(times["after"])
            print(f"{rel[-58:]:<58} {before:7.2f}s {after:7.2f}s {after / before:5.2f}x")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
