"""What-if on planted CPU workloads: the step predicted from the planted variant's trace with its fix
replayed, against the step measured after the fix is applied for real.

For each workload whose fix maps to a what-if edit (``aiprof.analysis.whatif.findings.FIX_EDITS``: today
``data_loading``, remove the DataLoader wait) and each repeat:

1. profile the planted variant in a fresh process (``aiprof.workloads.isolated.profile``) and predict its
   median step with the fix replayed (``predict`` on the trace's dependency graph);
2. profile the fixed variant the same way: its measured median step, under the same profiler (the
   profiled-vs-profiled pair);
3. time the fixed variant unprofiled in a fresh process (``isolated.step_times_ns``): the unprofiled
   median step, for reference (the prediction carries the profiler's own cost, so it sits above this).

Run:  PYTHONPATH=src python bench/whatif_planted.py [--repeats 2] [--only data_loading]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import aiprof
from aiprof.analysis.steps import step_windows
from aiprof.analysis.whatif.edits import Edit, RemoveDataLoading, predict
from aiprof.analysis.whatif.graph import build_graph
from aiprof.trace.model import Trace

EDITS: dict[str, list[Edit]] = {"data_loading": [RemoveDataLoading()]}


def _trace(path: str) -> Trace:
    loaded = aiprof.load(path)
    assert isinstance(loaded, Trace)
    return loaded


def one(name: str, tmp: Path) -> tuple[float, float, float, float]:
    """(measured before, predicted after, measured after profiled, measured after unprofiled), ms."""
    from aiprof.workloads import isolated

    before = _trace(isolated.profile(name, False, str(tmp / "before")))
    prediction = predict(build_graph(before), EDITS[name])
    after = _trace(isolated.profile(name, True, str(tmp / "after")))
    measured = statistics.median(w.duration_ns for w in step_windows(after))
    bare = statistics.median(isolated.step_times_ns(name, True))
    return (prediction.baseline_median_ns / 1e6, prediction.predicted_median_ns / 1e6, measured / 1e6, bare / 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", default=",".join(EDITS))
    args = parser.parse_args(argv)
    for name in args.only.split(","):
        for i in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                b, p, m, u = one(name, Path(tmp))
            print(f"{name} #{i + 1}: planted {b:.1f} ms -> predicted {p:.1f} ms; fixed, profiled {m:.1f} ms "
                  f"(error {(p - m) / m:+.1%}); fixed, unprofiled {u:.1f} ms (error {(p - u) / u:+.1%})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
