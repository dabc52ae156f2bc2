"""The Kineto loader on tiny hand-built traces: every file shape and schema, the columns the analyses rely
on (kind, ns times, External id, correlation, device, stream, bytes, shapes), and rank numbering."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kineto_builder import TraceBuilder

import aiprof
from aiprof.errors import AiprofWarning
from aiprof.trace.model import Kind, RunSet, Trace


def load_one(path: Path) -> Trace:
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


def row_named(trace: Trace, name: str) -> int:
    rows = np.flatnonzero(trace.columns.name == trace.string_id(name))
    assert len(rows) == 1, f"{name!r}: {len(rows)} rows"
    return int(rows[0])


def training_step(schema: str = "new") -> TraceBuilder:
    """One ProfilerStep with a DataLoader fetch, an mm that launches a kernel, a copy, a set, memory."""
    b = TraceBuilder(schema)  # type: ignore[arg-type]
    b.step(0, ts=0, dur=200)
    b.dataloader(ts=1, dur=9)
    op = b.cpu_op("aten::mm", ts=10, dur=20, shapes=[[4, 8], [8, 16]], dtypes=["float", "float"], seq=5)
    b.launch(op, kernel="sgemm_128x64", kernel_ts=35, kernel_dur=6, stream=7, grid=(4, 2, 1), block=(128, 2, 1))
    copy = b.cpu_op("aten::copy_", ts=40, dur=10)
    b.memcpy(copy, ts=50, dur=2, nbytes=4096, stream=13)
    zero = b.cpu_op("aten::zero_", ts=60, dur=10)
    b.memset(zero, ts=75, dur=1, nbytes=512)
    b.memory(ts=12, nbytes=2048, total_allocated=4096, total_reserved=8192, device=0)
    b.memory(ts=13, nbytes=-64, total_allocated=0)
    b.runtime("cudaStreamSynchronize", ts=80, dur=100)
    return b


# ---------------------------------------------------------------------------------------------------
# File shapes
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schema", ["new", "legacy"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".pt.trace.json.gz"])
@pytest.mark.parametrize("bare", [False, True])
def test_every_file_shape_loads_the_same_events(tmp_path: Path, schema: str, suffix: str, bare: bool) -> None:
    b = training_step(schema)
    trace = load_one(b.write(tmp_path / f"t{suffix}", bare=bare))
    kinds = np.bincount(trace.columns.kind, minlength=len(Kind))
    assert kinds[Kind.USER_ANNOTATION] == 2  # ProfilerStep + DataLoader, also under legacy "Operator"
    assert kinds[Kind.CPU_OP] == 3
    assert kinds[Kind.RUNTIME] == 4
    assert kinds[Kind.KERNEL] == 1 and kinds[Kind.MEMCPY] == 1 and kinds[Kind.MEMSET] == 1
    assert kinds[Kind.MEMORY] == 2
    assert len(trace) == 14
    assert trace.warnings == []


def test_gzip_is_detected_by_content_not_suffix(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(gzip.compress(training_step().dumps().encode()))
    assert len(load_one(path)) == 14


# ---------------------------------------------------------------------------------------------------
# Timestamps
# ---------------------------------------------------------------------------------------------------
def test_ns_decimals_convert_exactly(tmp_path: Path) -> None:
    text = (
        '{"baseTimeNanoseconds": 1790857026000000000, "traceEvents": ['
        '{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":12739,"tid":12739,'
        '"ts":5089001115343.774,"dur":337.379,"args":{"External id":27721}},'
        '{"ph":"X","cat":"cpu_op","name":"aten::add","pid":12739,"tid":12739,'
        '"ts":88511388202.765,"dur":0.001,"args":{}},'
        '{"ph":"X","cat":"cpu_op","name":"aten::mul","pid":12739,"tid":12739,'
        '"ts":8796093022207.999,"dur":0.999,"args":{}}]}'
    )
    path = tmp_path / "t.json"
    path.write_text(text)
    trace = load_one(path)
    c = trace.columns
    mm, add, mul = row_named(trace, "aten::mm"), row_named(trace, "aten::add"), row_named(trace, "aten::mul")
    assert int(c.ts[mm]) == 5089001115343774 and int(c.dur[mm]) == 337379
    assert int(c.ts[add]) == 88511388202765 and int(c.dur[add]) == 1
    assert int(c.ts[mul]) == 8796093022207999 and int(c.dur[mul]) == 999
    assert c.ts.dtype == np.int64 and c.dur.dtype == np.int64
    assert trace.base_time_ns == 1790857026000000000


@pytest.mark.parametrize("schema", ["new", "legacy"])
def test_builder_times_round_trip(tmp_path: Path, schema: str) -> None:
    b = TraceBuilder(schema)  # type: ignore[arg-type]
    frac = schema == "new"
    events = [b.cpu_op(f"op{i}", ts=1000 * i + (0.123 * i if frac else 0), dur=3 + (0.007 if frac else 0))
              for i in range(50)]
    trace = load_one(b.write(tmp_path / "t.json"))
    for i, ev in enumerate(events):
        row = row_named(trace, f"op{i}")
        assert int(trace.columns.ts[row]) == b.ns(ev, "ts")
        assert int(trace.columns.dur[row]) == b.ns(ev, "dur")


def test_legacy_absolute_microseconds(tmp_path: Path) -> None:
    b = TraceBuilder("legacy", legacy_origin_us=1_623_142_623_460_111)
    op = b.cpu_op("aten::empty", ts=0, dur=25)
    trace = load_one(b.write(tmp_path / "t.json"))
    assert int(trace.columns.ts[row_named(trace, "aten::empty")]) == 1_623_142_623_460_111_000
    assert trace.base_time_ns == 0
    assert op["tid"] == "4242" and trace.columns.tid[0] == 4242


def test_rows_are_sorted_by_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    for ts in (50, 10, 30, 20, 40):
        b.cpu_op(f"op{ts}", ts=ts, dur=1)
    trace = load_one(b.write(tmp_path / "t.json"))
    assert list(trace.columns.ts) == [10_000, 20_000, 30_000, 40_000, 50_000]
    assert [trace.name_of(i) for i in range(5)] == ["op10", "op20", "op30", "op40", "op50"]


# ---------------------------------------------------------------------------------------------------
# Columns the analyses rely on
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schema", ["new", "legacy"])
def test_links_device_stream_and_args(tmp_path: Path, schema: str) -> None:
    b = training_step(schema)
    trace = load_one(b.write(tmp_path / "t.json.gz"))
    c = trace.columns
    mm, launch, kernel = row_named(trace, "aten::mm"), row_named(trace, "cudaLaunchKernel"), row_named(trace, "sgemm_128x64")
    assert c.external_id[mm] == c.external_id[launch] == c.external_id[kernel] != -1
    assert c.correlation[launch] == c.correlation[kernel] != -1
    assert c.correlation[mm] == -1
    assert c.device[kernel] == 0 and c.device[mm] == -1 and c.device[launch] == -1
    assert c.tid[kernel] == 7 and c.pid[kernel] == 0
    assert c.grid[kernel] == 8 and c.block[kernel] == 256 and c.registers[kernel] == 32
    assert c.occupancy_pct[kernel] == pytest.approx(12.0)
    assert c.seq[mm] == 5 and c.fwd_tid[mm] == 0
    copy = int(np.flatnonzero(c.kind == Kind.MEMCPY)[0])
    assert c.nbytes[copy] == 4096 and c.tid[copy] == 13
    assert c.external_id[copy] == c.external_id[row_named(trace, "aten::copy_")]
    memset = int(np.flatnonzero(c.kind == Kind.MEMSET)[0])
    assert c.nbytes[memset] == 512
    inputs = trace.op_inputs(mm)
    assert inputs.dims == [[4, 8], [8, 16]] and inputs.types == ["float", "float"]
    assert trace.op_inputs(launch).dims == []


@pytest.mark.parametrize("schema", ["new", "legacy"])
def test_memory_events(tmp_path: Path, schema: str) -> None:
    trace = load_one(training_step(schema).write(tmp_path / "t.json"))
    c = trace.columns
    rows = np.flatnonzero(c.kind == Kind.MEMORY)
    assert list(c.nbytes[rows]) == [2048, -64]
    assert list(c.total_allocated[rows]) == [4096, 0]
    assert list(c.total_reserved[rows]) == [8192, 0]
    assert list(c.mem_device[rows]) == [0, -1]
    assert list(c.dur[rows]) == [0, 0]


@pytest.mark.parametrize("schema", ["new", "legacy"])
def test_flows(tmp_path: Path, schema: str) -> None:
    trace = load_one(training_step(schema).write(tmp_path / "t.json"))
    f = trace.flows
    assert len(f.flow_id) == 6  # three launches, s + f each
    launches = np.flatnonzero(np.isin(trace.columns.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]))
    assert sorted(set(f.flow_id.tolist())) == sorted(trace.columns.correlation[launches].tolist())
    assert f.is_start.sum() == 3 and not f.is_fwdbwd.any()
    starts = f.ts[f.is_start]
    runtime = trace.columns.ts[np.isin(trace.columns.correlation, f.flow_id) & (trace.columns.kind == Kind.RUNTIME)]
    assert sorted(starts.tolist()) == sorted(runtime.tolist())


def test_python_driver_and_gpu_annotation(tmp_path: Path) -> None:
    b = TraceBuilder()
    root = b.python("train.py(10): main", ts=0, dur=100)
    b.python("nn.Module: Linear_0", ts=1, dur=50, parent=root, module_id=0)
    step = b.step(3, ts=0, dur=90)
    b.runtime("cuLaunchKernel", ts=5, dur=1, driver=True)
    b.gpu_annotation("ProfilerStep#3", ts=10, dur=20, external_id=step["args"]["External id"])
    trace = load_one(b.write(tmp_path / "t.json"))
    c = trace.columns
    child = row_named(trace, "nn.Module: Linear_0")
    assert c.kind[child] == Kind.PYTHON and c.python_parent_id[child] == c.python_id[row_named(trace, "train.py(10): main")]
    assert c.kind[row_named(trace, "cuLaunchKernel")] == Kind.DRIVER
    gpu_step = np.flatnonzero((c.kind == Kind.GPU_ANNOTATION))
    assert len(gpu_step) == 1 and c.external_id[gpu_step[0]] == step["args"]["External id"]
    assert c.device[gpu_step[0]] == 0


def test_header_devices_and_distributed(tmp_path: Path) -> None:
    b = TraceBuilder(devices=2, device_name="NVIDIA A100-SXM4-80GB")
    b.cpu_op("aten::add", ts=0, dur=1)
    b.distributed(rank=5, world_size=8)
    trace = load_one(b.write(tmp_path / "t.json"))
    assert [d.index for d in trace.devices] == [0, 1]
    assert trace.devices[0].name == "NVIDIA A100-SXM4-80GB" and trace.devices[0].num_sms == 132
    assert trace.devices[0].compute_capability == "9.0"
    assert trace.distributed["world_size"] == 8
    # a single file keeps rank 0 unless part of a set; distributedInfo is kept for the caller
    assert trace.distributed["rank"] == 5
    assert trace.process_names[4242] == "python3"


def test_cpu_only_trace(tmp_path: Path) -> None:
    b = TraceBuilder(devices=0)
    b.step(0, ts=0, dur=10)
    b.cpu_op("aten::add", ts=1, dur=2)
    trace = load_one(b.write(tmp_path / "t.json"))
    assert not trace.has_device_activity and trace.device_ids == [] and trace.devices == []


def test_no_cpu_side(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=5, stream=7)
    b.kernel("k2", ts=6, dur=5, stream=8, device=1)
    trace = load_one(b.write(tmp_path / "t.json"))
    assert trace.device_ids == [0, 1]
    assert set(trace.columns.kind.tolist()) == {int(Kind.KERNEL)}


def test_no_gpu_kernels_only_launches(tmp_path: Path) -> None:
    b = TraceBuilder()
    op = b.cpu_op("aten::mm", ts=0, dur=10)
    b.runtime("cudaLaunchKernel", ts=1, dur=2, external_id=op["args"]["External id"])
    trace = load_one(b.write(tmp_path / "t.json"))
    assert not trace.has_device_activity
    assert trace.columns.kind[row_named(trace, "cudaLaunchKernel")] == Kind.RUNTIME


def test_empty_names_are_kept(tmp_path: Path) -> None:
    b = TraceBuilder(device_name="")
    b.kernel("", ts=0, dur=5)
    trace = load_one(b.write(tmp_path / "t.json"))
    assert trace.name_of(0) == "" and trace.devices[0].name == ""


def test_amd_hip_names(tmp_path: Path) -> None:
    b = TraceBuilder(device_name="AMD Instinct MI300X")
    op = b.cpu_op("aten::mm", ts=0, dur=10)
    b.launch(op, kernel="Cijk_Ailk_Bljk_SB_MT64x64x16", kernel_ts=12, kernel_dur=3, api="hipLaunchKernel", device=2)
    b.launch(op, kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL", kernel_ts=16, kernel_dur=3, api="hipExtLaunchKernel")
    b.raw({"ph": "X", "cat": "hip_runtime", "name": "hipMalloc", "pid": 4242, "tid": 4242, "ts": 20.0, "dur": 1.0})
    trace = load_one(b.write(tmp_path / "t.json"))
    c = trace.columns
    assert c.kind[row_named(trace, "hipLaunchKernel")] == Kind.RUNTIME
    assert c.kind[row_named(trace, "hipMalloc")] == Kind.RUNTIME
    assert c.device[row_named(trace, "Cijk_Ailk_Bljk_SB_MT64x64x16")] == 2


def test_mtia_stream_comes_from_args(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.raw({"ph": "X", "cat": "mtia_ccp_events", "name": "matmul", "pid": 9, "tid": 4, "ts": 1.0, "dur": 2.0,
           "args": {"stream": 1, "correlation": 423}})
    trace = load_one(b.write(tmp_path / "t.json"))
    c = trace.columns
    assert c.kind[0] == Kind.KERNEL and c.tid[0] == 1 and c.device[0] == 9 and c.correlation[0] == 423


def test_unknown_category_and_string_pids(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.raw({"ph": "X", "cat": "brand_new_thing", "name": "x", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1, "dur": 1})
    b.raw({"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "Trace", "ts": 1})
    b.cpu_op("aten::add", ts=0, dur=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = load_one(b.write(tmp_path / "t.json"))
    c = trace.columns
    assert c.kind[row_named(trace, "x")] == Kind.OTHER
    assert c.kind[row_named(trace, "Iteration Start: PyTorch Profiler")] == Kind.INSTANT
    assert c.pid[row_named(trace, "x")] < 0  # a string pid gets its own negative id


# ---------------------------------------------------------------------------------------------------
# Folders and ranks
# ---------------------------------------------------------------------------------------------------
def rank_trace(tmp: Path, name: str, rank: int | None = None, op: str = "aten::add") -> Path:
    b = TraceBuilder()
    b.cpu_op(op, ts=0, dur=1)
    if rank is not None:
        b.distributed(rank=rank, world_size=4)
    return b.write(tmp / name)


def load_set(*paths: Any) -> RunSet:
    result = aiprof.load(list(paths)) if len(paths) > 1 else aiprof.load(paths[0])
    assert isinstance(result, RunSet)
    return result


def test_ranks_from_distributed_info(tmp_path: Path) -> None:
    for rank, name in ((2, "a.json"), (0, "b.json"), (1, "c.json")):
        rank_trace(tmp_path, name, rank, op=f"op{rank}")
    runs = load_set(tmp_path)
    assert runs.ranks == [0, 1, 2]
    assert [t.rank_source for t in runs] == ["distributedInfo"] * 3
    assert runs.rank(2).path.name == "a.json" and runs.rank(2).string_id("op2") >= 0


@pytest.mark.parametrize("names", [["rank-3.json", "rank-1.json"], ["rank_3.json", "rank_1.json"],
                                   ["worker3.pt.trace.json", "worker1.pt.trace.json"]])
def test_ranks_from_file_names(tmp_path: Path, names: list[str]) -> None:
    for name in names:
        rank_trace(tmp_path, name)
    runs = load_set(tmp_path)
    assert runs.ranks == [1, 3] and {t.rank_source for t in runs} == {"file name"}
    assert runs.rank(3).path.name == names[0]


def test_ranks_by_file_order(tmp_path: Path) -> None:
    rank_trace(tmp_path, "b.json")
    rank_trace(tmp_path, "a.json")
    runs = load_set(tmp_path / "b.json", tmp_path / "a.json")
    assert runs.ranks == [0, 1] and runs.rank(0).path.name == "b.json"


def test_duplicate_ranks_are_kept_apart_with_a_warning(tmp_path: Path) -> None:
    rank_trace(tmp_path, "x.json", rank=1, op="first")
    rank_trace(tmp_path, "y.json", rank=1, op="second")
    with pytest.warns(AiprofWarning, match="2 files claim rank 1"):
        runs = load_set(tmp_path)
    assert len(runs) == 2 and runs.ranks == [0, 1]
    assert {t.rank_source for t in runs} == {"file order"}


def test_folder_skips_non_trace_json_with_a_warning(tmp_path: Path) -> None:
    rank_trace(tmp_path, "rank0.json", rank=0)
    rank_trace(tmp_path, "rank1.json", rank=1)
    (tmp_path / "notes.json").write_text(json.dumps({"hello": "world"}))
    (tmp_path / "readme.txt").write_text("not json")
    with pytest.warns(AiprofWarning, match="notes.json"):
        runs = load_set(tmp_path)
    assert runs.ranks == [0, 1]


def test_nested_folders(tmp_path: Path) -> None:
    rank_trace(tmp_path / "r0", "trace.json.gz", rank=0)
    rank_trace(tmp_path / "r1", "trace.json.gz", rank=1)
    assert load_set(tmp_path).ranks == [0, 1]


@pytest.mark.parametrize("native", [True, False])
def test_grid_and_block_dims_are_kept_per_axis(tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """grid_x/y/z and block_x/y/z (int32): the list's entries, missing trailing ones 1; -1 for anything that is
    not 1 to 3 ints in [0, 2^31). The products (grid, block) are kept as before."""
    from aiprof.trace.kineto import builder

    if native and builder._native is None:
        pytest.skip("the native columniser is not built")
    if not native:
        monkeypatch.setattr(builder, "_native", None)
    grids: list[Any] = [[2, 12, 4], [7], [1, 2, 3, 4], [2**31, 1], None, [0, 5]]
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10.0 * i, "dur": 5.0,
               "args": {"grid": g, "block": [256, 1, 1] if i % 2 == 0 else [64, 2]}} for i, g in enumerate(grids)]
    path = tmp_path / "dims.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_one(path)
    c = trace.columns
    got = {trace.name_of(r): ((int(c.grid_x[r]), int(c.grid_y[r]), int(c.grid_z[r])),
                              (int(c.block_x[r]), int(c.block_y[r]), int(c.block_z[r])), int(c.grid[r]))
           for r in trace.rows_of(Kind.KERNEL).tolist()}
    assert got == {
        "k0": ((2, 12, 4), (256, 1, 1), 96),
        "k1": ((7, 1, 1), (64, 2, 1), 7),
        "k2": ((-1, -1, -1), (256, 1, 1), 24),
        "k3": ((-1, -1, -1), (64, 2, 1), 2**31),
        "k4": ((-1, -1, -1), (256, 1, 1), -1),
        "k5": ((0, 5, 1), (64, 2, 1), 0),
    }
    assert c.grid_x.dtype == np.int32 and c.block_z.dtype == np.int32
    cpu = trace.rows_of(Kind.CPU_OP)
    assert (c.grid_x[cpu] == -1).all()
