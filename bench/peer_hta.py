"""Run HTA's equivalent of ``aiprof analyze`` on one trace (file or folder); print timings as JSON.

Runs inside bench/.venv-hta (holistictraceanalysis==0.5.0); run_all.py starts it as a fresh subprocess
and measures its wall time and peak RSS from outside. HTA wants a folder of traces: a single file is
symlinked alone into a temporary folder first (costs nothing measurable).

What is timed: ``TraceAnalysis(trace_dir=...)`` (HTA's parse into pandas frames) and
``get_temporal_breakdown()`` (its idle/compute/non-compute split, the closest peer to aiprof's
GPU-time breakdown). Printed: {"import_s", "parse_s", "analysis_s", "total_s", "events", "result"}.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis  # imported inside the timed window: part of the cost

    t1 = time.perf_counter()
    target = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory(prefix="hta-bench-") as tmp:
        if target.is_file():
            os.symlink(target, Path(tmp) / target.name)
            trace_dir = tmp
        else:
            trace_dir = str(target)
        analyzer = TraceAnalysis(trace_dir=trace_dir)
        t2 = time.perf_counter()
        breakdown = analyzer.get_temporal_breakdown(visualize=False)
        t3 = time.perf_counter()
    events = sum(len(analyzer.t.get_trace(r)) for r in analyzer.t.get_all_traces())
    rows = breakdown.to_dict(orient="records")
    print(
        json.dumps(
            {
                "import_s": t1 - t0,
                "parse_s": t2 - t1,
                "analysis_s": t3 - t2,
                "total_s": t3 - t0,
                "events": events,
                "result": rows[:2],
            },
            default=str,
        )
    )


if __name__ == "__main__":
    main()
