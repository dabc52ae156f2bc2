"""What the trace-health section (``aiprof.analysis.health``, issue 22) costs per rank: the time of
``rank_health`` against the whole per-rank analysis (``analysis.run.analyze_trace``), on shared real traces.

Per trace, ``--repeats`` times: a fresh load and the per-rank analysis (which calls ``rank_health`` last,
when the trace's launch links are already built), timed with ``perf_counter``; then ``rank_health`` alone on
the same loaded trace with the step counts the analysis passes it, as it runs inside the analysis. The
result is the median of each and their ratio. In-process: interpreter start-up and imports are in neither.

Run:  python bench/health_cost.py [--repeats 5] [TRACE ...]   (default: the largest shared traces)
bench/RESULTS.md keeps the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SHARED = ROOT.parent / "shared" / "traces"
DEFAULT = (
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
    "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "tracelens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz",
    "tracelens/torch_compile_triton/trace.json.gz",
)


def measure(path: Path, repeats: int) -> tuple[float, float]:
    """Median seconds of loading and analysing and of ``rank_health`` on ``path``."""
    from aiprof.analysis.coverage import device_coverage
    from aiprof.analysis.health import rank_health
    from aiprof.analysis.run import analyze_trace
    from aiprof.analysis.steps import step_windows
    from aiprof.trace.readers import load_file

    whole, health = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        trace = load_file(path)
        analyze_trace(trace)
        whole.append(time.perf_counter() - t)
        coverage = device_coverage(trace, step_windows(trace))
        steps = len(coverage.complete) + len(coverage.incomplete)
        t = time.perf_counter()
        rank_health(trace, steps, len(coverage.incomplete), coverage.cut_off)
        health.append(time.perf_counter() - t)
    return statistics.median(whole), statistics.median(health)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    paths = args.traces or [SHARED / rel for rel in DEFAULT if (SHARED / rel).exists()]
    if not paths:
        print(f"no traces given and none of the defaults under {SHARED}", file=sys.stderr)
        return 2
    print(f"{'trace':48} {'load+analysis':>14} {'health':>9} {'share':>7}")
    for path in paths:
        whole, health = measure(path, args.repeats)
        print(f"{path.name[:48]:48} {1000 * whole:12.0f} ms {1000 * health:6.1f} ms {100 * health / whole:6.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
