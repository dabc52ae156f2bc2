"""Rank summaries (aiprof.analysis.summary, the rank cache's entries): size per rank against a pickle of the
same result, and the cost of writing and reading one, on the shared 8-rank sets (Megatron TP8, DLRM).

For each rank: the worker's result with the default report's rank hook (``pipeline.diagnose_hook``), encoded
as a summary with Arrow IPC tables (when pyarrow is installed) and with MessagePack tables, and as a pickle
(protocol 5, what the cache stored before); median of ``--repeat`` encodes and decodes in this process
(pyarrow already imported: its import, ~0.15 s, is paid once per run). The machine may be shared: medians.

Usage: python bench/rank_summary.py [--repeat 50]   (prints a table; numbers go to docs/scale-out.md)
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
TRACES = BENCH.parent / ".." / "shared" / "traces"
SETS = {"Megatron TP8": TRACES / "astra-sim" / "megatron_tp8", "DLRM": TRACES / "param" / "dlrm_8rank"}


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()

    from aiprof.analysis import summary
    from aiprof.analysis.run import _load_and_analyze
    from aiprof.pipeline import diagnose_hook

    kind = summary.hook_result_type(diagnose_hook)
    pa = summary.arrow()
    encodings = (["arrow-ipc"] if pa is not None else []) + ["msgpack"]
    print("| set | encoding | summary kB / rank (zlib; raw) | pickle kB | encode ms | decode ms | pickle.loads ms |")
    print("|---|---|---|---|---|---|---|")
    real_arrow = summary.arrow
    for name, folder in SETS.items():
        results = [_load_and_analyze((f, True, diagnose_hook, None)) for f in sorted(folder.iterdir())]
        pickles = [pickle.dumps(r, protocol=5) for r in results]
        for enc in encodings:
            summary.arrow = real_arrow if enc == "arrow-ipc" else (lambda: None)  # type: ignore[assignment]
            blobs = [summary.encode(r, kind) for r in results]
            assert all(b is not None for b in blobs), "a result the summary cannot carry"
            data = [b for b in blobs if b is not None]
            enc_ms = statistics.median(median_ms(lambda r=r: summary.encode(r, kind), args.repeat) for r in results)
            dec_ms = statistics.median(median_ms(lambda b=b: summary.decode(b, kind), args.repeat) for b in data)
            pkl_ms = statistics.median(median_ms(lambda p=p: pickle.loads(p), args.repeat) for p in pickles)
            size = statistics.median(len(b) for b in data) / 1e3
            raw = statistics.median(len(zlib.decompress(b)) for b in data) / 1e3
            psize = statistics.median(len(p) for p in pickles) / 1e3
            print(f"| {name} | {enc} | {size:.1f} ({raw:.0f}) | {psize:.0f} | {enc_ms:.2f} | {dec_ms:.2f} | "
                  f"{pkl_ms:.2f} |")
        summary.arrow = real_arrow  # type: ignore[assignment]


if __name__ == "__main__":
    main()
