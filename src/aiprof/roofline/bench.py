"""Micro-benchmarks behind ``aiprof peaks``: achievable matmul FLOP/s per dtype and copy bandwidth on this
machine (CPU through torch, or numpy without it; CUDA when present). torch is imported lazily here only.

On a CPU, matmuls and vectorised elementwise kernels run on the same SIMD units, so the measured matmul
rate is used as both the ``matrix_*`` and ``vector_*`` peak. Copy bandwidth counts bytes read + written.
"""

from __future__ import annotations

import functools
import platform
import socket
import time
from collections.abc import Callable

from aiprof.roofline.peaks import DevicePeaks, now_iso


def _best_seconds(fn: Callable[[], object], repeat: int, sync: Callable[[], None] = lambda: None) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo`` on Linux), for naming the measured entry."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine() or "unknown")


def measure_cpu(*, quick: bool = False) -> DevicePeaks:
    """Matmul FLOP/s (fp32, fp64, bf16 where fast) and copy bandwidth of this CPU."""
    try:
        import torch
    except ImportError:
        return _measure_cpu_numpy(quick=quick)
    n = 512 if quick else 1024
    repeat = 3 if quick else 5
    flops: dict[str, float] = {}
    for key, dtype in (("fp32", torch.float32), ("fp64", torch.float64), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        seconds = _best_seconds(functools.partial(torch.mm, a, b), repeat)
        rate = 2 * n**3 / seconds
        flops[f"matrix_{key}"] = rate
        flops[f"vector_{key}"] = rate
    elems = (32 if quick else 64) * 2**20 // 4
    src, dst = torch.ones(elems), torch.empty(elems)
    seconds = _best_seconds(lambda: dst.copy_(src), repeat)
    bw = 2 * elems * 4 / seconds
    threads = torch.get_num_threads()
    return DevicePeaks(cpu_name(), bw, flops, _source("torch", threads), "measured", "cpu",
                       measured_at=now_iso(), threads=threads)


def _measure_cpu_numpy(*, quick: bool) -> DevicePeaks:
    import numpy as np

    n = 512 if quick else 1024
    flops: dict[str, float] = {}
    for key, dtype in (("fp32", np.float32), ("fp64", np.float64)):
        a = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
        seconds = _best_seconds(functools.partial(np.matmul, a, a), 3)
        flops[f"matrix_{key}"] = flops[f"vector_{key}"] = 2 * n**3 / seconds
    src = np.ones((32 if quick else 64) * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    seconds = _best_seconds(lambda: np.copyto(dst, src), 3)
    return DevicePeaks(cpu_name(), 2 * src.nbytes / seconds, flops, _source("numpy", 0), "measured", "cpu",
                       measured_at=now_iso())


def measure_cuda(*, quick: bool = False) -> list[DevicePeaks]:
    """Matmul FLOP/s per dtype (fp32 with and without TF32, fp16, bf16, fp8 and int8 where supported) and
    device-to-device copy bandwidth of every visible CUDA/ROCm device."""
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for index in range(torch.cuda.device_count()):
        with torch.cuda.device(index):
            out.append(_measure_one_cuda(torch, index, quick))
    return out


def _measure_one_cuda(torch: object, index: int, quick: bool) -> DevicePeaks:
    import torch as t

    n = 4096 if quick else 8192
    sync = t.cuda.synchronize
    flops: dict[str, float] = {}
    previous = t.backends.cuda.matmul.allow_tf32
    try:
        for key, dtype, tf32 in (("fp32", t.float32, False), ("tf32", t.float32, True), ("fp16", t.float16, False),
                                 ("bf16", t.bfloat16, False)):
            t.backends.cuda.matmul.allow_tf32 = tf32
            a = t.randn(n, n, device="cuda", dtype=dtype)
            b = t.randn(n, n, device="cuda", dtype=dtype)
            seconds = _best_seconds(functools.partial(t.mm, a, b), 5, sync)
            flops[f"matrix_{key}"] = 2 * n**3 / seconds
    finally:
        t.backends.cuda.matmul.allow_tf32 = previous
    flops.update(_cuda_low_precision(t, n, sync))
    elems = (256 if quick else 1024) * 2**20 // 4
    src = t.ones(elems, device="cuda")
    dst = t.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), 10, sync)
    vec = t.randn(elems, device="cuda")
    vec_seconds = _best_seconds(lambda: vec.mul_(1.0000001), 5, sync)
    flops["vector_fp32"] = max(elems / vec_seconds, 0.0)  # memory-bound lower bound; spec fills if higher
    return DevicePeaks(t.cuda.get_device_name(index), 2 * elems * 4 / seconds, flops, _source("torch.cuda", 0),
                       "measured", "gpu", measured_at=now_iso())


def _cuda_low_precision(t: object, n: int, sync: Callable[[], None]) -> dict[str, float]:
    import torch

    out: dict[str, float] = {}
    try:
        a = torch.randint(-8, 8, (n, n), device="cuda", dtype=torch.int8)
        b = torch.randint(-8, 8, (n, n), device="cuda", dtype=torch.int8).t()
        out["matrix_int8"] = 2 * n**3 / _best_seconds(lambda: torch._int_mm(a, b), 5, sync)
    except (RuntimeError, AttributeError):
        pass
    try:
        a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        out["matrix_fp8"] = 2 * n**3 / _best_seconds(
            lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), 5, sync)
    except (RuntimeError, AttributeError, TypeError):
        pass
    return out


def _source(backend: str, threads: int) -> str:
    extra = f", {threads} threads" if threads else ""
    return f"measured by `aiprof peaks` ({backend}{extra}) on {socket.gethostname()} at {now_iso()}"
