"""Idle classes: launch overhead vs one long stall, dispatch overhead vs Python outside any op, and
element-wise .item() loops on a CPU-only run (no device there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import Case, case
from kineto_builder import TraceBuilder


def _tiny_kernel_steps(b: TraceBuilder, steps: int, kernels: int, *, t0: float = 0.0) -> float:
    """``steps`` ProfilerSteps of ``kernels`` 3 µs kernels, each launched by a 4 µs cudaLaunchKernel inside a
    6 µs aten::add; one kernel every 8 µs, so the GPU waits ~5 µs on each launch. Returns the end time."""
    t = t0
    for s in range(steps):
        start = t
        step = b.step(s, ts=start, dur=kernels * 8 + 20)
        for i in range(kernels):
            op = b.cpu_op("aten::add", ts=start + 2 + i * 8, dur=6)
            b.launch(op, kernel="void at::native::vectorized_elementwise_kernel<4>", kernel_ts=start + 8 + i * 8,
                     kernel_dur=3, dur=4)
        t = start + float(step["dur"]) + 5
    return t


def _launch_bound(tmp: Path) -> Path:
    b = TraceBuilder()
    _tiny_kernel_steps(b, 5, 400)
    return b.write(tmp / "launch_bound.json")


def _slow_call_steps(tmp: Path, api: str, name: str) -> Path:
    """One window (no ProfilerStep, as export_chrome_trace of a run writes it) of four iterations, each a
    burst of 30 tiny kernels then a 39 ms GEMM; in the third, one 600 ms call (``api``) whose GPU work
    starts only when it returns: the device idles 600 ms with that launch 'pending'."""
    b = TraceBuilder()
    t0 = 0.0
    for s in range(4):
        for i in range(30):
            op = b.cpu_op("aten::add", ts=t0 + 2 + i * 8, dur=6)
            b.launch(op, kernel="void at::native::vectorized_elementwise_kernel<4>", kernel_ts=t0 + 8 + i * 8,
                     kernel_dur=8, dur=4)
        op = b.cpu_op("aten::mm", ts=t0 + 250, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 270, kernel_dur=39_000, grid=(264, 1, 1))
        t0 += 39_280
        if s == 2:
            op = b.cpu_op("aten::copy_" if "Memcpy" in api else "aten::conv2d", ts=t0, dur=600_100)
            kind: Any = "memcpy" if "Memcpy" in api else "kernel"
            b.launch(op, kernel=name, kernel_ts=t0 + 600_020, kernel_dur=50, ts=t0 + 10, dur=600_000,
                     api=api, kind=kind, nbytes=4096)
            t0 += 600_100
    return b.write(tmp / "stall.json")


def _launch_stall(tmp: Path) -> Path:
    return _slow_call_steps(tmp, "cudaLaunchKernel", "implicit_convolve_sgemm")


def _repeat_launch_stall(tmp: Path) -> Path:
    """The same 600 ms launch, of a kernel the loop already launched 90 times in µs: not module loading
    (a first launch), so not a cold start — a stall in a steady-state call (the host lost its CPU, a
    lock, a driver hiccup)."""
    return _slow_call_steps(tmp, "cudaLaunchKernel", "void at::native::vectorized_elementwise_kernel<4>")


def _blocking_copy(tmp: Path) -> Path:
    return _slow_call_steps(tmp, "cudaMemcpy", "Memcpy DtoH (Device -> Pageable)")


def _cpu_steps(tmp: Path, body: Any, name: str) -> Path:
    """A CPU-only trace (no device activity) of 5 ProfilerSteps whose content ``body(b, t0)`` writes and
    returns the step's length in µs."""
    b = TraceBuilder()
    t = 0.0
    for s in range(5):
        length = body(b, t)
        b.step(s, ts=t, dur=length)
        t += length + 10
    return b.write(tmp / name)


def _sleep_body(b: TraceBuilder, t0: float) -> float:
    """10 tiny ops, one 2 ms matmul, then 60 ms of Python with no op (a time.sleep in the loop)."""
    for i in range(10):
        b.cpu_op("aten::add_", ts=t0 + 5 + i * 15, dur=10)
    b.cpu_op("aten::mm", ts=t0 + 200, dur=2_000)
    frame = b.python("train.py(42): train_step", ts=t0 + 2_250, dur=60_100)
    b.python("<built-in function sleep>", ts=t0 + 2_260, dur=60_000, parent=frame)
    return 62_400.0


def _cpu_sleep(tmp: Path) -> Path:
    return _cpu_steps(tmp, _sleep_body, "cpu_sleep.json")


def _tiny_body(b: TraceBuilder, t0: float) -> float:
    """2,000 ops of 10 µs with 2 µs of Python between them (a loop over columns)."""
    for i in range(2000):
        b.cpu_op("aten::mul_", ts=t0 + 5 + i * 12, dur=10)
    return 2000 * 12 + 10.0


