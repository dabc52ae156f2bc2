"""Run AMD TraceLens's equivalent of ``aiprof analyze`` on one trace; print timings as JSON.

Runs inside bench/.venv-tracelens, which bench/setup_peers.sh creates only from a local TraceLens
checkout or wheel (TRACELENS_SRC): AMD's TraceLens is installed from git and is not on PyPI (the PyPI
name "TraceLens" is an unrelated project). run_all.py skips it when that venv is absent.

What is timed: ``TreePerfAnalyzer.from_file`` (TraceLens's parse + call tree build) and the two
tables its perf report starts from: ``get_df_gpu_timeline()`` (busy/idle, the peer of aiprof's GPU
time breakdown) and ``get_df_kernel_launchers()`` (per-op GPU time). Written from TraceLens's
documented API; not run here (TraceLens could not be installed on the benchmark machine).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    t0 = time.perf_counter()
    from TraceLens import TreePerfAnalyzer

    t1 = time.perf_counter()
    analyzer = TreePerfAnalyzer.from_file(sys.argv[1])
    t2 = time.perf_counter()
    timeline = analyzer.get_df_gpu_timeline()
    launchers = analyzer.get_df_kernel_launchers()
    t3 = time.perf_counter()
    print(
        json.dumps(
            {
                "import_s": t1 - t0,
                "parse_s": t2 - t1,
                "analysis_s": t3 - t2,
                "total_s": t3 - t0,
                "events": len(analyzer.tree.events),
                "launchers": len(launchers),
                "result": timeline.to_dict(orient="records"),
            },
            default=str,
        )
    )


if __name__ == "__main__":
    main()
