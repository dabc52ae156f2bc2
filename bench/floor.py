"""The floor for analysing a trace: read + gunzip + the fastest JSON decode of the same file.

No analysis tool can beat reading and decoding its input, so ``aiprof analyze`` is judged against this
(target: within 2x). Runs in bench/.venv-floor (msgspec + orjson); stdlib json is measured with --all.

Two modes:
  floor.py PATH            in-process stage timings (best of --repeat): read, gunzip, and each decoder;
                           prints JSON {"read_s", "gunzip_s", "decode_s": {...}, "floor_s", "events", ...}
  floor.py PATH --only D   one read + gunzip + decode with decoder D, then exit: run_all.py times this
                           as a whole process (interpreter start included), like-for-like with aiprof.

Decompression: the fastest inflate installed (ISA-L's ``isal.igzip``, about twice zlib's speed; aiprof
uses it too), else the standard library's; the stage timings list both.

Decoders: ``msgspec-min`` decodes each event into a struct of the seven fields every analysis needs
(ph, cat, name, pid, tid, ts, dur; everything else is skipped unmaterialised); ``msgspec-args`` adds
``args`` as undecoded raw JSON (what aiprof's loader keeps); ``orjson`` and ``json`` build a dict per
event. A folder means every trace file in it, one after the other.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec


class _MinEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0


class _MinTrace(msgspec.Struct, gc=False):
    traceEvents: list[_MinEvent] = []


class _ArgsEvent(_MinEvent, gc=False):
    args: msgspec.Raw = msgspec.Raw(b"null")


class _ArgsTrace(msgspec.Struct, gc=False):
    traceEvents: list[_ArgsEvent] = []


_MIN = msgspec.json.Decoder(_MinTrace)
_ARGS = msgspec.json.Decoder(_ArgsTrace)


def _count(obj: Any) -> int:
    if isinstance(obj, (_MinTrace, _ArgsTrace)):
        return len(obj.traceEvents)
    if isinstance(obj, dict):
        return len(obj.get("traceEvents", ()))
    return len(obj)


def _orjson() -> Callable[[bytes], Any]:
    import orjson

    return orjson.loads


DECODERS: dict[str, Callable[[], Callable[[bytes], Any]]] = {
    "msgspec-min": lambda: _MIN.decode,
    "msgspec-args": lambda: _ARGS.decode,
    "orjson": _orjson,
    "json": lambda: json.loads,
}


def trace_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.name.endswith((".json", ".json.gz")))


def _inflaters() -> dict[str, Callable[[bytes], bytes]]:
    """gzip decompressors: the standard library's zlib, and ISA-L's (about twice as fast) when installed."""
    out: dict[str, Callable[[bytes], bytes]] = {"zlib": gzip.decompress}
    try:
        from isal import igzip

        out["isal"] = igzip.decompress
    except ImportError:
        pass
    return out


INFLATERS = _inflaters()
FASTEST_INFLATE = "isal" if "isal" in INFLATERS else "zlib"  # the floor uses the fastest one


def _gunzip(raw: bytes, inflater: str = FASTEST_INFLATE) -> bytes:
    return INFLATERS[inflater](raw) if raw[:2] == b"\x1f\x8b" else raw


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls (the floor is a lower bound: take the best)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        out = None
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def stages(path: Path, repeat: int, decoders: list[str]) -> dict[str, Any]:
    """Per-stage best times summed over the files of ``path``."""
    read_s = 0.0
    gunzip_by = {name: 0.0 for name in INFLATERS}
    decode_s = {d: 0.0 for d in decoders}
    events = json_mb = 0
    for f in trace_files(path):
        t, raw = _best(f.read_bytes, repeat)
        read_s += t
        for name in INFLATERS:
            t, data = _best(lambda: _gunzip(raw, name), repeat)
            gunzip_by[name] += t
        json_mb += len(data) >> 20
        for name in decoders:
            decode = DECODERS[name]()
            t, obj = _best(lambda: decode(data), repeat)
            decode_s[name] += t
            events = _count(obj) if name == decoders[0] else events
            del obj
    fastest = min(decode_s, key=lambda k: decode_s[k])
    gunzip_s = min(gunzip_by.values())
    return {
        "path": str(path),
        "json_mb": json_mb,
        "events": events,
        "read_s": read_s,
        "gunzip_s": gunzip_s,
        "gunzip_s_by": gunzip_by,
        "decode_s": decode_s,
        "fastest": fastest,
        "floor_s": read_s + gunzip_s + decode_s[fastest],
    }


def only(path: Path, decoder: str) -> dict[str, Any]:
    """One pass with one decoder, as a whole process would do it."""
    decode = DECODERS[decoder]()
    events = 0
    for f in trace_files(path):
        events += _count(decode(_gunzip(f.read_bytes())))
    return {"path": str(path), "decoder": decoder, "events": events}


def main() -> None:
    ap = argparse.ArgumentParser(description="read + gunzip + fastest JSON decode of a trace")
    ap.add_argument("path", type=Path)
    ap.add_argument("--only", choices=sorted(DECODERS), help="one pass with this decoder, then exit")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--all", action="store_true", help="also the stdlib json decoder (slow)")
    args = ap.parse_args()
    if args.only:
        print(json.dumps(only(args.path, args.only)))
        return
    decoders = ["msgspec-min", "msgspec-args", "orjson"] + (["json"] if args.all else [])
    json.dump(stages(args.path, args.repeat, decoders), sys.stdout)
    print()


if __name__ == "__main__":
    main()
