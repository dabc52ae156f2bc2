"""Timeline accounting and idle attribution on tiny hand-built traces with known answers."""

from __future__ import annotations

from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.steps import step_windows
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES, account
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

US = 1000


def _load(b: TraceBuilder, tmp_path: Path, name: str = "t.json") -> Trace:
    trace = aiprof.load(b.write(tmp_path / name))
    assert isinstance(trace, Trace)
    return trace


@pytest.mark.parametrize("schema", ["new", "legacy"])
def test_every_bucket_and_cause_on_a_planted_step(tmp_path: Path, schema: str) -> None:
    b = TraceBuilder(schema=schema)  # type: ignore[arg-type]
    b.step(0, ts=0, dur=100)
    b.dataloader(ts=0, dur=10)
    a = b.cpu_op("aten::mm", ts=10, dur=4)
    b.launch(a, ts=11, dur=2, kernel_ts=14, kernel_dur=20, stream=7)  # pending 11..14 while idle
    op_b = b.cpu_op("aten::add", ts=14, dur=4)
    b.launch(op_b, ts=15, dur=2, kernel="add_kernel", kernel_ts=24, kernel_dur=20, stream=8)
    c = b.cpu_op("c10d::allreduce_", ts=18, dur=4)
    b.launch(c, ts=19, dur=2, kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL", kernel_ts=40, kernel_dur=20, stream=9)
    d = b.cpu_op("aten::copy_", ts=22, dur=4)
    b.memcpy(d, ts=58, dur=12, nbytes=1 << 20, stream=7)
    b.runtime("cudaStreamSynchronize", ts=26, dur=46)
    e = b.cpu_op("aten::zero_", ts=78, dur=8)
    b.launch(e, ts=80, dur=2, kind="memset", kernel="Memset (Device)", kernel_ts=90, kernel_dur=5, stream=7)
    trace = _load(b, tmp_path)

    (device,) = account(trace)
    (step,) = device.steps
    assert device.device == "gpu:0"
    assert step.duration_ns == 100 * US
    assert step.breakdown_ns == {
        "compute": 30 * US,  # k1 ∪ k2 = 14..44 (two streams, merged, not summed)
        "communication": 16 * US,  # nccl 40..60 minus compute until 44
        "memcpy": 10 * US,  # 58..70 minus comm until 60
        "memset": 5 * US,
        "compile": 0,  # no torch.compile work
        "idle": 39 * US,
    }
    assert step.idle_causes_ns == {
        "data_loading": 10 * US,  # 0..10 inside DataLoader __next__
        "host": 6 * US,  # 10..11 in aten::mm before the launch, 95..100 in the step
        "sync": 10 * US,  # 70..72 in cudaStreamSynchronize, 72..80 until the next launch
        "launch": 13 * US,  # 11..14 and 80..90: launched, not started
        "collective_wait": 0,
        "unknown": 0,
    }
    assert device.totals.gpu_utilization == pytest.approx(46 / 100)


def test_steps_are_stretched_to_their_gpu_work_and_never_overlap(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(1, ts=0, dur=50)
    op = b.cpu_op("aten::mm", ts=5, dur=10)
    b.launch(op, ts=6, dur=2, kernel_ts=40, kernel_dur=30)  # ends at 70, after the CPU step
    b.step(2, ts=50, dur=50)
    op2 = b.cpu_op("aten::mm", ts=60, dur=10)
    b.launch(op2, ts=61, dur=2, kernel_ts=75, kernel_dur=10)
    trace = _load(b, tmp_path)
    w1, w2 = step_windows(trace)
    assert (w1.start_ns, w1.end_ns) == (0, 70 * US)
    assert (w2.start_ns, w2.end_ns) == (70 * US, 100 * US)
    assert (w1.number, w2.number) == (1, 2)
    (device,) = account(trace)
    assert [s.breakdown_ns["compute"] for s in device.steps] == [30 * US, 10 * US]


def test_no_steps_gives_one_window_over_the_activity(tmp_path: Path) -> None:
    b = TraceBuilder()
    op = b.cpu_op("aten::mm", ts=10, dur=10)
    b.launch(op, ts=11, dur=2, kernel_ts=30, kernel_dur=10)
    trace = _load(b, tmp_path)
    (window,) = step_windows(trace)
    assert (window.start_ns, window.end_ns, window.number) == (10 * US, 40 * US, -1)


def test_cpu_only_trace_uses_the_cpu_as_the_device(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.dataloader(ts=0, dur=30)
    b.cpu_op("aten::stack", ts=5, dur=10)  # collate work inside the DataLoader counts as data loading
    b.cpu_op("aten::mm", ts=40, dur=20)
    b.annotation("gloo:all_reduce", ts=70, dur=20)
    trace = _load(b, tmp_path)
    (device,) = account(trace)
    (step,) = device.steps
    assert device.device == "cpu"
    assert step.breakdown_ns["compute"] == 20 * US
    assert step.breakdown_ns["communication"] == 20 * US
    assert step.idle_causes_ns["data_loading"] == 30 * US
    assert step.idle_causes_ns["host"] == 30 * US
    assert sum(step.breakdown_ns.values()) == step.duration_ns


def test_two_devices_are_accounted_separately(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    op = b.cpu_op("aten::mm", ts=5, dur=10)
    b.launch(op, ts=6, dur=2, kernel_ts=10, kernel_dur=40, device=0)
    b.launch(op, ts=8, dur=2, kernel_ts=20, kernel_dur=10, device=1)
    trace = _load(b, tmp_path)
    d0, d1 = account(trace)
    assert (d0.device, d1.device) == ("gpu:0", "gpu:1")
    assert d0.steps[0].breakdown_ns["compute"] == 40 * US
    assert d1.steps[0].breakdown_ns["compute"] == 10 * US


def test_gpu_only_trace_attributes_idle_to_unknown(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.kernel("k", ts=0, dur=10)
    b.kernel("k", ts=30, dur=10)
    trace = _load(b, tmp_path)
    (device,) = account(trace)
    (step,) = device.steps
    assert step.breakdown_ns["idle"] == 20 * US
    assert step.idle_causes_ns["unknown"] == 20 * US
    assert set(step.idle_causes_ns) == set(IDLE_CAUSES)
    assert set(step.breakdown_ns) == set(BUCKETS)


def test_next_launch_lookup_matches_a_per_thread_search() -> None:
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from aiprof.analysis.timeline import _next_on_thread, _next_on_thread_slow

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), min_size=1, max_size=12),
        st.lists(st.tuples(st.integers(0, 4), st.integers(0, 60)), min_size=1, max_size=6),
    )
    def check(entries: list[tuple[int, int]], queries: list[tuple[int, int]]) -> None:
        keys = np.array([k for k, _ in entries], dtype=np.int64)
        times = np.array([t for _, t in entries], dtype=np.int64)
        order = np.lexsort((times, keys))
        keys, times = keys[order], times[order]
        qk = np.array([k for k, _ in queries], dtype=np.int64)
        qt = np.array([t for _, t in queries], dtype=np.int64)
        assert _next_on_thread(keys, times, qk, qt).tolist() == _next_on_thread_slow(keys, times, qk, qt).tolist()

    check()


def test_idle_cause_sets_reuse_the_accounting_and_equal_a_fresh_computation(tmp_path: Path) -> None:
    """The rules read the cause sets the accounting built (not a second computation); a cache must not
    change them, and other windows are computed afresh."""
    import numpy as np

    from aiprof.analysis.timeline import idle_cause_sets

    b = TraceBuilder()
    for i in range(2):
        base = i * 100
        b.step(i, ts=base, dur=100)
        a = b.cpu_op("aten::mm", ts=base + 10, dur=4)
        b.launch(a, ts=base + 11, dur=2, kernel_ts=base + 14, kernel_dur=20)
        b.runtime("cudaStreamSynchronize", ts=base + 40, dur=10)
    trace = _load(b, tmp_path)
    windows = step_windows(trace)
    account(trace, windows)
    reused = idle_cause_sets(trace, windows, 0)
    assert reused.keys() == {*IDLE_CAUSES, "launch_stall"}
    trace.cache.clear()
    fresh = idle_cause_sets(trace, windows, 0)
    assert all(np.array_equal(reused[k][0], fresh[k][0]) and np.array_equal(reused[k][1], fresh[k][1]) for k in fresh)
    assert int((reused["sync"][1] - reused["sync"][0]).sum()) > 0
    account(trace, windows)
    one = idle_cause_sets(trace, windows[:1], 0)  # other windows: not the cached sets
    assert int((one["sync"][1] - one["sync"][0]).sum()) < int((reused["sync"][1] - reused["sync"][0]).sum())
