"""Generated hostile trace files, small enough for tests and scalable for ``bench/hostile_scaling.py``.

Each writer streams its file (nothing the size of the output is built in memory) and returns the path.
Sizes are parameters: tests use kilobytes to a few megabytes, the benchmark doubles them.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_BLOCK = 1 << 20


def _write(path: Path, parts: Iterator[bytes], gz: bool) -> Path:
    with open(path, "wb") as fh:
        if not gz:
            for part in parts:
                fh.write(part)
            return path
        comp = zlib.compressobj(6, zlib.DEFLATED, 31)
        for part in parts:
            fh.write(comp.compress(part))
        fh.write(comp.flush())
    return path


def _repeat(byte: bytes, count: int) -> Iterator[bytes]:
    block = byte * _BLOCK
    while count > 0:
        take = min(count, _BLOCK)
        yield block[:take]
        count -= take


def _op(name: str, ts: float, dur: float, tid: int = 1, args: dict[str, Any] | None = None) -> bytes:
    event = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    event["args"] = args or {"External id": 1}
    return json.dumps(event).encode()


def _kernel(name: str, ts: float, dur: float, correlation: int) -> bytes:
    args = {"correlation": correlation, "stream": 7, "device": 0}
    event = {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}
    return json.dumps(event).encode()


def _trace(events: Iterator[bytes]) -> Iterator[bytes]:
    yield b'{"schemaVersion": 1, "traceEvents": ['
    first = True
    for event in events:
        if not first:
            yield b","
        first = False
        yield event
    yield b"]}"


def gzip_bomb(path: Path, decompressed_bytes: int, byte: bytes = b"\0") -> Path:
    """A gzip file of ``decompressed_bytes`` copies of one byte (zeros: the classic bomb, ~1000x)."""
    return _write(path, _repeat(byte, decompressed_bytes), gz=True)


def padded_trace_bomb(path: Path, decompressed_bytes: int) -> Path:
    """A valid-looking trace start, then ``decompressed_bytes`` of spaces: passes the sniff, compresses
    ~1000x, and only the size limits stop it."""

    def parts() -> Iterator[bytes]:
        yield b'{"traceEvents": [' + _op("aten::mm", 0, 1) + b","
        yield from _repeat(b" ", decompressed_bytes)
        yield _op("aten::mm", 2, 1) + b"]}"

    return _write(path, parts(), gz=True)


def normal_trace(path: Path, events: int, gz: bool = False) -> Path:
    """``events`` ordinary events: ProfilerSteps of ops, each op launching a kernel."""

    def parts() -> Iterator[bytes]:
        step_len = 1000.0
        ops_per_step = 50
        for i in range(0, events, 2):
            step, k = divmod(i // 2, ops_per_step)
            ts = step * step_len + k * 10.0
            if k == 0:
                yield _op(f"ProfilerStep#{step}", step * step_len, step_len - 1).replace(b"cpu_op", b"user_annotation")
            yield _op("aten::mm", ts + 1, 5, args={"External id": i, "correlation": i})
            yield _kernel("sgemm_128x64_nn", ts + 3, 4, i)

    return _write(path, _trace(parts()), gz)


def spaces_run(path: Path, spaces: int, gz: bool = False) -> Path:
    """Two events with a run of ``spaces`` whitespace bytes between them (no event boundary for a long
    stretch: a reader that rescans its buffer per piece is quadratic here)."""

    def parts() -> Iterator[bytes]:
        yield b'{"traceEvents": [' + _op("aten::mm", 0, 1) + b","
        yield from _repeat(b" ", spaces)
        yield _op("aten::add", 2, 1) + b"," + _op("aten::mm", 4, 1) + b"]}"

    return _write(path, parts(), gz)


def huge_event(path: Path, inner_objects: int, gz: bool = False) -> Path:
    """One event whose args hold ``inner_objects`` small objects in a list (``},{`` inside the event: cut
    candidates that never decode), between ordinary events."""

    def parts() -> Iterator[bytes]:
        yield b'{"traceEvents": [' + _op("aten::mm", 0, 1) + b","
        head = _op("aten::huge", 2, 1, args={"External id": 2, "items": []})
        yield head[: head.index(b"[]") + 1]
        block = b",".join([b'{"a":1}'] * 4096)
        left = inner_objects
        first = True
        while left > 0:
            take = min(left, 4096)
            yield (b"" if first else b",") + block[: take * 8 - 1]
            first = False
            left -= take
        yield b"]}}," + _op("aten::mm", 4, 1) + b"]}"

    return _write(path, parts(), gz)


def long_name(path: Path, name_chars: int, gz: bool = False) -> Path:
    """One op whose name is ``name_chars`` characters, between ordinary events."""

    def parts() -> Iterator[bytes]:
        yield b'{"traceEvents": [' + _op("aten::mm", 0, 1) + b","
        yield b'{"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "name": "'
        yield from _repeat(b"x", name_chars)
        yield b'"},' + _op("aten::mm", 4, 1) + b"]}"

    return _write(path, parts(), gz)


def many_names(path: Path, events: int, gz: bool = False) -> Path:
    """``events`` ops, every one with a distinct name."""
    return _write(path, _trace(_op(f"op_{i}", float(i), 0.5) for i in range(events)), gz)


def deep_nesting(path: Path, depth: int, gz: bool = False) -> Path:
    """``depth`` CPU ops on one thread, each nested inside the previous (a stack ``depth`` deep)."""
    total = 2.0 * depth + 10
    return _write(path, _trace(_op("aten::linear", float(i), total - 2.0 * i) for i in range(depth)), gz)


def deep_json(path: Path, depth: int) -> Path:
    """A trace whose one event's args nest ``depth`` lists deep (deeper than any JSON decoder's stack)."""
    args = b'{"External id": 1, "x": ' + b"[" * depth + b"]" * depth + b"}"
    event = b'{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": ' + args + b"}"
    return _write(path, iter([b'{"traceEvents": [', event, b"]}"]), gz=False)


def far_kernel(path: Path, steps: int, kernel_ts_us: float, kernel_dur_us: float, gz: bool = False) -> Path:
    """``steps`` ProfilerSteps of 1 ms, each with an op launching a 100 µs kernel, and in step 0 one
    more launch whose kernel starts at ``kernel_ts_us`` and lasts ``kernel_dur_us`` (a CUPTI glitch:
    an 11-day kernel, or a timestamp far in the future)."""

    def parts() -> Iterator[bytes]:
        corr = 0
        for step in range(steps):
            t = step * 1000.0
            yield _op(f"ProfilerStep#{step}", t, 999.0).replace(b"cpu_op", b"user_annotation")
            for k in range(2 if step == 0 else 1):
                corr += 1
                yield _op("aten::mm", t + 10 + 100 * k, 50, args={"External id": corr})
                launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                          "ts": t + 20 + 100 * k, "dur": 5, "args": {"correlation": corr, "External id": corr}}
                yield json.dumps(launch).encode()
                if k == 1:
                    yield _kernel("glitch_kernel", kernel_ts_us, kernel_dur_us, corr)
                else:
                    yield _kernel("sgemm_128x64_nn", t + 30, 100.0, corr)

    return _write(path, _trace(parts()), gz)


# --- file names that a careless reader would interpret ---------------------------------------------------
# Each name is one file in the folder; a reader that puts the name into a URI (SQLite's ``file:``), a
# command line or a format string would read another file, or open one read-write. ``%41`` decodes to
# ``A``; ``%2F`` to ``/``; ``#`` ends a URI (and drops what follows, ``?mode=ro`` included); ``?`` starts
# a query of its own.
HOSTILE_SQLITE_NAMES = (
    "real%41.sqlite",
    "..%2Fvictim%2Fapp.db#.sqlite",
    "..%2F..%2Fcreated#.sqlite",
    "x?mode=rwc&.sqlite",
    "-o.sqlite",
    "a b;$(touch pwned)`id`.sqlite",
)


def nsys_export(path: Path, kernels: int) -> Path:
    """A small ``nsys export --type sqlite`` database: ``kernels`` kernels, each with its launch (the
    schema of bench/nsys_import.py, nsys 2024.5)."""
    import sqlite3

    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER"
        " NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER"
        " NOT NULL, shortName INTEGER NOT NULL, registersPerThread INTEGER, gridX INTEGER, gridY INTEGER,"
        " gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER,"
        " dynamicSharedMemory INTEGER);"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, globalTid INTEGER,"
        " correlationId INTEGER, nameId INTEGER NOT NULL);"
    )
    gpid = (4242 << 24) | (1 << 56)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "cudaLaunchKernel_v7000"), (2, "gemm_kernel")])
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, 2, 2, 32, 120, 1, 1, 256, 1, 1, 0, 0)",
        [(1_000_000 + i * 4000 + 2000, 1_000_000 + i * 4000 + 3000, i + 1, gpid) for i in range(kernels)],
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1)",
        [(1_000_000 + i * 4000, 1_000_000 + i * 4000 + 1500, gpid | 4242, i + 1) for i in range(kernels)],
    )
    con.commit()
    con.close()
    return path


def wal_database(path: Path) -> Path:
    """An SQLite database in WAL mode whose last transaction is still only in its ``-wal`` file (what a
    read-write open would checkpoint into the database and delete)."""
    import shutil
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "w.db"
        con = sqlite3.connect(work)
        con.execute("PRAGMA journal_mode=wal")
        con.execute("CREATE TABLE t (a)")
        con.commit()
        holder = sqlite3.connect(work)  # a second reader keeps the WAL from being checkpointed on close
        holder.execute("PRAGMA wal_autocheckpoint=0")
        holder.execute("SELECT * FROM t").fetchall()
        con.execute("INSERT INTO t VALUES ('in the wal only')")
        con.commit()
        shutil.copyfile(work, path)
        shutil.copyfile(f"{work}-wal", f"{path}-wal")
        holder.close()
        con.close()
    return path


def hostile_name_folder(base: Path) -> Path:
    """``base/a/traces``: a valid export under every name of :data:`HOSTILE_SQLITE_NAMES` (3 kernels
    each) and ``realA.sqlite`` (7 kernels: what ``real%41.sqlite`` must not be read as); beside it the
    files those names point at: ``base/a/victim/app.db`` (WAL mode, a transaction still in the WAL) and
    ``base/a/traces/x`` (a plain file). Returns the traces folder."""
    traces = base / "a" / "traces"
    victim = base / "a" / "victim"
    traces.mkdir(parents=True)
    victim.mkdir()
    wal_database(victim / "app.db")
    (traces / "x").write_bytes(b"not a database\n")
    nsys_export(traces / "realA.sqlite", 7)
    for name in HOSTILE_SQLITE_NAMES:
        nsys_export(traces / name, 3)
    return traces


def checksums(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative name → SHA-256), links and folders included by name."""
    import hashlib

    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + str(p.readlink())
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# --- Nsight Compute CSV exports -----------------------------------------------------------------------
NCU_HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
              "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
