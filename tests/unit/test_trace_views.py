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


def test_launch_links_fall_back_to_flows_without_correlation(tmp_path: Path) -> None:
    from aiprof.trace import links

    b = TraceBuilder()
    op = b.cpu_op("aten::mm", ts=1, dur=10)
    rt, kernel = b.launch(op, kernel="sgemm", kernel_ts=5, kernel_dur=3)
    del kernel["args"]["correlation"]  # e.g. a converter that kept only the flow arrows
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    k = int(trace.kernels().rows[0])
    launch = int(links.launcher(trace)[k])
    assert launch >= 0 and trace.name_of(launch) == "cudaLaunchKernel"
    assert trace.name_of(int(links.gpu_op(trace)[k])) == "aten::mm"

    no_flow = TraceBuilder()
    op = no_flow.cpu_op("aten::mm", ts=1, dur=10)
    _, kernel = no_flow.launch(op, kernel="sgemm", kernel_ts=5, kernel_dur=3, flow=False)
    del kernel["args"]["correlation"]
    unlinked = aiprof.load(no_flow.write(tmp_path / "u.json"))
    assert isinstance(unlinked, Trace)
    assert int(links.launcher(unlinked)[int(unlinked.kernels().rows[0])]) == -1