def _cpu_tiny(tmp: Path) -> Path:
    return _cpu_steps(tmp, _tiny_body, "cpu_tiny.json")


def _item_body(b: TraceBuilder, t0: float) -> float:
    """A 5 ms matmul, then a Python loop of 1,000 x (select 3 µs, item 5 µs) with 2 µs between ops."""
    b.cpu_op("aten::mm", ts=t0 + 5, dur=5_000)
    t = t0 + 5_020
    for _ in range(1000):
        b.cpu_op("aten::select", ts=t, dur=3)
        b.cpu_op("aten::item", ts=t + 5, dur=5)
        b.cpu_op("aten::_local_scalar_dense", ts=t + 6, dur=3)
        t += 12
    return t - t0 + 10


def _cpu_items(tmp: Path) -> Path:
    return _cpu_steps(tmp, _item_body, "cpu_items.json")


def _check_launch_bound(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["evidence"]["launch_gaps_per_step"] >= 300 and f["evidence"]["largest_share"] < 0.01, f["evidence"]
    assert f["evidence"]["launch_stall_ns_per_step"] == 0


def _check_stall(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["evidence"]["calls"][0]["call"] == "cudaLaunchKernel", f["evidence"]
    assert f["evidence"]["calls"][0]["op"] == "aten::conv2d"
    assert f["confidence"] == "low", "seen once: a warm-up reading is as likely as a steady-state one"


def _check_blocking(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["evidence"]["largest_call"] == "cudaMemcpy" and f["confidence"] == "low", f
    assert "pin_memory" in f["fix"]


def _check_sleep(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    gap = f["evidence"]["longest_gaps"][0]
    assert gap["source_line"] == "train.py(42): train_step" and gap["python"] == "<built-in function sleep>", gap
    assert "CUDA" not in f["fix"] and "torch.compile" not in f["fix"]
    assert "DataLoader" not in f["fix"], "no DataLoader in this loop: no advice about its workers"


def _check_tiny(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert "CUDA" not in f["fix"] and "reduce-overhead" not in f["fix"], "no GPU advice on a CPU-only run"


def _check_items(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert "device" not in f["title"].lower() and "round trip" not in f["title"].lower(), f["title"]
    assert "tolist()" in f["fix"] and "synchronize" not in f["fix"]
    assert f["evidence"]["item_calls_per_step"] == 1000


CASES: list[Case] = [
    case("launch_bound_many_tiny_kernels", _launch_bound, "launch_bound",
         "400 kernels of 3 µs per step, each waiting ~5 µs for its launch: the GPU idles in many short "
         "launch gaps (CUDA graphs / fusion remove them)", absent={"host_stall", "host_gaps"},
         check=_check_launch_bound),
    case("first_slow_launch_is_a_cold_start", _launch_stall, None,
         "one 600 ms cudaLaunchKernel, the first launch of its kernel (a lazily loaded module), holds ~all the "
         "idle that a 'launch pending' reading would call launch overhead: a one-time cost (cold_start), and "
         "what is left of the loop is healthy",
         present={"cold_start"}, absent={"launch_bound", "host_bound", "host_stall"}),
    case("repeated_kernel_slow_launch_is_a_stall", _repeat_launch_stall, "host_stall",
         "the same 600 ms launch of a kernel launched 90 times before in µs: no module to load, so a stall "
         "in one steady-state call, named with its op, not launch_bound and not a cold start",
         absent={"launch_bound", "host_bound", "cold_start"}, check=_check_stall),
    case("one_blocking_copy_is_sync_not_launch", _blocking_copy, "sync",
         "one 600 ms blocking cudaMemcpy holds the idle: the host blocked in a synchronising copy, named as "
         "one call with low confidence for the 'many .item()' reading, never launch-bound",
         absent={"launch_bound", "host_bound"}, check=_check_blocking),
    case("cpu_sleep_is_python_gaps", _cpu_sleep, "host_gaps",
         "a CPU run with a 60 ms sleep per step and 0.1 ms of tiny ops: the time is the script's own Python "
         "outside any op (point at the line), not framework overhead for torch.compile",
         absent={"host_bound"}, check=_check_sleep),
    case("cpu_many_tiny_ops_is_host_bound", _cpu_tiny, "host_bound",
         "2,000 ops of 10 µs per step: dispatch overhead of tiny ops (vectorise / compile), no long gaps",
         absent={"host_gaps", "sync"}, check=_check_tiny),
    case("cpu_item_loop_is_sync_worded_for_cpu", _cpu_items, "sync",
         "a Python loop of 1,000 select + .item() per step on a CPU-only run: element-wise tensor→Python "
         "conversions (convert with one tolist()), no device round trips to speak of",
         absent={"host_gaps"}, check=_check_items),
]
