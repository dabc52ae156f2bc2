"""torch.compile in the timeline (aiprof.analysis.compile): compile work is its own bucket of the step,
the buckets still add up, and each compilation gets its compile id and, for a recompile, its cause."""

from __future__ import annotations

from pathlib import Path

import aiprof
import msgspec
import pytest

from aiprof.analysis.compile import CompileReport, compile_events, compile_section
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES, account
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

US = 1000


def _load(b: TraceBuilder, tmp_path: Path) -> Trace:
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    return trace


def _compile(b: TraceBuilder, ts: float, dur: float, ident: str) -> None:
    """The nest torch 2.13 records for one compile of frame/attempt ``ident``."""
    b.cpu_op("dynamo", ts=ts, dur=dur)
    b.annotation(f"dynamo_data: compile_id={ident}", ts=ts + 0.5, dur=0.2)
    b.cpu_op("entire_frame_compile", ts=ts + 1, dur=dur - 2)
    b.cpu_op("aten::empty_strided", ts=ts + 2, dur=1)  # fake-tensor work: compiling, not compute
    b.cpu_op("async_compile.wait", ts=ts + 4, dur=dur - 6)


def _region(b: TraceBuilder, ts: float, ident: str, shape: list[int], dtype: str = "float") -> None:
    b.cpu_op("TorchDynamo Cache Lookup", ts=ts, dur=1)
    b.cpu_op(f"Torch-Compiled Region: {ident}", ts=ts + 2, dur=10)
    b.cpu_op("CompiledFunction", ts=ts + 3, dur=8, shapes=[[16, 16], [16], shape], dtypes=["float", "float", dtype])
    b.cpu_op("aten::addmm", ts=ts + 4, dur=5)


def _recompiling_cpu_trace(tmp_path: Path) -> Trace:
    """Three steps: each compiles frame 0 again for a new batch size (compile 0/0, 0/1, 0/2), a dtype
    change in the fourth (0/3), and the same inputs in the fifth (0/4: a guard on a Python value)."""
    b = TraceBuilder()
    inputs = [([4, 16], "float"), ([5, 16], "float"), ([6, 16], "float"), ([6, 16], "c10::BFloat16"), ([6, 16], "c10::BFloat16")]
    for i, (shape, dtype) in enumerate(inputs):
        base = i * 1000
        b.step(i, ts=base, dur=1000)
        b.cpu_op("TorchDynamo Cache Lookup", ts=base + 10, dur=1)
        _compile(b, base + 20, 900, f"0/{i}")
        b.cpu_op(f"Torch-Compiled Region: 0/{i}", ts=base + 930, dur=10)
        b.cpu_op("CompiledFunction", ts=base + 931, dur=8, shapes=[[16, 16], [16], shape], dtypes=["float", "float", dtype])
        b.cpu_op("aten::addmm", ts=base + 932, dur=5)
    return _load(b, tmp_path)


def test_compile_is_a_bucket_of_its_own_on_the_cpu_and_the_buckets_add_up(tmp_path: Path) -> None:
    trace = _recompiling_cpu_trace(tmp_path)
    (device,) = account(trace)
    assert device.device == "cpu"
    for step in device.steps:
        assert sum(step.breakdown_ns[b] for b in BUCKETS) == step.duration_ns
        assert sum(step.idle_causes_ns[c] for c in IDLE_CAUSES) == step.breakdown_ns["idle"]
        assert step.breakdown_ns["compile"] == 900 * US  # the dynamo span, aten ops inside it included
        assert step.breakdown_ns["compute"] == 11 * US  # the guard check (1 µs) and the compiled region (10 µs)
        assert step.breakdown_ns["compute"] + step.breakdown_ns["compile"] < step.duration_ns


def test_each_compile_gets_its_id_and_a_recompile_its_cause(tmp_path: Path) -> None:
    events = compile_events(_recompiling_cpu_trace(tmp_path))
    assert [(e.frame, e.attempt, e.recompile) for e in events] == [(0, i, i > 0) for i in range(5)]
    assert [e.cause for e in events] == ["first compile", "shape", "shape", "dtype", "guard"]
    assert events[1].detail == "input 2: [4, 16] -> [5, 16]"
    assert events[3].detail == "input 2: float -> c10::BFloat16"
    assert all(e.dur_ns == 900 * US for e in events)
    section = compile_section(_recompiling_cpu_trace(tmp_path))
    assert section.compiles == 5 and section.recompiles == 4 and section.frames == 1
    assert section.compile_ns == 5 * 900 * US
    assert section.cache_lookups and section.cache_lookups.calls == 5
    assert section.regions and [g.compile_id for g in section.regions.graphs] == [f"0/{i}" for i in range(5)]


