"""The Nsight Systems reader on edited copies of the shared databases and on tiny synthetic ones: bad
input, secrets in the capture metadata, several processes in one report, steps from NVTX ranges, the
autograd-nvtx op ranges, and picking the reader by content."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from kineto_builder import TraceBuilder

import aiprof
from aiprof.analysis.steps import step_windows
from aiprof.errors import TraceError
from aiprof.trace import RunSet, Trace, readers
from aiprof.trace.readers import ReaderOptions, load_ranks
from aiprof.trace.readers.nsys import _nvtx_op

NSYS = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "nsys"
CLOVER = NSYS / "perlmutter-cloverleaf-cuda.sqlite"
SAXPY = NSYS / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
needs_shared = pytest.mark.skipif(not NSYS.is_dir(), reason="../shared/traces/nsys not present")
BENCH = Path(__file__).resolve().parents[2] / "bench"


def copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    return dst


def edit(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()


def analyze(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(path), *args], capture_output=True,
                          text=True, timeout=300)


def one_line_error(out: subprocess.CompletedProcess[str], words: str) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert words in out.stderr


# --- bad input ---------------------------------------------------------------------------------------
def test_an_sqlite_file_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    edit(path, "CREATE TABLE people (name TEXT)", "INSERT INTO people VALUES ('x')")
    with pytest.raises(TraceError, match="not an Nsight Systems export"):
        aiprof.load(path)
    one_line_error(analyze(path), "not an Nsight Systems export")


@needs_shared
def test_a_truncated_database(tmp_path: Path) -> None:
    path = copy(CLOVER, tmp_path / "cut.sqlite")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(TraceError, match="cannot be read|re-export"):
        aiprof.load(path)
    one_line_error(analyze(path), "re-export")


@needs_shared
def test_a_missing_table_and_a_missing_column(tmp_path: Path) -> None:
    path = copy(SAXPY, tmp_path / "nostrings.sqlite")
    edit(path, "DROP TABLE StringIds")
    with pytest.raises(TraceError, match="no StringIds table"):
        aiprof.load(path)
    one_line_error(analyze(path), "no StringIds table")
    path = copy(SAXPY, tmp_path / "nocorr.sqlite")
    edit(path, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN correlationId")
    with pytest.raises(TraceError, match="lacks column.*correlationId"):
        aiprof.load(path)


@needs_shared
def test_an_export_without_cuda_or_nvtx_activity(tmp_path: Path) -> None:
    path = copy(SAXPY, tmp_path / "empty.sqlite")
    edit(path, *(f"DROP TABLE {t}" for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                             "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")))
    with pytest.raises(TraceError, match="no CUDA or NVTX activity"):
        aiprof.load(path)


def test_a_report_without_nsys_on_path_says_how_to_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(b"NVR\x00" + b"\x00" * 100)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(TraceError, match=r"nsys export --type sqlite run\.nsys-rep"):
        aiprof.load(path)


# --- privacy -------------------------------------------------------------------------------------------
SECRET = "hf_" + "PLANTEDsecretTOKEN0123456789"


@needs_shared
def test_the_capture_environment_never_reaches_any_output(tmp_path: Path) -> None:
    """META_DATA_CAPTURE holds the process environment, META_DATA_EXPORT the user, host and paths,
    TARGET_INFO_SYSTEM_ENV the device environment: plant a secret in each, and look for it (and for every
    value those tables hold) in every report format and in the loaded trace."""
    path = copy(CLOVER, tmp_path / "planted.sqlite")
    edit(
        path,
        f"INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', 'HF_TOKEN={SECRET}')",
        f"UPDATE META_DATA_EXPORT SET value = 'user_{SECRET}' WHERE name = 'EXPORT_USER'",
        f"INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) VALUES (0, '', 'DeviceEnvironment', 0, "
        f"'AWS_SECRET_ACCESS_KEY={SECRET}')",
    )
    con = sqlite3.connect(path)
    values = [v for t in ("META_DATA_CAPTURE", "META_DATA_EXPORT", "TARGET_INFO_SYSTEM_ENV")
              for (n, v) in con.execute(f"SELECT name, value FROM {t}")
              if isinstance(v, str) and len(v) >= 12 and not n.startswith(("EXPORT_PRODUCT", "EXPORT_SCHEMA"))]
    # The program's name is also the process and thread name the report shows (PROCESSES, ThreadNames).
    shown = {v for (v,) in con.execute("SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId")}
    values = [v for v in values if v not in shown]
    con.close()
    assert any(SECRET in v for v in values)
    outputs = [analyze(path).stdout]
    for ext in ("json", "md", "html"):
        out = tmp_path / f"report.{ext}"
        assert analyze(path, "-o", str(out)).returncode == 0
        outputs.append(out.read_text())
    trace = aiprof.load(path)
    outputs.append(repr((trace.metadata, trace.distributed, trace.process_names, trace.thread_names,
                         trace.strings, trace.warnings, trace.devices)))
    for text in outputs:
        assert SECRET not in text
        leaked = [v[:40] for v in values if v in text]
        assert not leaked


# --- several processes, steps, ops -----------------------------------------------------------------------
@needs_shared
def test_two_mpi_processes_in_one_report_are_two_ranks(tmp_path: Path) -> None:
    """A copy of the SAXPY report with a second process (rank 1) added: each process is a rank."""
    path = copy(SAXPY, tmp_path / "two.sqlite")
    other = 1230999
    shift = f"((({other}) << 24) | (globalTid & 16777215 & 0) | {other})"
    edit(
        path,
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL",
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = ({other} << 24) WHERE rowid > 5",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start, end, eventClass, {shift}, correlationId, nameId, "
        "returnValue, callchainId, name FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        f"INSERT INTO ThreadNames SELECT nameId + 0, priority, {shift} FROM ThreadNames WHERE globalTid & 16777215 = 1230493",
        "INSERT INTO StringIds VALUES (999999, 'MPI Rank 1')",
        f"INSERT INTO PROCESSES VALUES ({other} << 24, {other}, './saxpy-mpi-cuda')",
        f"UPDATE ThreadNames SET nameId = 999999 WHERE globalTid = {shift.replace('globalTid', '0')}",
    )
    third = 1231111
    edit(path, "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start, end, eventClass, "
               f"({third} << 24) | {third}, correlationId + 100000, nameId, returnValue, callchainId, name "
               "FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 3")
    traces = load_ranks(path)
    assert [len(t.kernels()) for t in traces] == [5, 5]  # the process with calls but no GPU work is no rank
    assert any("1 process(es) made CUDA calls but ran no GPU work" in w for w in traces[0].warnings)
    loaded = aiprof.load(path)
    assert isinstance(loaded, RunSet)
    assert loaded.ranks == [0, 1]
    assert [t.rank_source for t in loaded] == ["distributedInfo", "distributedInfo"]
    out = tmp_path / "two.json"
    done = analyze(path, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert [r["rank"] for r in json.loads(out.read_text())["ranks"]] == [0, 1]


@needs_shared
def test_step_range_makes_the_matching_nvtx_ranges_the_steps() -> None:
    trace = load_ranks(SAXPY, ReaderOptions(step_range=r"^saxpy$"))[0]
    windows = step_windows(trace)
    spans = sqlite3.connect(f"file:{SAXPY}?mode=ro", uri=True).execute(
        "SELECT start, end FROM NVTX_EVENTS WHERE text = 'saxpy' ORDER BY start").fetchall()
    assert [w.name for w in windows] == [f"ProfilerStep#{i}" for i in range(5)]
    assert [w.cpu_start_ns for w in windows] == [s for s, _ in spans]
    assert len(trace.annotations().where_name("^saxpy$")) == 5  # the ranges themselves are kept
    with pytest.raises(TraceError, match="matches no NVTX range"):
        load_ranks(SAXPY, ReaderOptions(step_range="^nothing$"))
    with pytest.raises(TraceError, match="not a regular expression"):
        load_ranks(SAXPY, ReaderOptions(step_range="("))


def test_emit_nvtx_range_names_are_parsed() -> None:
    name, seq, shapes = _nvtx_op("aten::addmm, seq = 12, op_id = 40, sizes = [[4, 8], [4, 16], [16, 8]], "
                                 "input_op_ids = [(1,0), (2,0)]")
    assert (name, seq, shapes) == ("aten::addmm", 12, [[4, 8], [4, 16], [16, 8]])
    assert _nvtx_op("ProfilerStep#3, op_id = 5") == ("ProfilerStep#3", -1, None)
    assert _nvtx_op("my range") == ("my range", -1, None)


def _synthetic(path: Path, nvtx: list[tuple[int, int, str]]) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import nsys_import
    finally:
        sys.path.remove(str(BENCH))
    nsys_import.build(path, 6)
    gtid = nsys_import.GLOBAL_TID
    edit(path, "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
               "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
               "textId INTEGER, domainId INTEGER)",
         *(f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES ({s}, {e}, 59, '{t}', {gtid})"
           for s, e, t in nvtx))


def test_autograd_nvtx_ranges_become_steps_and_ops_with_shapes(tmp_path: Path) -> None:
    """nsys --pytorch=autograd-nvtx names every op range ``aten::mm, seq = N, op_id = M, sizes = …``."""
    path = tmp_path / "torch.sqlite"
    steps = [(900_000 + i * 8_000, 900_000 + (i + 1) * 8_000 - 100, f"ProfilerStep#{i}, op_id = {i + 1}") for i in range(3)]
    ops = [(1_000_500 + i * 8_000, 1_002_000 + i * 8_000, f"aten::mm, seq = {i}, op_id = {10 + i}, sizes = [[64, 32], [32, 16]]")
           for i in range(3)]
    _synthetic(path, steps + ops)
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    assert trace.steps().names == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    cpu_ops = trace.ops()
    assert cpu_ops.names == ["aten::mm"] * 3
    assert cpu_ops.column("seq").tolist() == [0, 1, 2]
    assert trace.op_inputs(int(cpu_ops.rows[0])).dims == [[64, 32], [32, 16]]
    assert [w.name for w in step_windows(trace)] == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]


# --- picking the reader by content ----------------------------------------------------------------------------
@needs_shared
def test_the_reader_is_picked_by_content_not_by_name(tmp_path: Path) -> None:
    disguised = copy(SAXPY, tmp_path / "trace.json")
    assert readers.reader_for(disguised).name == "nsys"
    assert len(aiprof.load(disguised).kernels()) == 5  # type: ignore[union-attr]
    builder = TraceBuilder()
    builder.kernel("k", ts=0, dur=10)
    kineto = builder.write(tmp_path / "kineto.sqlite")
    assert len(aiprof.load(kineto).kernels()) == 1  # type: ignore[union-attr]
    assert readers.reader_for(kineto).name == "kineto"
    gz = tmp_path / "x.bin"
    gz.write_bytes(gzip.compress(kineto.read_bytes()))
    assert readers.reader_for(gz).name == "kineto"


@needs_shared
def test_aiprof_load_takes_a_step_range() -> None:
    trace = aiprof.load(SAXPY, step_range="^saxpy$")
    assert isinstance(trace, Trace)
    assert len(trace.steps()) == 5
    plain = aiprof.load(SAXPY)
    assert isinstance(plain, Trace) and len(plain.steps()) == 0  # the option does not stick


def test_packed_and_parallel_reads_build_the_same_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Long tables are read packed (fields sharing 62-bit words, sized by each field's range) and in rowid
    ranges by forked helpers: both give exactly what the plain row-by-row read gives."""
    import numpy as np

    from aiprof.trace.model import Columns
    from aiprof.trace.readers import nsys

    path = tmp_path / "long.sqlite"
    _synthetic(path, [])
    edit(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 4294967295, gridX = 3000000000 WHERE rowid = 2",
         "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -5 WHERE rowid = 3",
         "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL",
         "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME")

    def read() -> Trace:
        return nsys.read_sqlite(path)[0]

    monkeypatch.setattr(nsys, "_PACK_ROWS", 10**9)
    plain = read()
    monkeypatch.setattr(nsys, "_PACK_ROWS", 1)
    packed = read()
    monkeypatch.setattr(nsys, "_PARALLEL_ROWS", 2)
    monkeypatch.setattr(nsys, "_helpers", lambda rows: 2)
    parallel = read()
    assert len(plain.kernels()) == 12
    for name in Columns.__dataclass_fields__:
        a = getattr(plain.columns, name)
        for other in (packed, parallel):
            assert np.array_equal(a, getattr(other.columns, name), equal_nan=a.dtype.kind == "f"), name
    assert plain.strings == packed.strings == parallel.strings


