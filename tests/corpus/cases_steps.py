"""Steps without ProfilerStep, and one-time costs (cold starts).

Traces captured without ``torch.profiler.schedule`` (``export_chrome_trace`` around a first pass, the
autograd-profiler era, a benchmark harness) have no ``ProfilerStep#N``: the iterations must come from the
markers they do have (``Optimizer.step#``, ``enumerate(DataLoader)``, the top module's forward, a user
annotation that repeats). And they often start cold: CUDA context creation, lazy module loading,
cuBLAS/cuDNN initialisation and cuDNN autotuning are paid once and must not read as launch overhead,
syncs or host overhead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import Case, case
from kineto_builder import TraceBuilder

MS = 1000  # µs per ms (the builder takes µs)
BUSY_KERNEL = "ampere_sgemm_128x64_nn"


def _busy_iteration(b: TraceBuilder, t0: float, dur: float = 1000) -> None:
    """One healthy iteration: a GEMM that keeps the GPU busy for nearly all of ``dur``."""
    op = b.cpu_op("aten::mm", ts=t0 + 5, dur=10)
    b.launch(op, kernel=BUSY_KERNEL, kernel_ts=t0 + 12, kernel_dur=dur - 14, grid=(264, 1, 1))


def _cold_start_then_healthy(tmp: Path) -> Path:
    """One window, no markers: the first launch creates the context (600 ms, GPU idle), then 120 ms of
    back-to-back GEMMs."""
    b = TraceBuilder()
    first = b.cpu_op("aten::zeros", ts=0, dur=600 * MS + 20)
    b.launch(first, kernel="fill_kernel", ts=5, dur=600 * MS, kernel_ts=600 * MS + 10, kernel_dur=5)
    for i in range(120):
        _busy_iteration(b, 600 * MS + 20 + i * 1000)
    return b.write(tmp / "cold_then_busy.json")


def _only_cold_start(tmp: Path) -> Path:
    """A first pass and nothing else: 1.2 s of context creation in the first cudaLaunchKernel, a 300 ms
    cuBLAS initialisation (cudaFree) in the first GEMM, then a few ms of small kernels."""
    b = TraceBuilder()
    first = b.cpu_op("aten::zeros", ts=0, dur=1200 * MS + 20)
    b.launch(first, kernel="fill_kernel", ts=5, dur=1200 * MS, kernel_ts=1200 * MS + 10, kernel_dur=5)
    t = 1200 * MS + 30
    mm = b.cpu_op("aten::mm", ts=t, dur=300 * MS + 30)
    b.runtime("cudaFree", ts=t + 5, dur=300 * MS, external_id=int(mm["args"]["External id"]))
    b.launch(mm, kernel=BUSY_KERNEL, ts=t + 300 * MS + 10, dur=5, kernel_ts=t + 300 * MS + 20, kernel_dur=50)
    t += 300 * MS + 100
    for i in range(10):
        op = b.cpu_op("aten::add", ts=t + i * 100, dur=20)
        b.launch(op, kernel="add_kernel", kernel_ts=t + i * 100 + 25, kernel_dur=5)
    return b.write(tmp / "only_cold.json")


def _optimizer_loop(b: TraceBuilder, n: int, t0: float, body: Any) -> None:
    """``n`` iterations of 2 ms, each ending in ``Optimizer.step#SGD.step``; ``body(b, i, t)`` fills them."""
    for i in range(n):
        t = t0 + i * 2 * MS
        body(b, i, t)
        b.annotation("Optimizer.step#SGD.step", ts=t + 1900, dur=90)


