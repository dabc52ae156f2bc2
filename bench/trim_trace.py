"""Keep the first K profiler steps of a Kineto trace: a real trace, shorter, as if the window had been K steps.

    python bench/trim_trace.py IN.json[.gz] OUT.json.gz --steps 2 [--skip 1]

Used to make test fixtures of GPU traces that would be too large with every recorded step. What is kept:

- every top-level key (``deviceProperties``, ``distributedInfo``, schema, …) and every metadata event (``ph: M``);
- every host event (CPU ops, runtime and driver calls, annotations, Python frames, instants) that starts inside
  the window [first kept ``ProfilerStep#`` start, last kept step's end] (``--skip N``: the window starts at the
  N+1-th step);
- every device event (kernels, copies, sets) and flow event (``ac2g``) whose ``correlation`` / id belongs to a
  kept runtime or driver call, wherever it runs (a kernel launched in the last step may end after it);
- device events with no correlation that start inside the window.

Nothing is rewritten: the kept events are the recorded ones, byte for byte after a JSON round trip.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def _open(path: Path) -> Any:
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as fh:
        return json.load(fh)


def trim(doc: dict[str, Any], steps: int, skip: int = 0) -> dict[str, Any]:
    events: list[dict[str, Any]] = doc["traceEvents"]
    marks = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
                    and e.get("cat") not in DEVICE_CATS), key=lambda e: float(e["ts"]))[skip:]
    if len(marks) < steps:
        raise SystemExit(f"trim_trace: the trace has {len(marks)} profiler steps after --skip {skip}, fewer than --steps {steps}")
    lo = float(marks[0]["ts"])
    hi = max(float(m["ts"]) + float(m.get("dur", 0)) for m in marks[:steps])

    def inside(e: dict[str, Any]) -> bool:
        return "ts" in e and lo <= float(e["ts"]) <= hi

    kept_corr = {e.get("args", {}).get("correlation") for e in events if e.get("cat") in LAUNCH_CATS and inside(e)}
    kept_corr.discard(None)
    out: list[dict[str, Any]] = []
    for e in events:
        cat = e.get("cat")
        if e.get("ph") == "M":
            out.append(e)
        elif cat in DEVICE_CATS:
            corr = e.get("args", {}).get("correlation")
            if corr in kept_corr or (corr is None and inside(e)):
                out.append(e)
        elif cat == "ac2g":
            if e.get("id") in kept_corr:
                out.append(e)
        elif inside(e):
            out.append(e)
    return {**doc, "traceEvents": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--skip", type=int, default=0, help="profiler steps to leave out before the window")
    args = parser.parse_args()
    doc = _open(args.src)
    trimmed = trim(doc, args.steps, args.skip)
    with gzip.open(args.dst, "wt", encoding="utf-8", compresslevel=9) as fh:
        json.dump(trimmed, fh, separators=(",", ":"))
    print(f"{args.src.name}: {len(doc['traceEvents'])} -> {len(trimmed['traceEvents'])} events, "
          f"{args.dst.stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
