"""The kind of program a trace records, so that a fix speaks the program's language.

Most fix texts are written for PyTorch (``.item()``, ``.to(device, non_blocking=True)``,
``pin_memory=True``). An Nsight Systems report of a CUDA C++ program (or MPI+CUDA, or any CUDA code that
is not PyTorch) shows the same symptoms — a ``cudaDeviceSynchronize`` after every kernel, pageable
``cudaMemcpy`` — but the PyTorch advice means nothing there. The kind is a fact of the trace, never of its
file name::

    from aiprof.rules.framework import fix_text

    fix = fix_text(ctx.trace, "sync", PYTORCH_TEXT)   # PYTORCH_TEXT, or the CUDA wording for a CUDA program

:func:`program_kind` is ``"pytorch"`` when the trace records PyTorch ops (``CPU_OP`` rows: aten ops,
autograd nodes — an nsys report of ``--pytorch=autograd-nvtx`` has them too — or Python frames), or when
it comes from torch.profiler (a Kineto trace: no other source is named in its metadata); ``"cuda"`` for a
report of another profiler (``trace.metadata["source"]``, e.g. ``"nsys"``) with no PyTorch op: a CUDA
program, whose fixes name CUDA API calls. :data:`CUDA_FIXES` maps a rule's fix key to its CUDA wording; a
key without one keeps the rule's own (PyTorch) text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aiprof.trace.model import Kind

if TYPE_CHECKING:
    from aiprof.trace.model import Trace

PYTORCH = "pytorch"
CUDA = "cuda"

# A rule's fix (or title) key → its wording for a CUDA program.
CUDA_FIXES: dict[str, str] = {
    "sync.title": "Host round trips (synchronize / blocking copies) cost {saving} per step",
    "sync": (
        "Keep the host from waiting on the device inside the loop: kernels launched on one stream already run "
        "in order, so drop the cudaDeviceSynchronize() / cudaStreamSynchronize() between them; order work "
        "across streams with cudaEventRecord + cudaStreamWaitEvent (no host wait); synchronise once per "
        "iteration, or only before the host reads a result; check launch errors with cudaGetLastError() "
        "instead of a synchronise (or only in debug builds); copy with cudaMemcpyAsync from pinned host memory "
        "(cudaMallocHost / cudaHostRegister) instead of cudaMemcpy; keep values the host reads every iteration "
        "(norms, residuals) on the device and read them back every N iterations."
    ),
    "sync.free": (
        "cudaFree synchronises the whole device: allocate the buffers once outside the loop and reuse them, or "
        "use the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync)."
    ),
    "sync.copy": (
        "A blocking copy: cudaMemcpy from pageable memory waits for the device and stages through a driver "
        "buffer; allocate the host buffer pinned (cudaMallocHost, or cudaHostRegister an existing one) and use "
        "cudaMemcpyAsync on a stream, waiting (cudaStreamSynchronize or an event) only where the host needs "
        "the data; or move the copy out of the loop."
    ),
    "sync.event": (
        "An event wait: cudaEventSynchronize blocks the host until the event's work is done; wait only where "
        "the host needs the result, and order streams with cudaStreamWaitEvent (the device waits, not the host)."
    ),
    "sync.explicit": (
        "One explicit synchronisation (cudaDeviceSynchronize / cudaStreamSynchronize): remove it from the "
        "loop, or do it every N iterations; work on one stream runs in order without it."
    ),
    "sync.once": (
        "Seen once in the profiled window, it may be a one-time cost instead (CUDA context creation or "
        "module loading on first use): profile after a warm-up iteration (cudaProfilerStart/Stop around the "
        "steady loop, with nsys profile --capture-range=cudaProfilerApi)."
    ),
    "pageable_memcpy": (
        "Copy from pinned memory: allocate host buffers with cudaMallocHost (or cudaHostRegister existing "
        "ones) and copy with cudaMemcpyAsync on a stream, so copies overlap kernels and run at full bandwidth."
    ),
    "memcpy_exposed": (
        "Overlap copies with compute: pin the host buffers (cudaMallocHost / cudaHostRegister), issue copies "
        "with cudaMemcpyAsync on a stream other than the kernels' (cudaStreamCreate) and order them with "
        "events (cudaEventRecord + cudaStreamWaitEvent) so the next chunk copies while the current one "
        "computes; keep device-to-host reads out of the loop."
    ),
    "cold_start": (
        "Nothing to fix in the program's loop: these costs are paid once per process (CUDA context creation, "
        "module loading, library handles). Profile the steady state instead: bracket the loop with "
        "cudaProfilerStart() / cudaProfilerStop() after a warm-up iteration and run nsys profile "
        "--capture-range=cudaProfilerApi (or --delay SECONDS). CUDA_MODULE_LOADING=LAZY (the default since "
        "CUDA 11.7) moves module loading to each kernel's first launch, where it shows as a long first "
        "cudaLaunchKernel; create handles (cuBLAS, cuFFT) and allocate buffers once, before the loop."
    ),
    "launch_config": (
        "Give the GPU more parallel work per kernel: launch at least as many blocks as SMs (several per SM: "
        "size the grid from cudaOccupancyMaxActiveBlocksPerMultiprocessor × SM count, with grid-stride loops), "
        "process several small problems per launch (batched kernels, cuBLAS batched/strided GEMM), or run "
        "independent small kernels concurrently on several streams; block sizes should be multiples of 32."
    ),
}


def program_kind(trace: Trace) -> str:
    """``"pytorch"`` or ``"cuda"`` (see the module's docstring)."""
    kinds = trace.columns.kind
    if bool(np.isin(kinds, (int(Kind.CPU_OP), int(Kind.PYTHON))).any()):
        return PYTORCH
    source = trace.metadata.get("source") if isinstance(trace.metadata, dict) else None
    return CUDA if isinstance(source, str) and source not in ("", "kineto") else PYTORCH


def fix_text(trace: Trace, key: str, default: str) -> str:
    """The fix (or title) ``key`` for the program ``trace`` records: ``default`` (the PyTorch wording) unless
    the trace is of a CUDA program and :data:`CUDA_FIXES` has a wording for ``key``."""
    if key in CUDA_FIXES and program_kind(trace) == CUDA:
        return CUDA_FIXES[key]
    return default


__all__ = ["CUDA", "CUDA_FIXES", "PYTORCH", "fix_text", "program_kind"]
