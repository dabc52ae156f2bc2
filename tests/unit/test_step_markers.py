"""Step windows from iteration markers other than ProfilerStep, the steady steps the rules see (warm-up
and one-time costs left out), and the one-time cost detection behind ``cold_start``."""

from __future__ import annotations

from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.analysis.steps import step_source, step_windows
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES, account
from aiprof.rules.views.one_time import one_time_costs
from aiprof.rules.context import RankContext
from aiprof.rules.options import DEFAULT_OPTIONS
from aiprof.trace.model import Trace
from kineto_builder import TraceBuilder

US = 1000


def _load(b: TraceBuilder, tmp_path: Path, name: str = "t.json") -> Trace:
    trace = aiprof.load(b.write(tmp_path / name))
    assert isinstance(trace, Trace)
    return trace


def _work(b: TraceBuilder, t0: float, kernel_dur: float = 500) -> None:
    op = b.cpu_op("aten::mm", ts=t0 + 5, dur=10)
    b.launch(op, kernel="sgemm", kernel_ts=t0 + 12, kernel_dur=kernel_dur, grid=(264, 1, 1))


def _assert_partition(trace: Trace) -> None:
    """Windows in order, never overlapping, and every ns of each accounted once."""
    windows = step_windows(trace)
    for a, b in zip(windows, windows[1:]):
        assert a.end_ns <= b.start_ns
    for device in account(trace, windows):
        for s in device.steps:
            assert sum(s.breakdown_ns[k] for k in BUCKETS) == s.duration_ns
            assert sum(s.idle_causes_ns[k] for k in IDLE_CAUSES) == s.breakdown_ns["idle"]


