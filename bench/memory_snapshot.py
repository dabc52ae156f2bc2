"""Analyse a synthetic allocator snapshot of a given size and print the time and the peak RSS.

    python bench/memory_snapshot.py [--mib 1024] [--keep PATH] [--plain] [--numpy] [--repeat 3]

The snapshot imitates torch's layout: 64 distinct stacks of 8 frames whose frame dicts are shared (pickle
memoizes them, as in real dumps), one trace entry per alloc / free_requested / free_completed, a
forward/backward-like pattern with a growing and shrinking live set, and segments holding what is live at
the end. It is written by a small streaming pickle writer that emits exactly the bytes ``pickle.dump(...,
protocol=4)`` writes for the same object (memo, batches of 1000, 64 KiB frames; checked against pickle at
a small size), so a 1 GiB snapshot never needs its 6 GiB of Python objects. The analysis runs in a child
process (``aiprof memory --format json``) so its time and RSS are its own; ``--plain`` also times the
plain no-classes unpickler (``AIPROF_MEMORY_STREAM=0``) on the same file, ``--numpy`` the streaming reader
without its native window scan (``AIPROF_NATIVE=0``: the NumPy path used where ``_snapscan.c`` is not built).
Goal (issue 13): a 1 GiB snapshot in ≤ 10 s and ≤ 2 GiB RSS on the 2-core machine.
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

BYTES_PER_ENTRY = 117  # measured on the files written here
FRAME_TARGET = 64 * 1024  # pickle's _FRAME_SIZE_TARGET
BATCH = 1000  # pickle's _BATCHSIZE


def _frames() -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    frames = [{"filename": f"/home/u/model_{i % 7}.py", "line": 10 + i, "name": f"fn{i}"} for i in range(128)]
    stacks = [[frames[(s * 3 + k) % 128] for k in range(8)] for s in range(64)]
    return frames, stacks


def synthetic_parts(target_bytes: int) -> tuple[Iterator[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(trace entries, lazily; segments; frame dicts): the segments are known only once the trace is done,
    so they are filled into the returned list as the iterator ends."""
    frames, stacks = _frames()
    segments: list[dict[str, Any]] = []
    entries = max(target_bytes // BYTES_PER_ENTRY, 1)

    def trace() -> Iterator[dict[str, Any]]:
        t = 1_700_000_000_000_000
        live: list[tuple[int, int]] = []
        addr = 1 << 40
        made = i = 0
        while made < entries:
            t += 3
            size = 512 * (1 + (i * 7919) % 4096)
            stack = stacks[i % 64]
            yield {"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t,
                   "frames": list(stack), "compile_context": "N/A", "user_metadata": ""}
            made += 1
            live.append((addr, size))
            addr += size
            if len(live) > 2000 or (i // 1000) % 2:
                a, s = live.pop(0)
                for action in ("free_requested", "free_completed"):
                    yield {"action": action, "addr": a, "size": s, "stream": 0, "time_us": t + 1,
                           "frames": list(stack), "compile_context": "N/A", "user_metadata": ""}
                    made += 1
            i += 1
        for a, s in live:
            block = {"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": []}
            segments.append({"device": 0, "address": a, "total_size": s, "allocated_size": s, "active_size": s,
                             "requested_size": s, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                             "is_expandable": False, "frames": [], "blocks": [block]})

    return trace(), segments, frames


class _Writer:
    """Protocol 4 as ``pickle.Pickler`` writes it, for dicts, lists (or iterators), tuples, str, int, bool and
    None. Objects in ``shared`` (and strings, tuples) are memoized by identity, as pickle does; other dicts
    and lists are assumed unshared (they take a memo slot and are not remembered)."""

    def __init__(self, out: IO[bytes], shared: list[Any]) -> None:
        self.out = out
        self.frame = bytearray()
        self.memo: dict[int, tuple[bytes, Any]] = {}  # id -> (the GET opcode for it, the object)
        self.slots = 0
        self.shared = {id(o) for o in shared}

    def commit(self, force: bool = False) -> None:
        if self.frame and (force or len(self.frame) >= FRAME_TARGET):
            self.out.write(b"\x95" + struct.pack("<Q", len(self.frame)) + self.frame)
            self.frame = bytearray()

    def memoize(self, obj: Any, keep: bool) -> None:
        if keep:
            idx = self.slots
            self.memo[id(obj)] = (b"h" + bytes([idx]) if idx < 256 else b"j" + struct.pack("<I", idx), obj)
        self.slots += 1
        self.frame += b"\x94"

    def save(self, obj: Any) -> None:
        if len(self.frame) >= FRAME_TARGET:
            self.commit()
        w = self.frame.extend
        t = type(obj)
        if t is int:
            if 0 <= obj < 256:
                w(b"K" + bytes([obj]))
            elif 0 <= obj < 65536:
                w(b"M" + struct.pack("<H", obj))
            elif -(2**31) <= obj < 2**31:
                w(b"J" + struct.pack("<i", obj))
            else:
                raw = pickle.encode_long(obj)  # type: ignore[attr-defined]
                w(b"\x8a" + bytes([len(raw)]) + raw)
            return
        known = self.memo.get(id(obj))
        if known is not None and known[1] is obj:
            w(known[0])
            return
        if obj is None:
            w(b"N")
        elif obj is True or obj is False:
            w(b"\x88" if obj else b"\x89")
        elif t is str:
            raw = obj.encode("utf-8", "surrogatepass")
            w((b"\x8c" + bytes([len(raw)]) if len(raw) < 256 else b"X" + struct.pack("<I", len(raw))) + raw)
            self.memoize(obj, True)
        elif t is tuple and len(obj) <= 3:
            for item in obj:
                self.save(item)
            w(b")" if not obj else bytes([0x84 + len(obj)]))
            if obj:
                self.memoize(obj, True)
        elif t is dict:
            w(b"}")
            self.memoize(obj, id(obj) in self.shared)
            self._batches(obj.items(), b"u", b"s", pairs=True)
        else:  # a list, or an iterator standing for one
            w(b"]")
            self.memoize(obj, id(obj) in self.shared)
            self._batches(obj, b"e", b"a", pairs=False)

    def _batches(self, items: Any, many: bytes, one: bytes, pairs: bool) -> None:
        it = iter(items)
        while True:
            batch = [x for _, x in zip(range(BATCH), it)]
            if len(batch) > 1:
                self.frame += b"("
                save = self.save
                if pairs:
                    for k, v in batch:
                        save(k)
                        save(v)
                else:
                    for x in batch:
                        save(x)
                self.frame += many
            elif batch:
                self._item(batch[0], pairs)
                self.frame += one
            if len(batch) < BATCH:
                return

    def _item(self, x: Any, pairs: bool) -> None:
        if pairs:
            self.save(x[0])
            self.save(x[1])
        else:
            self.save(x)


def write_synthetic(path: Path, target_bytes: int) -> None:
    """The synthetic snapshot, streamed to ``path`` (the same bytes as ``pickle.dump(obj, fh, protocol=4)``)."""
    first, segments, _ = synthetic_parts(target_bytes)
    for _ in first:  # the segments hold what is live at the end: run the trace once, keeping nothing
        pass
    trace, _, frames = synthetic_parts(target_bytes)
    with open(path, "wb") as fh:
        fh.write(b"\x80\x04")
        writer = _Writer(fh, frames)
        writer.save({"segments": segments, "device_traces": [trace],
                     "allocator_settings": {"expandable_segments": False}, "external_annotations": []})
        writer.frame += b"."
        writer.commit(force=True)


def check_writer() -> None:
    """The writer's bytes are pickle's, on a small snapshot."""
    trace, segments, frames = synthetic_parts(400_000)
    entries = list(trace)
    obj = {"segments": segments, "device_traces": [entries], "allocator_settings": {"expandable_segments": False},
           "external_annotations": []}
    out = io.BytesIO()
    out.write(b"\x80\x04")
    writer = _Writer(out, frames)
    writer.save({**obj, "device_traces": [iter(entries)]})
    writer.frame += b"."
    writer.commit(force=True)
    if out.getvalue() != pickle.dumps(obj, protocol=4):
        raise SystemExit("the streaming writer no longer writes what pickle writes")


_READERS = {"stream": {}, "numpy": {"AIPROF_NATIVE": "0"}, "plain": {"AIPROF_MEMORY_STREAM": "0"}}


def _child(path: Path, reader: str) -> tuple[int, float, float, str]:
    """Run ``aiprof memory`` on ``path`` with ``reader`` (a key of _READERS): (exit status, seconds, peak RSS
    in GiB, stderr tail)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), **_READERS[reader]}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "aiprof", "memory", str(path), "--format", "json", "-o", os.devnull],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - t0, usage.ru_maxrss / 2**20, err.decode(errors="replace")[-2000:]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="target pickle size in MiB (default 1024)")
    parser.add_argument("--keep", type=Path, help="write the snapshot here and keep it (reused if it exists)")
    parser.add_argument("--plain", action="store_true", help="also time the plain unpickler on the same file")
    parser.add_argument("--numpy", action="store_true",
                        help="also time the streaming reader without its native scan (AIPROF_NATIVE=0)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each reader (the median is printed)")
    args = parser.parse_args()
    check_writer()
    path = args.keep or Path(tempfile.mkdtemp()) / "synthetic.pickle"
    if not path.exists():
        t0 = time.perf_counter()
        write_synthetic(path, args.mib << 20)
        print(f"wrote {path} ({path.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.1f} s")
    size = path.stat().st_size / 2**20
    built = any((Path(__file__).resolve().parents[1] / "src/aiprof/memory").glob("_snapscan*.so"))
    print(f"native window scan (_snapscan.c): {'built' if built else 'not built (the NumPy path runs)'}")
    status = 0
    results: dict[str, tuple[float, float]] = {}
    names = ["stream"] + ["numpy"] * args.numpy + ["plain"] * args.plain
    for name in names:
        runs = [_child(path, name) for _ in range(args.repeat)]
        for code, _, _, err in runs:
            if code:
                print(err)
                status = status or code
        wall = sorted(r[1] for r in runs)[len(runs) // 2]
        rss = sorted(r[2] for r in runs)[len(runs) // 2]
        results[name] = (wall, rss)
        print(f"aiprof memory ({name} reader): exit {runs[0][0]}, {wall:.1f} s, peak RSS {rss:.2f} GiB "
              f"({size:,.0f} MiB snapshot; median of {len(runs)})")
    if "plain" in results:
        (ws, rs), (wp, rp) = results["stream"], results["plain"]
        print(f"stream vs plain: {wp / ws:.1f}x faster, {rp / rs:.1f}x less memory")
    if "numpy" in results:
        print(f"native scan vs NumPy scan: {results['numpy'][0] / results['stream'][0]:.2f}x faster")
    if args.keep is None:
        path.unlink()
    return status


if __name__ == "__main__":
    sys.exit(main())