def test_on_a_gpu_compile_is_host_compile_time_with_the_device_idle(tmp_path: Path) -> None:
    """A kernel still running while the host compiles is compute; only the idle part is compile."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=1000)
    op = b.cpu_op("aten::mm", ts=10, dur=10)
    b.launch(op, ts=11, dur=2, kernel_ts=20, kernel_dur=80)  # runs 20..100
    _compile(b, 50, 800, "0/1")  # compiles 50..850
    op2 = b.cpu_op("aten::add", ts=860, dur=10)
    b.launch(op2, ts=861, dur=2, kernel="add_kernel", kernel_ts=870, kernel_dur=20)
    trace = _load(b, tmp_path)
    (device,) = account(trace)
    (step,) = device.steps
    assert device.device == "gpu:0"
    assert step.breakdown_ns["compute"] == 100 * US
    assert step.breakdown_ns["compile"] == 750 * US  # 100..850
    assert sum(step.breakdown_ns[b] for b in BUCKETS) == step.duration_ns
    assert sum(step.idle_causes_ns.values()) == step.breakdown_ns["idle"]


def test_names_only_look_like_compile_work_when_they_are_dynamos(tmp_path: Path) -> None:
    """A user's range named like a phase, a Python frame of Triton's compiler, and a compiled region
    running are not compilation."""
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.annotation("compile_dataset", ts=1, dur=20)
    b.python("triton/compiler/compiler.py(300): compile", ts=30, dur=20)
    _region(b, 60, "0/0", [4, 16])
    trace = _load(b, tmp_path)
    (device,) = account(trace)
    assert device.steps[0].breakdown_ns["compile"] == 0
    assert compile_events(trace) == []
    section = compile_section(trace)
    assert section.compiled and section.compiles == 0 and section.regions and section.regions.calls == 1


def test_a_trace_without_torch_compile_has_no_compile_section(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mm", ts=10, dur=10)
    section = compile_section(_load(b, tmp_path))
    assert section == CompileReport(compiled=False)
    assert msgspec.json.encode(section) == b'{"compiled":false}'


def test_every_report_format_shows_compile_time_and_the_recompiles(tmp_path: Path) -> None:
    from aiprof import app
    from aiprof.report import common

    path = tmp_path / "t.json"
    b = TraceBuilder()
    for i, shape in enumerate(([4, 16], [5, 16])):
        b.step(i, ts=i * 1000, dur=1000)
        _compile(b, i * 1000 + 20, 900, f"0/{i}")
        _region(b, i * 1000 + 930, f"0/{i}", shape)
    b.write(path)
    doc = app.analyze([path])
    assert "compile" in common.buckets(doc)
    for fmt in ("terminal", "md", "html"):
        text = app.render(doc, fmt)
        assert "compiling" in text and "1 recompilation" in text, fmt
        assert "16] -&gt; " in text if fmt == "html" else "5, 16" in text
    assert app.render(doc, "json").count('"compile_id": "0/1"') >= 1


def test_reports_without_compile_work_show_no_compile_row(tmp_path: Path) -> None:
    from aiprof import app
    from aiprof.report import common

    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mm", ts=10, dur=10)
    doc = app.analyze([b.write(tmp_path / "t.json")])
    assert "compile" not in common.buckets(doc)
    assert "compiling" not in app.render(doc, "terminal")


def test_inductor_kernel_names_split_into_their_aten_ops() -> None:
    from aiprof.analysis.inductor import arithmetic_ops, fused_ops_of_name, split_ops

    assert split_ops("_to_copy_add_native_layer_norm") == ("_to_copy", "add", "native_layer_norm")
    assert split_ops("_unsafe_view_clone_slice_transpose") == ("_unsafe_view", "clone", "slice", "transpose")
    assert split_ops("constant_pad_nd_moe_forward") == ("constant_pad_nd", "moe_forward")
    assert split_ops("_foo_bar") == ("_foo", "bar")  # an unknown ATen name with a leading underscore
    assert fused_ops_of_name("triton_red_fused_add_mean_mul_pow_rsqrt_0") == ("reduction", ("add", "mean", "mul", "pow", "rsqrt"))
    assert fused_ops_of_name("cpp_fused_add_mul_relu_3") == ("cpp", ("add", "mul", "relu"))
    assert fused_ops_of_name("triton_poi_fused_0") is None  # names no op
    assert fused_ops_of_name("triton__0d1d2d") is None  # numbered (pre-2.1): the launching op tells
    assert fused_ops_of_name("sgemm_128x64_nn") is None
    assert arithmetic_ops(("_unsafe_view", "mul", "silu", "clone")) == ("mul", "silu")


def test_a_fused_kernel_costs_one_flop_per_element_per_arithmetic_op() -> None:
    from aiprof.roofline.cost import op_cost

    silu = op_cost("triton_poi_fused__unsafe_view_mul_silu_2", [[8, 4096, 8192], [32768, 8192], []],
                   ["c10::BFloat16", "c10::BFloat16", "Scalar"])
    copy = op_cost("triton_poi_fused__to_copy_clone_1", [[8, 4096, 8192], [32768, 8192], []],
                   ["c10::BFloat16", "c10::BFloat16", "Scalar"])
    assert silu is not None and copy is not None
    assert silu.flops == 2 * 8 * 4096 * 8192 and copy.flops == 8 * 4096 * 8192  # mul + silu; a copy: the floor of 1
    assert silu.bytes == copy.bytes == 2 * 2 * 8 * 4096 * 8192


def test_graph_replays_against_eager_launches_per_step(tmp_path: Path) -> None:
    """reduce-overhead: the compiled region replays a graph instead of launching its kernels; a launch
    recorded into a graph under capture was not executed; a capture in a later step is a re-recording."""
    from aiprof.analysis.compile import graph_launches

    b = TraceBuilder()
    for i in range(3):
        base = i * 1000
        b.step(i, ts=base, dur=1000)
        b.cpu_op(f"Torch-Compiled Region: 0/{i}", ts=base + 10, dur=500)
        if i != 1:  # steps 0 and 2 record the graph: capture, a launch into it, then the replay
            b.runtime("cudaStreamBeginCapture", ts=base + 20, dur=2)
            b.runtime("cudaLaunchKernel", ts=base + 30, dur=2)
            b.runtime("cudaStreamEndCapture", ts=base + 40, dur=2)
        b.runtime("cudaGraphLaunch", ts=base + 100, dur=5)
        b.kernel("replayed_kernel", ts=base + 110, dur=50)
        op = b.cpu_op("aten::add", ts=base + 600, dur=10)
        b.launch(op, kernel="add_kernel", kernel_ts=base + 620, kernel_dur=10)
    g = graph_launches(_load(b, tmp_path))
    assert g is not None
    assert [(s.graph_replays, s.eager_launches, s.captures) for s in g.steps] == [(1, 1, 1), (1, 1, 0), (1, 1, 1)]
    assert g.replay_share == 0.5 and g.recaptured_steps == 1


# --- Dynamo's compile records from the run directory (aiprof.capture.dynamo) --------------------------
@pytest.mark.parametrize(("text", "cause"), [
    ("1/0: tensor 'x' size mismatch at index 0. expected 4, actual 5", "shape"),
    ("0/0: tensor 'L['x']' stride mismatch at index 0. expected 16, actual 32", "shape"),
    ("0/1: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU), actual ...; dtype mismatch. "
     "expected Float, actual Half", "dtype"),
    ("0/0: L['n'] == 3", "guard"),
    ("0/0: ___check_obj_id(G['flag'], 9781568)", "guard"),
    ("0/0: GLOBAL_STATE changed: grad_mode ", "guard"),
    ("Unable to find recompilation reasons", "unknown"),
    ("", "unknown"),
])
def test_guard_cause_reads_dynamos_wording(text: str, cause: str) -> None:
    from aiprof.analysis.compile import guard_cause

    assert guard_cause(text) == cause


def test_recompile_reasons_file_bad_input_is_empty(tmp_path: Path) -> None:
    from aiprof.rundir import read_recompile_reasons

    path = tmp_path / "dynamo.rank0.json"
    assert read_recompile_reasons(path) == {}  # missing
    path.write_text("{not json")
    assert read_recompile_reasons(path) == {}
    path.write_text('{"format": "other", "compiles": []}')
    assert read_recompile_reasons(path) == {}
    path.write_text('{"format": "aiprof-dynamo-1", "compiles": [{"compile_id": "0/1", "recompile_reason": "r"},'
                    ' {"compile_id": 3}, "x", {"compile_id": "0/0"}]}')
    assert read_recompile_reasons(path) == {"0/1": "r"}
