"""Nsight Systems import speed: a synthetic ``nsys export --type sqlite`` database with N kernels and N
``cudaLaunchKernel`` runtime rows (the tables' DDL is the one nsys 2024.5 / schema 3.13 writes, as in
``perlmutter-cloverleaf-cuda.sqlite``; no indexes, as nsys creates none), then ``aiprof.load`` on it.

Prints kernel rows per second and all rows per second, wall and CPU (medians of ``--repeat``), through the
native column reader (``_sqlcols``, when built) and, with ``--python``, the pure ``sqlite3`` path.
Target: >= 1M kernel rows/s.
Run:  python bench/nsys_import.py [--rows 1000000] [--repeat 3] [--python] [--nvtx] [--db FILE]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

KERNEL_DDL = """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
    cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
    gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
    staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
    localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
    sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER)"""
RUNTIME_DDL = """CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER)"""
OTHER_DDL = [
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)",
    "CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)",
    "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER, totalMemory INTEGER, "
    "computeMajor INTEGER, computeMinor INTEGER, threadsPerWarp INTEGER, maxWarpsPerSm INTEGER, "
    "maxRegistersPerSm INTEGER, maxShmemPerSm INTEGER, memoryBandwidth INTEGER, clockRate INTEGER)",
]
PID = 4242
GLOBAL_PID = (PID << 24) | (1 << 56)
GLOBAL_TID = GLOBAL_PID | PID


def build(path: Path, rows: int, kernel_names: int = 200, seed: int = 0, nvtx: bool = False) -> None:
    """Write a database with ``rows`` kernels, each launched by one cudaLaunchKernel_v7000 call; with
    ``nvtx``, as ``nsys profile --pytorch=autograd-nvtx`` records them: an ``aten::…`` op range (name, seq,
    op_id, shapes) around every launch and a ``ProfilerStep#N`` range every 100 launches."""
    rng = np.random.default_rng(seed)
    con = sqlite3.connect(path)
    for ddl in [KERNEL_DDL, RUNTIME_DDL, *OTHER_DDL]:
        con.execute(ddl)
    names = [(1, "cudaLaunchKernel_v7000")] + [(2 + i, f"kernel_{i}(float*, int)") for i in range(kernel_names)]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", names)
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '')")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.13.2')")
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA A100-SXM4-80GB', 108, 85899345920, 8, 0, 32, "
                "64, 65536, 167936, 2039040000000, 1410000000)")
    launch = np.arange(rows, dtype=np.int64) * 4_000 + 1_000_000
    start = launch + 2_000 + rng.integers(0, 500, rows)
    dur = rng.integers(500, 3_000, rows)
    corr = np.arange(rows, dtype=np.int64) + 1
    name = rng.integers(2, 2 + kernel_names, rows)
    kernels = zip(start.tolist(), (start + dur).tolist(), corr.tolist(), name.tolist())
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, NULL, 7, ?, "
        f"{GLOBAL_PID}, ?, 1, NULL, 1, 1, 32, 120, 1, 1, 256, 1, 1, 0, 0, 0, 0, 1, 32768, NULL, 0)",
        kernels,
    )
    runtime = zip(launch.tolist(), (launch + 1_500).tolist(), corr.tolist())
    con.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, {GLOBAL_TID}, ?, 1, 0, NULL)", runtime
    )
    if nvtx:
        con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                    "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
                    "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)")
        ops = ["aten::mm", "aten::add", "aten::relu", "aten::addmm", "aten::copy_"]
        texts = (f"{ops[i % 5]}, seq = {i}, op_id = {i + 1}, sizes = [[{64 << (i % 3)}, 32], [32, 16]]"
                 for i in range(rows))
        con.executemany(
            f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, {GLOBAL_TID})",
            zip((launch - 200).tolist(), (launch + 1_700).tolist(), texts))
        steps = range(0, rows, 100)
        con.executemany(
            f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, {GLOBAL_TID})",
            ((int(launch[i]) - 500, int(launch[min(i + 99, rows - 1)]) + 1_900, f"ProfilerStep#{i // 100}")
             for i in steps))
    con.commit()
    con.close()


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _measure(path: Path, rows: int, repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds (this process, its threads and helpers) of ``aiprof.load``."""
    import statistics

    import aiprof

    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), _cpu()
        trace = aiprof.load(path)
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
        assert len(trace.kernels()) == rows  # type: ignore[union-attr]
        del trace
    return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="kernels (and as many runtime rows)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", action="store_true",
                        help="also time the pure-Python sqlite3 path (AIPROF_NATIVE=0)")
    parser.add_argument("--nvtx", action="store_true",
                        help="also an autograd-nvtx op range per launch (and a step range every 100)")
    parser.add_argument("--db", type=Path, default=None,
                        help="keep the database here (built when absent, reused when present: compare two "
                             "checkouts on one database with PYTHONPATH=…/src)")
    args = parser.parse_args(argv)
    from aiprof.trace.readers.nsys import native_reader

    modes = ["native"] if native_reader() is not None else []
    if args.python or not modes:
        modes.append("python")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "synthetic.sqlite"
        if not path.exists():
            t0 = time.perf_counter()
            build(path, args.rows, nvtx=args.nvtx)
            print(f"built {args.rows:,} kernels + {args.rows:,} runtime rows in {time.perf_counter() - t0:.1f} s "
                  f"({path.stat().st_size / 1e6:.0f} MB)")
        for mode in modes:
            saved = os.environ.get("AIPROF_NATIVE")
            os.environ["AIPROF_NATIVE"] = "0" if mode == "python" else "1"
            try:
                wall, cpu = _measure(path, args.rows, args.repeat)
            finally:
                if saved is None:
                    os.environ.pop("AIPROF_NATIVE", None)
                else:
                    os.environ["AIPROF_NATIVE"] = saved
            print(f"import ({mode}, median of {args.repeat}): {wall:.3f} s wall  "
                  f"{args.rows / wall / 1e6:.2f} M kernel rows/s  {2 * args.rows / wall / 1e6:.2f} M rows/s "
                  f"(kernels + runtime)")
            print(f"        {cpu:.3f} s CPU  {args.rows / cpu / 1e6:.2f} M kernel rows per CPU-second; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