def test_profiler_step_comes_first(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        b.step(i, ts=i * 1000, dur=1000)
        _work(b, i * 1000)
        b.annotation("Optimizer.step#SGD.step", ts=i * 1000 + 900, dur=50)
    windows = step_windows(_load(b, tmp_path))
    assert [w.name for w in windows] == [f"ProfilerStep#{i}" for i in range(4)]
    assert step_source(windows) == "ProfilerStep"


def test_optimizer_step_ends_each_iteration(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.cpu_op("aten::empty", ts=0, dur=5)  # the first host activity: the first iteration starts here
    for i in range(5):
        t0 = 100 + i * 1000
        _work(b, t0, kernel_dur=990)  # the last kernel of each iteration ends after its optimizer step
        b.annotation("Optimizer.step#AdamW.step", ts=t0 + 900, dur=50)
    trace = _load(b, tmp_path)
    windows = step_windows(trace)
    assert step_source(windows) == "Optimizer.step"
    assert [w.name for w in windows] == [f"Iteration#{i}" for i in range(5)]
    ns = 1000
    assert windows[0].cpu_start_ns == trace.columns.ts.min() and windows[0].cpu_end_ns - windows[0].cpu_start_ns == 1050 * ns
    # Iteration i: from the end of optimizer step i-1 to the end of its own, stretched to its GPU work.
    assert windows[1].cpu_end_ns - windows[1].cpu_start_ns == 1000 * ns
    assert windows[1].start_ns == windows[0].end_ns == windows[0].gpu_end_ns
    _assert_partition(trace)


def test_a_nested_duplicate_marker_counts_once(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        t0 = i * 1000
        _work(b, t0)
        b.annotation("Optimizer.step#SGD.step", ts=t0 + 900, dur=50)
        b.cpu_op("Optimizer.step#SGD.step", ts=t0 + 901, dur=40)  # recorded again inside itself
    assert len(step_windows(_load(b, tmp_path))) == 4


def test_dataloader_calls_start_iterations(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(5):
        b.dataloader(ts=i * 1000 + 10, dur=300)
        _work(b, i * 1000 + 320)
    trace = _load(b, tmp_path)
    windows = step_windows(trace)
    assert step_source(windows) == "DataLoader"
    assert len(windows) == 4  # the last call's iteration has no known end
    assert [w.cpu_end_ns - w.cpu_start_ns for w in windows] == [1000 * US] * 4
    _assert_partition(trace)


def test_spanning_annotation_with_numbered_names_is_the_step(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(4):
        b.annotation(f"train_step_{i}", ts=i * 1200, dur=1000)
        _work(b, i * 1200)
    windows = step_windows(_load(b, tmp_path))
    assert step_source(windows) == "annotation train_step"
    assert [w.cpu_end_ns - w.cpu_start_ns for w in windows] == [1000 * US] * 4  # each span, like ProfilerStep


def test_a_short_repeating_annotation_starts_iterations(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(5):
        b.annotation("log_metrics", ts=i * 1000, dur=20)
        _work(b, i * 1000 + 20)
    windows = step_windows(_load(b, tmp_path))
    assert step_source(windows) == "annotation log_metrics" and len(windows) == 4


@pytest.mark.parametrize(
    "starts",
    [
        [0, 1000],  # twice only
        [0, 100, 200, 5000, 5100, 30000],  # no regular pace
        [0, 10, 20],  # a burst at the start of a long trace: covers too little of it
    ],
    ids=["too_few", "irregular", "too_little_coverage"],
)
def test_implausible_markers_keep_one_window(tmp_path: Path, starts: list[int]) -> None:
    b = TraceBuilder()
    for t in starts:
        b.annotation("Optimizer.step#SGD.step", ts=t, dur=5)
    for i in range(40):
        _work(b, i * 1000)
    windows = step_windows(_load(b, tmp_path))
    assert step_source(windows) == "whole trace" and len(windows) == 1


def test_a_marker_running_on_several_threads_is_no_iteration(tmp_path: Path) -> None:
    """Requests served concurrently by worker threads are not a training loop."""
    b = TraceBuilder()
    for i in range(6):
        for tid in (11, 12, 13):
            b.annotation("processRequest", ts=i * 1000 + tid, dur=800, tid=tid)
        _work(b, i * 1000)
    assert step_source(step_windows(_load(b, tmp_path))) == "whole trace"


def test_module_forward_of_the_outer_module(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(5):
        outer = b.python("nn.Module: Model_0", ts=i * 1000, dur=100)
        b.python("nn.Module: Linear_0", ts=i * 1000 + 10, dur=30, parent=outer)
        _work(b, i * 1000)
    windows = step_windows(_load(b, tmp_path))
    assert step_source(windows) == "module forward Model_0" and len(windows) == 4


# ---------------------------------------------------------------------------------------------------
# Steady steps and one-time costs
# ---------------------------------------------------------------------------------------------------
def _context(trace: Trace) -> RankContext:
    return RankContext(trace, analyze_trace(trace, sections={}), DEFAULT_OPTIONS)


def test_first_step_kept_unless_it_is_an_outlier(tmp_path: Path) -> None:
    even = TraceBuilder()
    for i in range(5):
        even.step(i, ts=i * 1000, dur=1000)
        _work(even, i * 1000, kernel_dur=900)
    ctx = _context(_load(even, tmp_path, "even.json"))
    assert len(ctx.steps) == 5 and ctx.steady_note == ""
    slow = TraceBuilder()
    slow.step(0, ts=0, dur=5000)
    _work(slow, 0)
    for i in range(1, 5):
        slow.step(i, ts=4000 + i * 1000, dur=1000)
        _work(slow, 4000 + i * 1000, kernel_dur=900)
    ctx = _context(_load(slow, tmp_path, "slow.json"))
    assert [s.name for s in ctx.steps] == [f"ProfilerStep#{i}" for i in range(1, 5)]
    assert "warm-up" in ctx.steady_note and "5.0x" in ctx.steady_note


def test_first_of_two_steps_dropped_when_it_holds_a_one_time_cost(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=300_000)
    op = b.cpu_op("aten::mm", ts=5, dur=250_020)
    b.launch(op, kernel="sgemm", ts=10, dur=250_000, kernel_ts=250_015, kernel_dur=500)
    b.step(1, ts=300_000, dur=1000)
    _work(b, 300_000, kernel_dur=900)
    ctx = _context(_load(b, tmp_path))
    assert [s.name for s in ctx.steps] == ["ProfilerStep#1"]
    assert "one-time" in ctx.steady_note


def test_single_window_without_its_one_time_costs(tmp_path: Path) -> None:
    """The 200 ms stall is cut out; what is left is accounted as one step and adds up."""
    b = TraceBuilder()
    first = b.cpu_op("aten::zeros", ts=0, dur=200_020)
    b.launch(first, kernel="fill", ts=5, dur=200_000, kernel_ts=200_010, kernel_dur=5)
    for i in range(30):
        _work(b, 200_020 + i * 1000, kernel_dur=980)
    trace = _load(b, tmp_path)
    ctx = _context(trace)
    (steady,) = ctx.steps
    assert steady.duration_ns < ctx.device.steps[0].duration_ns - 199_000 * US
    assert sum(steady.breakdown_ns[k] for k in BUCKETS) == steady.duration_ns
    assert ctx.device.steps[0].breakdown_ns["idle"] > 199_000 * US  # what the idle rules would have seen
    assert steady.breakdown_ns["idle"] < 1000 * US
    lo, hi = ctx.window
    assert hi == ctx.device.steps[0].start_ns + ctx.device.steps[0].duration_ns
    starts, ends = ctx.steady_set  # the span less the cut: what rules clip their intervals to
    assert int((ends - starts).sum()) == steady.duration_ns
    from aiprof.trace.model import Kind

    launches = ctx.in_window(trace.rows_of(Kind.RUNTIME))
    assert int(trace.columns.dur[launches].max()) < 1000 * US  # the stalled launch is no steady evidence


def test_stalls_that_are_not_one_time(tmp_path: Path) -> None:
    """A long launch in a steady step after the first, a sync waiting for a busy GPU, and a call that is
    long for every call of its name are not one-time costs."""
    b = TraceBuilder()
    for i in range(5):
        t0 = i * 100_000
        b.step(i, ts=t0, dur=100_000)
        op = b.cpu_op("aten::mm", ts=t0 + 5, dur=60_010)
        long_launch = 50_000 if i == 3 else 2
        b.launch(op, kernel="sgemm", ts=t0 + 10, dur=long_launch, kernel_ts=t0 + 10 + long_launch + 5,
                 kernel_dur=30_000, grid=(264, 1, 1))
        b.runtime("cudaStreamSynchronize", ts=t0 + long_launch + 20, dur=29_990)  # waits for the busy kernel
        b.runtime("cudaMalloc", ts=t0 + 70_000, dur=15_000)  # every step: churn, not a start-up cost
    trace = _load(b, tmp_path)
    assert one_time_costs(trace, step_windows(trace)) == []


def test_cudnn_autotune_burst_is_one_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    conv = b.cpu_op("aten::cudnn_convolution", ts=0, dur=3000)
    ext = int(conv["args"]["External id"])
    for k in range(30):
        b.runtime("cudaEventRecord", ts=10 + k * 90, dur=2, external_id=ext)
        b.launch(conv, kernel=f"trial_{k}", ts=13 + k * 90, dur=3, kernel_ts=20 + k * 90, kernel_dur=30)
        b.runtime("cudaEventSynchronize", ts=20 + k * 90, dur=40, external_id=ext)
    for i in range(20):
        c2 = b.cpu_op("aten::cudnn_convolution", ts=3100 + i * 1000, dur=20)
        b.launch(c2, kernel="best_algo", kernel_ts=3110 + i * 1000, kernel_dur=980, grid=(264, 1, 1))
    trace = _load(b, tmp_path)
    (cost,) = one_time_costs(trace, step_windows(trace))
    assert cost.kind == "cudnn autotuning" and cost.calls == 60
    assert cost.end_ns >= trace.columns.ts.min() + 3000 * US


# ---------------------------------------------------------------------------------------------------
# The marker in the report
# ---------------------------------------------------------------------------------------------------
def test_the_report_says_which_marker_made_the_steps(tmp_path: Path) -> None:
    import json

    import jsonschema
    from importlib import resources

    from aiprof.analysis.run import RunAnalysis
    from aiprof.report.document import build_document
    from aiprof.report.json_report import JsonRenderer
    from aiprof.report.terminal import TerminalRenderer

    b = TraceBuilder()
    for i in range(4):
        _work(b, i * 1000)
        b.annotation("Optimizer.step#SGD.step", ts=i * 1000 + 900, dur=50)
    trace = _load(b, tmp_path)
    analysis = analyze_trace(trace, sections={})
    doc = build_document(RunAnalysis([analysis], [str(trace.path)]))
    assert doc.summary.step_source == doc.ranks[0].step_source == "Optimizer.step"
    schema = json.loads(resources.files("aiprof").joinpath("data/report.schema.json").read_text())
    jsonschema.validate(json.loads(JsonRenderer().render(doc)), schema)
    assert "4 steps (from Optimizer.step)" in TerminalRenderer(width=100).render(doc).splitlines()[0]
