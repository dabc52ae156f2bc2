"""One rank's wall time, aiprof against HTA, interleaved: for a shared, noisy machine.

``run_all.py`` times each tool's runs one after the other, so a burst of load from a neighbour lands on one
tool only. Here each round runs ``aiprof analyze TRACE -o OUT.json`` (this checkout's sources, the Python
running this script) and then HTA's equivalent (bench/peer_hta.py in bench/.venv-hta: parse and temporal
breakdown), each a fresh process, after one untimed warm-up of each (page cache, byte-compiled sources).
Printed: each tool's median wall and CPU time, the ratio of the medians, the median and range of the
per-round ratios, HTA's own split (import, parse, analysis), and the load average before and after: quote the
medians with the load, never as quiet-machine numbers.

Usage: python bench/per_rank_hta.py [--rounds 7] [TRACE]   (default: the 87 MB HTA MTIA rank)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import run_all  # noqa: E402  (bench/ is not a package)

MTIA = run_all.REAL_TRACES["hta/mtia_trace_single_rank"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path, nargs="?", default=MTIA)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not run_all.HTA_PY.exists():
        sys.exit(f"per_rank_hta: {run_all.HTA_PY} missing; run bench/setup_peers.sh first")
    env = {**os.environ, "PYTHONPATH": str(run_all.ROOT / "src")}
    log = Path(tempfile.gettempdir()) / "per_rank_hta.log"
    with tempfile.TemporaryDirectory(prefix="per-rank-hta-") as tmp:
        ours = [sys.executable, "-m", "aiprof", "analyze", str(args.trace), "-o", str(Path(tmp) / "out.json")]
        hta = [str(run_all.HTA_PY), str(BENCH / "peer_hta.py"), str(args.trace)]
        load_before = os.getloadavg()
        rounds: list[tuple[run_all.Run, run_all.Run, dict[str, float]]] = []
        for i in range(args.rounds + 1):
            a, _ = run_all.measure(ours, log, env, sample=False)
            h, out = run_all.measure(hta, log, sample=False)
            if a.rc or h.rc:
                sys.exit(f"per_rank_hta: a run failed (aiprof exit {a.rc}, HTA exit {h.rc}; see {log})")
            if i:  # round 0 warms up
                rounds.append((a, h, json.loads(out.strip().splitlines()[-1])))
            print(f"  round {i}: aiprof {a.wall_s:.2f} s, HTA {h.wall_s:.2f} s, {h.wall_s / a.wall_s:.1f}x"
                  f"{'' if i else ' (warm-up)'}", file=sys.stderr, flush=True)
        load_after = os.getloadavg()
    med = statistics.median
    a_wall, h_wall = med(r[0].wall_s for r in rounds), med(r[1].wall_s for r in rounds)
    ratios = [r[1].wall_s / r[0].wall_s for r in rounds]
    print(json.dumps({
        "trace": str(args.trace), "rounds": len(rounds),
        "aiprof_wall_s": round(a_wall, 3), "aiprof_cpu_s": round(med(r[0].cpu_s for r in rounds), 3),
        "hta_wall_s": round(h_wall, 3), "hta_cpu_s": round(med(r[1].cpu_s for r in rounds), 3),
        "ratio_of_medians": round(h_wall / a_wall, 2), "ratio_median": round(med(ratios), 2),
        "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
        "hta_split_s": {k: round(med(r[2][k] for r in rounds), 3) for k in ("import_s", "parse_s", "analysis_s")},
        "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in load_after],
        "cores": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