def _cudnn_autotune(tmp: Path) -> Path:
    """cudnn.benchmark: the first iteration's convolution tries algorithms (60 event records and syncs
    around trial kernels, the GPU idle between them); later iterations run one busy kernel each."""
    b = TraceBuilder()

    def body(b: TraceBuilder, i: int, t: float) -> None:
        if i == 0:
            conv = b.cpu_op("aten::cudnn_convolution", ts=t, dur=1800)
            ext = int(conv["args"]["External id"])
            for k in range(20):
                s = t + 10 + k * 85
                b.runtime("cudaEventRecord", ts=s, dur=2, external_id=ext)
                b.launch(conv, kernel=f"cudnn_trial_algo_{k}", ts=s + 3, dur=3, kernel_ts=s + 8, kernel_dur=20)
                b.runtime("cudaEventRecord", ts=s + 7, dur=2, external_id=ext)
                b.runtime("cudaEventSynchronize", ts=s + 10, dur=20, external_id=ext)
            return
        conv = b.cpu_op("aten::cudnn_convolution", ts=t + 5, dur=20)
        b.launch(conv, kernel="cudnn_conv_best_algo", kernel_ts=t + 12, kernel_dur=1980, grid=(264, 1, 1))

    _optimizer_loop(b, 6, 0, body)
    return b.write(tmp / "autotune.json")


def _optimizer_markers(tmp: Path) -> Path:
    """No ProfilerStep; every iteration ends in Optimizer.step and waits 800 µs of its 2 ms for the next
    batch. The first iteration is a 20 ms warm-up (model set-up before the loop)."""
    b = TraceBuilder()
    b.cpu_op("aten::empty", ts=0, dur=20)
    b.cpu_op("aten::copy_", ts=18 * MS, dur=20)  # set-up on the host, nothing on the GPU

    def body(b: TraceBuilder, i: int, t: float) -> None:
        b.dataloader(ts=t + 10, dur=800)
        op = b.cpu_op("aten::mm", ts=t + 820, dur=20)
        b.launch(op, kernel=BUSY_KERNEL, kernel_ts=t + 850, kernel_dur=1100, grid=(264, 1, 1))

    _optimizer_loop(b, 8, 20 * MS, body)
    return b.write(tmp / "optimizer_markers.json")


def _check_optimizer_markers(run: Any, findings: list[dict[str, Any]]) -> None:
    rank = run.ranks[0]
    assert rank.step_source == "Optimizer.step", rank.step_source
    assert len(rank.windows) == 8
    top = findings[0]
    assert top["evidence"]["steps_used"] == 7, top["evidence"]
    assert "warm-up" in top["evidence"]["steps_excluded"], top["evidence"]


def _dataloader_markers(tmp: Path) -> Path:
    """An inference loop: each batch fetch (400 µs, single-process loader) starts an iteration, then a
    500 µs GEMM. No ProfilerStep, no optimizer."""
    b = TraceBuilder()
    for i in range(8):
        t0 = i * 1000
        b.dataloader(ts=t0 + 10, dur=400)
        op = b.cpu_op("aten::mm", ts=t0 + 420, dur=20)
        b.launch(op, kernel=BUSY_KERNEL, kernel_ts=t0 + 450, kernel_dur=500, grid=(264, 1, 1))
    return b.write(tmp / "dataloader_markers.json")


def _check_dataloader(run: Any, findings: list[dict[str, Any]]) -> None:
    assert run.ranks[0].step_source == "DataLoader"
    assert len(run.ranks[0].windows) == 7  # the last fetch starts an iteration whose end is not in the trace


def _module_forward_markers(tmp: Path) -> Path:
    """with_modules: the top module's forward (``nn.Module: Net_0``) repeats every 1 ms around two inner
    modules; the GPU is kept busy."""
    b = TraceBuilder()
    for i in range(8):
        t0 = i * 1000
        outer = b.python("nn.Module: Net_0", ts=t0 + 2, dur=60)
        b.python("nn.Module: Linear_0", ts=t0 + 4, dur=20, parent=outer)
        b.python("nn.Module: Linear_1", ts=t0 + 30, dur=20, parent=outer)
        _busy_iteration(b, t0)
    return b.write(tmp / "module_markers.json")