@needs_shared
def test_a_report_is_exported_with_nsys_when_it_is_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``.nsys-rep``: aiprof runs ``nsys export --type sqlite --output OUT REPORT`` (a stand-in nsys here,
    which copies the SAXPY export to OUT) and reads the result; the trace keeps the report's path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(f'#!/bin/sh\nwhile [ "$1" != "--output" ]; do shift; done\ncp "{SAXPY}" "$2"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    report = tmp_path / "run_rank0.nsys-rep"
    report.write_bytes(b"NVR\x00")
    trace = aiprof.load(report)
    assert isinstance(trace, Trace)
    assert trace.path == report and len(trace.kernels()) == 5
    failing = bin_dir / "nsys"
    failing.write_text("#!/bin/sh\necho 'cannot open report' >&2\nexit 1\n")
    with pytest.raises(TraceError, match="nsys export --type sqlite. failed .cannot open report"):
        aiprof.load(report)


@needs_shared
def test_rank_from_the_launchers_variable_and_nothing_else_of_the_environment(tmp_path: Path) -> None:
    """One process per report (srun nsys profile …): its rank is the launcher's rank variable, read from the
    captured environment by name in SQL; the file name's trailing number is the fallback."""
    path = copy(CLOVER, tmp_path / "node.sqlite")
    edit(path, "DELETE FROM META_DATA_CAPTURE WHERE value LIKE 'PMI_RANK=%' OR value LIKE 'SLURM_PROCID=%'",
         "INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', 'OMPI_COMM_WORLD_RANK=\"3\"')")
    trace = load_ranks(path)[0]
    assert trace.distributed == {"rank": 3}
    assert load_ranks(CLOVER)[0].distributed == {"rank": 0}  # its PMI_RANK="0"
    named = copy(CLOVER, tmp_path / "report.7.sqlite")
    edit(named, "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE'")
    assert load_ranks(named)[0].distributed == {"rank": 7}


@needs_shared
def test_kernel_grid_and_block_are_kept_per_axis() -> None:
    """The CUPTI kernel table's gridX/Y/Z and blockX/Y/Z become the trace's grid_x… columns; their products
    stay the grid and block columns."""
    import numpy as np

    from aiprof.trace.model import Kind

    trace = load_ranks(CLOVER)[0]
    c = trace.columns
    k = trace.rows_of(Kind.KERNEL)
    con = sqlite3.connect(CLOVER)
    want = sorted(con.execute("SELECT gridX, gridY, gridZ, blockX, blockY, blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    con.close()
    got = sorted(zip(*(getattr(c, n)[k].tolist() for n in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"))))
    assert got == want
    assert (c.grid[k] == c.grid_x[k].astype(np.int64) * c.grid_y[k] * c.grid_z[k]).all()
