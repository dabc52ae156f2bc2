"""The typed query methods of a Trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_builder import TraceBuilder

import aiprof
from aiprof.trace import Trace


def test_views_select_by_kind_name_and_device(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=50)
    b.step(1, ts=50, dur=50)
    op = b.cpu_op("aten::mm", ts=1, dur=10)
    b.launch(op, kernel="sgemm_128x64_nn", kernel_ts=5, kernel_dur=3, device=0)
    b.launch(op, kernel="add_kernel", kernel_ts=9, kernel_dur=1.5, device=1)
    trace = aiprof.load(b.write(tmp_path / "t.json.gz"))
    assert isinstance(trace, Trace)
    assert trace.steps().names == ["ProfilerStep#0", "ProfilerStep#1"]
    kernels = trace.kernels()
    assert kernels.names == ["sgemm_128x64_nn", "add_kernel"]
    assert kernels.dur_ns.tolist() == [3000, 1500]
    assert kernels.where_name("^add").names == ["add_kernel"]
    assert kernels.on_device(1).column("device").tolist() == [1]
    assert trace.ops().names == ["aten::mm"]
    assert len(trace.runtime_calls()) == 2
    (record,) = kernels.records(limit=1)
    assert record["kind"] == "kernel" and record["ts_ns"] == 5000
    with pytest.raises(KeyError, match="no column"):
        kernels.column("nope")


def test_rocm_device_numbering_still_finds_the_properties(tmp_path: Path) -> None:
    b = TraceBuilder(device_name="AMD Instinct MI300X")  # deviceProperties lists id 0
    op = b.cpu_op("aten::mm", ts=1, dur=10)
    b.launch(op, kernel="Cijk_gemm", kernel_ts=5, kernel_dur=3, device=2)
    trace = aiprof.load(b.write(tmp_path / "rocm.json"))
    assert isinstance(trace, Trace)
    assert trace.device_ids == [2]
    assert trace.device_info(2).name == "AMD Instinct MI300X"
    assert trace.device_info(2).index == 2