def _check_module(run: Any, findings: list[dict[str, Any]]) -> None:
    assert run.ranks[0].step_source == "module forward Net_0", run.ranks[0].step_source
    assert len(run.ranks[0].windows) == 7


def _no_repeating_marker(tmp: Path) -> Path:
    """A single window with two different annotations (set-up, one eval pass): nothing repeats, so it
    stays one window over the whole trace."""
    b = TraceBuilder()
    b.annotation("setup", ts=0, dur=10)
    b.annotation("eval_pass", ts=10, dur=5000)
    for i in range(5):
        _busy_iteration(b, 10 + i * 1000)
    return b.write(tmp / "one_window.json")


def _check_one_window(run: Any, findings: list[dict[str, Any]]) -> None:
    assert run.ranks[0].step_source == "whole trace"
    assert len(run.ranks[0].windows) == 1


def _check_cold_only(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert "cold start" in f["title"] and f["severity"] == "info", f["title"]
    assert f["est_saving_ns_per_step"] == 0
    kinds = {c["kind"] for c in f["evidence"]["one_time_calls"]}
    assert {"context creation", "library initialisation"} <= kinds, kinds
    assert f["evidence"]["one_time_ns"] >= 1_500_000_000


def _check_cold_then_busy(run: Any, findings: list[dict[str, Any]]) -> None:
    cold = next(f for f in findings if f["id"] == "cold_start")
    calls = cold["evidence"]["one_time_calls"]
    assert calls[0]["name"] == "cudaLaunchKernel" and calls[0]["dur_ns"] == 600_000_000, calls
    assert "One-time" in cold["title"]


def _check_autotune(run: Any, findings: list[dict[str, Any]]) -> None:
    cold = next(f for f in findings if f["id"] == "cold_start")
    assert cold["evidence"]["one_time_calls"][0]["kind"] == "cudnn autotuning"
    assert cold["evidence"]["one_time_calls"][0]["event_calls"] == 60


CASES: list[Case] = [
    case("cold_start_then_healthy_loop", _cold_start_then_healthy, None,
         "the 600 ms first cudaLaunchKernel is CUDA context creation, paid once; the loop after it keeps the "
         "GPU busy: nothing to fix, and no launch_bound / host_bound for a one-time stall",
         present={"cold_start"}, absent={"launch_bound", "sync", "host_bound"}, check=_check_cold_then_busy),
    case("trace_is_only_a_cold_start", _only_cold_start, "cold_start",
         "context creation and cuBLAS initialisation are 99 % of the trace: no steady state to judge, the "
         "honest answer is 'this is a cold start, profile after warm-up'",
         absent={"launch_bound", "sync", "host_bound", "allocator_churn"}, check=_check_cold_only),
    case("cudnn_autotune_in_first_iteration", _cudnn_autotune, None,
         "cudnn.benchmark's trials (event records and syncs) in the first iteration are one-time; the steady "
         "iterations are one busy convolution each",
         present={"cold_start"}, absent={"sync", "launch_bound", "host_bound"}, check=_check_autotune),
    case("optimizer_step_markers_make_steps", _optimizer_markers, "data_loading",
         "no ProfilerStep: Optimizer.step ends each iteration; the first (20 ms of set-up) is warm-up and "
         "dropped; each steady iteration waits 40 % for its batch",
         absent={"step_variance", "host_bound"}, check=_check_optimizer_markers),
    case("dataloader_markers_make_steps", _dataloader_markers, "data_loading",
         "no ProfilerStep: each DataLoader fetch starts an iteration; 40 % of each waits for the batch",
         absent={"launch_bound"}, check=_check_dataloader),
    case("module_forward_markers_make_steps", _module_forward_markers, None,
         "with_modules forwards of the top module mark the iterations; the GPU is busy: nothing to fix",
         check=_check_module),
    case("no_repeating_marker_stays_one_window", _no_repeating_marker, None,
         "two different annotations, nothing repeats: one window over the trace, busy GPU, nothing to fix",
         check=_check_one_window),
]