NCU_UNITS = ["", "", "", "", "", "", "", "", "", "", "", "nsecond", "byte", "byte", "inst", "%"]
# Text an attacker (or a broken tool) puts where a number belongs.
EXTREMES = ("1e400", "-1e400", "nan", "inf", "-inf", "9" * 5000, "-5", "", "text", "1e30", "0x10", "½", "\x00")


def ncu_row(i: int) -> list[str]:
    return [str(i), "4242", "bench", "host", f"kernel_{i % 3}(float*, int)", "1", "7", "(256, 1, 1)", "(120, 1, 1)",
            "0", "8.0", str(2000 + i), "1,000,000", "500000", "4096", "12.5"]


def ncu_csv(path: Path, rows: int, cells: dict[tuple[int, int], str] | None = None, encoding: str = "utf-8",
            bom: bool = False) -> Path:
    """A ``ncu --csv --page raw --print-units base`` export of ``rows`` kernels; ``cells`` replaces
    (row, column) values (row -1: the header, -2: the units row)."""
    table = [list(NCU_HEADER), list(NCU_UNITS), *(ncu_row(i) for i in range(rows))]
    for (row, column), value in (cells or {}).items():
        table[{-1: 0, -2: 1}.get(row, row + 2)][column] = value
    text = "==PROF== Disconnected from process 4242\n" + "".join(
        ",".join('"' + c.replace('"', '""') + '"' for c in line) + "\n" for line in table)
    data = text.encode(encoding)
    if bom and encoding == "utf-8":
        data = b"\xef\xbb\xbf" + data
    path.write_bytes(data)
    return path


