"""Hostile-input scaling: the time of every reader and linker at 1x, 2x and 4x sizes of generated inputs,
and peak memory as a multiple of the decompressed trace text.

Inputs (tests/hostile/hostile_inputs.py): an ordinary trace, a run of whitespace with no event boundary,
one huge event (a list of small objects inside it), one very long name, deeply nested spans, many
distinct names. Each is loaded by both readers (the streaming reader, and the whole-file path that
salvages what the stream cannot read), then linked (span parents, launches, issuing ops, forward ops)
and split into steps. Every measurement runs in a fresh process (peak RSS is per process), one at a
time, and prints ratios between sizes: linear work reads ~2.0 per doubling, quadratic ~4.0.

Peak memory is reported as (peak RSS - RSS after imports) / decompressed text bytes: the number
docs/performance.md documents. Run:  python bench/hostile_scaling.py [--scale 1] [--repeat 1]
(``--scale`` multiplies every base size; the defaults take a few seconds per case on a laptop.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests" / "hostile"))

# case → (writer name, base size argument at 1x)
CASES: dict[str, tuple[str, int]] = {
    "normal trace": ("normal_trace", 100_000),  # events
    "spaces run": ("spaces_run", 32 << 20),  # whitespace bytes between two events
    "one huge event": ("huge_event", 2_000_000),  # small objects inside one event (8 bytes each)
    "one long name": ("long_name", 16 << 20),  # characters in one name
    "deep nesting": ("deep_nesting", 40_000),  # nesting depth
    "many names": ("many_names", 100_000),  # events, each with its own name
}
READERS = ("stream", "whole-file")
MULTIPLES = (1, 2, 4)


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measure(path: Path, reader: str) -> dict[str, Any]:
    """In the child process: load ``path`` with one reader, link it, find its steps."""
    import warnings

    warnings.simplefilter("ignore")
    from aiprof.analysis.steps import step_windows
    from aiprof.trace import links
    from aiprof.trace.kineto import loader, stream

    if reader == "whole-file":
        stream.stream_load = lambda *a, **k: None  # type: ignore[assignment]
    import numpy  # noqa: F401  (imported before the baseline)

    base = _rss_bytes()
    start = time.perf_counter()
    trace = loader.load_file(path)
    loaded = time.perf_counter()
    links.parent(trace)
    links.launcher(trace)
    links.issuing_op(trace)
    links.gpu_op(trace)
    links.forward_of(trace)
    linked = time.perf_counter()
    step_windows(trace)
    done = time.perf_counter()
    return {
        "load_s": loaded - start,
        "link_s": linked - loaded,
        "steps_s": done - linked,
        "peak_rss": _rss_bytes(),
        "base_rss": base,
        "events": trace.event_count,
    }


def run_child(path: Path, reader: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(path), reader], capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every base size")
    parser.add_argument("--repeat", type=int, default=1, help="runs per point (median)")
    parser.add_argument("--case", action="append", choices=list(CASES), help="only these cases")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child[0]), args.child[1])))
        return
    import hostile_inputs

    print(f"{'case':<16} {'reader':<11} {'size':>5} {'text MB':>8} {'load s':>7} {'link s':>7} {'steps s':>7} "
          f"{'ratio':>6} {'RSS/text':>8}")
    with tempfile.TemporaryDirectory(prefix="aiprof-hostile-") as tmp:
        for case in args.case or list(CASES):
            writer, base = CASES[case]
            files = {}
            for m in MULTIPLES:
                path = Path(tmp) / f"{writer}-{m}.json"
                getattr(hostile_inputs, writer)(path, int(base * args.scale * m))
                files[m] = path
            for reader in READERS:
                previous = 0.0
                for m in MULTIPLES:
                    runs = [run_child(files[m], reader) for _ in range(args.repeat)]
                    total = statistics.median(r["load_s"] + r["link_s"] + r["steps_s"] for r in runs)
                    point = runs[0]
                    text = files[m].stat().st_size
                    rss = max(0, point["peak_rss"] - point["base_rss"]) / text
                    ratio = f"{total / previous:6.2f}" if previous else "     -"
                    print(
                        f"{case:<16} {reader:<11} {m:>4}x {text / 2**20:8.1f} "
                        f"{statistics.median(r['load_s'] for r in runs):7.2f} "
                        f"{statistics.median(r['link_s'] for r in runs):7.2f} "
                        f"{statistics.median(r['steps_s'] for r in runs):7.2f} {ratio} {rss:8.2f}",
                        flush=True,
                    )
                    previous = total
            for path in files.values():
                path.unlink()


if __name__ == "__main__":
    main()
