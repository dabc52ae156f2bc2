"""The Nsight Systems reader on the three shared databases: every number checked against an independent
computation made straight from the database with SQL and plain Python (no aiprof code)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aiprof
from aiprof.analysis import intervals as iv
from aiprof.errors import TraceError
from aiprof.trace import links
from aiprof.trace.model import Kind, Trace

NSYS = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "nsys"
OLD = NSYS / "extrap_con_kernel_old_schema.sqlite"
CLOVER = NSYS / "perlmutter-cloverleaf-cuda.sqlite"
SAXPY = NSYS / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
ALL = [OLD, CLOVER, SAXPY]
pytestmark = pytest.mark.skipif(not NSYS.is_dir(), reason="../shared/traces/nsys not present")


def sql(path: Path, query: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = lambda raw: raw.decode("utf-8", "replace")
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def tables(path: Path) -> set[str]:
    return {r[0] for r in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def count(path: Path, table: str) -> int:
    return int(sql(path, f"SELECT COUNT(*) FROM {table}")[0][0]) if table in tables(path) else 0


def load(path: Path) -> Trace:
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


def union_ns(spans: list[tuple[int, int]]) -> int:
    """Plain-Python union length of [start, end) spans."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_op_counts_equal_sql_counts(path: Path) -> None:
    trace = load(path)
    c = trace.columns
    for kind, table in [
        (Kind.KERNEL, "CUPTI_ACTIVITY_KIND_KERNEL"),
        (Kind.MEMCPY, "CUPTI_ACTIVITY_KIND_MEMCPY"),
        (Kind.MEMSET, "CUPTI_ACTIVITY_KIND_MEMSET"),
        (Kind.SYNC, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
    ]:
        assert int((c.kind == int(kind)).sum()) == count(path, table), table
    kernel_ns = sql(path, "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert int(trace.kernels().dur_ns.sum()) == kernel_ns


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_union_of_device_activity_equals_an_independent_union(path: Path) -> None:
    spans: list[tuple[int, int]] = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables(path):
            spans += [(int(s), int(e)) for s, e in sql(path, f"SELECT start, end FROM {table}")]
    trace = load(path)
    work = trace.gpu_activities()
    assert len(work) == len(spans)
    assert iv.total(iv.merge(work.ts_ns, work.end_ns)) == union_ns(spans)
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    assert int(work.ts_ns.min()) == first and int(work.end_ns.max()) == last


def test_reference_numbers_of_the_wave2_notes() -> None:
    """The numbers measured when the files were chosen (WAVE2_REFERENCE.md section 3.1)."""
    def busy(path: Path) -> tuple[float, float]:
        work = load(path).gpu_activities()
        span = int(work.end_ns.max() - work.ts_ns.min())
        return iv.total(iv.merge(work.ts_ns, work.end_ns)) / 1e6, span / 1e6

    assert busy(CLOVER) == pytest.approx((303.795, 342.408), abs=0.001)
    assert busy(SAXPY) == pytest.approx((373.273, 1097.328), abs=0.001)
    assert busy(OLD) == pytest.approx((258.746, 258.759), abs=0.001)
    assert len(load(CLOVER).gpu_activities()) == 1591
    assert len(load(SAXPY).gpu_activities()) == 20
    assert len(load(OLD).gpu_activities()) == 21


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_one_launch_kept_per_correlation_and_thread(path: Path) -> None:
    rows = count(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
    distinct = sql(path, "SELECT COUNT(*) FROM (SELECT DISTINCT correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME)")
    trace = load(path)
    kept = trace.runtime_calls()
    assert len(kept) == distinct[0][0]
    assert trace.metadata["nsys_duplicate_calls_dropped"] == rows - distinct[0][0]
    assert not any(name.endswith(tuple(f"_v{n}" for n in range(10))) for name in kept.names)
    assert "_v" not in "".join(set(kept.names))


def test_saxpy_keeps_57_of_95_runtime_rows_and_one_launch_per_kernel() -> None:
    trace = load(SAXPY)
    assert count(SAXPY, "CUPTI_ACTIVITY_KIND_RUNTIME") == 95
    assert len(trace.runtime_calls()) == 57
    kernels = trace.kernels().rows
    launch = links.launcher(trace)[kernels]
    assert len(kernels) == 5 and (launch >= 0).all()
    assert len(set(launch.tolist())) == 5  # each kernel its own launch, none doubled
    assert {trace.name_of(int(r)) for r in launch} == {"cudaLaunchKernel"}
    # the kept launch is the outer call: it starts no later than the versioned inner one
    outer = sql(SAXPY, "SELECT r.correlationId, MIN(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                       "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId GROUP BY 1")
    starts = dict(zip(trace.columns.correlation[launch].tolist(), trace.columns.ts[launch].tolist()))
    assert starts == {int(c): int(s) for c, s in outer}


def test_orphan_kernels_are_kept_counted_and_said() -> None:
    orphans = sql(OLD, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                       "WHERE NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = "
                       "k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24))")
    assert len(orphans) == 2
    trace = load(OLD)
    kernels = trace.kernels().rows
    unlinked = kernels[links.launcher(trace)[kernels] < 0]
    assert sorted(trace.name_of(int(r)) for r in unlinked) == sorted(v for (v,) in orphans)
    assert trace.metadata["nsys_kernels_without_launch"] == 2
    assert any("2 of 9 kernels have no launch call" in w for w in trace.warnings)
    for path in (CLOVER, SAXPY):
        assert load(path).metadata["nsys_kernels_without_launch"] == 0


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_copies_syncs_and_calls_carry_kineto_names(path: Path) -> None:
    trace = load(path)
    copies = trace.view(Kind.MEMCPY)
    by_kind = {int(k): (int(n), int(b)) for k, n, b in
               sql(path, "SELECT copyKind, COUNT(*), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1")}
    for code, label in ((1, "Memcpy HtoD"), (2, "Memcpy DtoH")):
        rows = copies.rows[[n.startswith(label) for n in copies.names]]
        assert (len(rows), int(trace.columns.nbytes[rows].sum())) == by_kind.get(code, (0, 0))
    calls = sql(path, "SELECT s.value, COUNT(*), SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                      "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE '%Synchronize%' GROUP BY 1")
    view = trace.runtime_calls().where_name("Synchronize")
    for name, n, total in calls:
        base = name.split("_v")[0]
        rows = view.rows[[x == base for x in view.names]]
        assert (len(rows), int(trace.columns.dur[rows].sum())) == (n, total)


def test_cloverleaf_calls_and_syncs_as_kineto_shows_them() -> None:
    trace = load(CLOVER)
    names = trace.runtime_calls().names
    assert names.count("cudaDeviceSynchronize") == 1312
    assert names.count("cudaLaunchKernel") == 1312
    sync = trace.view(Kind.SYNC)
    assert len(sync) == 1312 and set(sync.column("device").tolist()) == {0}
    assert (links.launcher(trace)[sync.rows] >= 0).all()  # each sync row links to its synchronising call


def test_devices_time_base_threads_and_processes() -> None:
    for path in ALL:
        trace = load(path)
        gpus = sql(path, "SELECT id, name, smCount, totalMemory FROM TARGET_INFO_GPU ORDER BY id")
        assert [(d.index, d.name, d.num_sms, d.total_memory_bytes) for d in trace.devices] == gpus
        assert trace.base_time_ns == sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]
    clover = load(CLOVER)
    assert clover.device_info(0).name == "NVIDIA A100-SXM4-80GB"
    assert clover.process_names == {1701896: "cuda-cloverleaf"}
    assert clover.thread_names[(1701896, 1701896)] == "cuda-cloverleaf"


def test_memory_events_from_cuda_gpu_memory_usage() -> None:
    trace = load(OLD)
    mem = trace.memory_events()
    rows = sql(OLD, "SELECT deviceId, SUM(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END), COUNT(*) "
                    "FROM CUDA_GPU_MEMORY_USAGE_EVENTS GROUP BY 1")
    assert len(mem) == sum(r[2] for r in rows)
    c = trace.columns
    for device, net, _ in rows:
        on = mem.rows[c.mem_device[mem.rows] == device]
        assert int(c.nbytes[on].sum()) == net
        assert int(c.total_allocated[on][-1]) == net  # the running total ends at the net allocation


def test_nvtx_ranges_become_annotations_and_the_mpi_rank_a_rank() -> None:
    trace = load(SAXPY)
    ranges = sql(SAXPY, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)")[0][0]
    annotations = trace.annotations()
    assert len(annotations) == ranges == 22
    assert annotations.names.count("saxpy") == 5
    assert {"MPI_Init", "MPI_Send", "MPI_Recv"} & set(annotations.names)
    assert (trace.rank, trace.rank_source) == (0, "distributedInfo")
    assert trace.distributed["rank"] == 0


def test_a_folder_of_different_programs_is_not_one_run(tmp_path: Path) -> None:
    for path in ALL:
        (tmp_path / path.name).symlink_to(path)
    with pytest.raises(TraceError, match="different programs"):
        aiprof.load(tmp_path)
    out = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2
    assert "different programs" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_cloverleaf_sync_finding_fires_with_call_count_and_time(tmp_path: Path) -> None:
    """CloverLeaf synchronises after every kernel: `aiprof analyze` says so with the calls and their time."""
    expected = sql(CLOVER, "SELECT COUNT(*), SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                           "ON s.id = r.nameId WHERE s.value = 'cudaDeviceSynchronize_v3020'")[0]
    assert expected[0] == 1312 and expected[1] == pytest.approx(301.65e6, abs=0.01e6)
    out_file = tmp_path / "clover.json"
    out = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(CLOVER), "-o", str(out_file)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out_file.read_text())
    sync = [f for f in doc["findings"] if f["id"] == "sync"]
    assert sync, [f["id"] for f in doc["findings"]]
    evidence = sync[0]["evidence"]
    steps = evidence["steps_used"]
    top = {c["name"]: c for c in evidence["top_calls"]}["cudaDeviceSynchronize"]
    assert top["calls_per_step"] * steps == expected[0]
    assert top["ns_per_step"] * steps == expected[1]