def btree_dag(path: Path, references: int, kernels: int = 3000) -> Path:
    """An Nsight export whose kernel table's root page points ``references`` times at one leaf page (a
    b-tree made a DAG, 64 KiB pages): a few hundred KB that SQLite reads as ``references`` × (the leaf's
    rows) kernels. Every other table is as :func:`nsys_export` writes it."""
    import sqlite3
    import struct

    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 65536")
    con.execute("VACUUM")
    con.close()
    nsys_export(path, kernels)
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    con.close()
    data = bytearray(path.read_bytes())
    page = 65536
    start = (root - 1) * page
    assert data[start] == 0x05, "the kernel table must span several leaves (an interior root)"
    leaf = struct.unpack(">I", data[start + 8: start + 12])[0]  # the rightmost child: a leaf
    cell = page - 5  # one 5-byte cell (child page, a 1-byte rowid key) that every pointer shares
    assert 12 + 2 * references <= cell, "too many references for one page"
    header = struct.pack(">BHHHB", 0x05, 0, references, cell, 0) + struct.pack(">I", leaf)
    pointers = struct.pack(f">{references}H", *([cell] * references))
    body = header + pointers
    data[start: start + page] = body + bytes(cell - len(body)) + struct.pack(">IB", leaf, 1)
    path.write_bytes(bytes(data))
    return path


def kineto_trace(path: Path, memory: bool = True) -> Path:
    """A small valid Kineto trace: 3 ProfilerSteps, each an ``aten::mm`` (with shapes) launching a kernel,
    and (``memory``) a ``[memory]`` event per step."""
    from kineto_builder import TraceBuilder

    b = TraceBuilder()
    for i in range(3):
        step = b.step(i, ts=i * 100, dur=90)
        op = b.cpu_op("aten::mm", ts=step["ts"] + 5, dur=20, shapes=[[64, 64], [64, 64]], dtypes=["float", "float"])
        b.launch(op, kernel="sgemm", kernel_ts=step["ts"] + 30, kernel_dur=10, stream=7)
        if memory:
            b.memory(ts=step["ts"] + 6, nbytes=4096, total_allocated=4096 * (i + 1), device=0)
    b.distributed(rank=0, world_size=1)
    return b.write(path)
