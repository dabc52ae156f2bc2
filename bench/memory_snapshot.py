"""Analyse a synthetic allocator snapshot of a given size and print the time and the peak RSS.

    python bench/memory_snapshot.py [--mib 1024] [--keep PATH]

The snapshot imitates torch's layout: 64 distinct stacks of 8 frames whose frame dicts are shared (pickle
memoizes them, as in real dumps), one trace entry per alloc / free_requested / free_completed, a
forward/backward-like pattern with a growing and shrinking live set, and segments holding what is live at
the end. The analysis runs in a child process (``aiprof memory --format json``) so its RSS is its own.
Goal (issue 13): a 1 GiB snapshot in ≤ 10 s and ≤ 2 GiB RSS on the 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BYTES_PER_TRIPLE = 3 * 168  # measured: one alloc + free_requested + free_completed with 8 shared frames


def synthetic(target_bytes: int) -> dict[str, Any]:
    frames = [{"filename": f"/home/u/model_{i % 7}.py", "line": 10 + i, "name": f"fn{i}"} for i in range(128)]
    stacks = [[frames[(s * 3 + k) % 128] for k in range(8)] for s in range(64)]
    trace: list[dict[str, Any]] = []
    triples = max(target_bytes // BYTES_PER_TRIPLE, 1)
    t = 1_700_000_000_000_000
    live: list[tuple[int, int]] = []
    addr = 1 << 40
    for i in range(triples):
        t += 3
        size = 512 * (1 + (i * 7919) % 4096)
        stack = stacks[i % 64]
        trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t,
                      "frames": list(stack), "compile_context": "N/A", "user_metadata": ""})
        live.append((addr, size))
        addr += size
        if len(live) > 2000 or (i // 1000) % 2:
            a, s = live.pop(0)
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": a, "size": s, "stream": 0, "time_us": t + 1,
                              "frames": list(stack), "compile_context": "N/A", "user_metadata": ""})
    blocks = [{"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": []} for a, s in live]
    segments = [{"device": 0, "address": a, "total_size": s, "allocated_size": s, "active_size": s, "requested_size": s,
                 "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                 "blocks": [b]} for (a, s), b in zip(live, blocks)]
    return {"segments": segments, "device_traces": [trace], "allocator_settings": {"expandable_segments": False},
            "external_annotations": []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="target pickle size in MiB (default 1024)")
    parser.add_argument("--keep", type=Path, help="write the snapshot here and keep it")
    args = parser.parse_args()
    path = args.keep or Path(tempfile.mkdtemp()) / "synthetic.pickle"
    if not path.exists():
        t0 = time.perf_counter()
        snap = synthetic(args.mib << 20)
        with open(path, "wb") as fh:
            pickle.dump(snap, fh, protocol=4)
        del snap
        print(f"wrote {path} ({path.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.1f} s")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "aiprof", "memory", str(path), "--format", "json", "-o", os.devnull],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB → GiB
    print(f"aiprof memory: exit {done.returncode}, {wall:.1f} s, peak RSS {rss:.2f} GiB "
          f"({path.stat().st_size / 2**20:,.0f} MiB snapshot)")
    if done.returncode:
        print(done.stderr[-2000:])
    if args.keep is None:
        path.unlink()
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
