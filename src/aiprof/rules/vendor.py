"""Findings in the words of the GPU's vendor: HIP, RCCL, MIOpen, rocm-smi on an AMD trace, CUDA on an NVIDIA one.

The rules write their titles and fixes once, in CUDA's words (``cudaDeviceSynchronize``, ``cudaFree(0)``,
``nvidia-smi``, "CUDA graphs") or both vendors' (``CUDA/HIP``). After the rules, :func:`in_vendor_words`
rewrites them for the trace's vendor (:func:`vendor_of`): on AMD every CUDA runtime name becomes its HIP
name (``cudaX`` → ``hipX``; ``cudaMallocHost`` → ``hipHostMalloc``), the libraries and tools theirs (NCCL →
RCCL, cuDNN → MIOpen, cuBLAS → hipBLASLt, nvidia-smi → rocm-smi, ``CUDA_MODULE_LOADING`` →
``HIP_ENABLE_DEFERRED_LOADING``), the hardware's (SMs → CUs, tensor cores → matrix cores, warps of 32 →
wavefronts of 64), and ``CUDA/HIP`` says HIP; on NVIDIA ``CUDA/HIP`` says CUDA. PyTorch's own API keeps its
name on both (``torch.cuda.synchronize()``, ``PYTORCH_CUDA_ALLOC_CONF``: ROCm builds answer to them), and
evidence (what the trace recorded) is never rewritten. A CPU trace, or one whose vendor is unknown, is left
as written.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Literal

from aiprof.rules.finding import Finding
from aiprof.trace.model import Kind, Trace

Vendor = Literal["nvidia", "amd", ""]

AMD_DEVICE = re.compile(r"(?i)\bamd\b|instinct|radeon|\bmi\d{3}|gfx\d")
NVIDIA_DEVICE = re.compile(r"(?i)nvidia|geforce|tesla|quadro|\b[ahlbv]\d{2,3}\b|\brtx\b|\bgh\d{3}\b|\bgb\d{3}\b")

# (pattern, replacement) applied in order on AMD traces.
_AMD_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"nvidia-smi -q -d PERFORMANCE or rocm-smi"), "rocm-smi --showperflevel"),
    (re.compile(r"nvidia-smi -q -d PERFORMANCE"), "rocm-smi --showperflevel"),
    (re.compile(r"nvidia-smi topo -m"), "rocm-smi --showtopo"),
    (re.compile(r"nvidia-smi"), "rocm-smi"),
    (re.compile(r"CUDA_MODULE_LOADING=LAZY \(the default since CUDA [\d.]+\)"),
     "lazy code-object loading (HIP_ENABLE_DEFERRED_LOADING=1, the default)"),
    (re.compile(r"CUDA_MODULE_LOADING=EAGER"), "HIP_ENABLE_DEFERRED_LOADING=0"),
    (re.compile(r"\bcudaMallocHost\b"), "hipHostMalloc"),
    (re.compile(r"\bcudaFreeHost\b"), "hipHostFree"),
    (re.compile(r"\bcuda(?=[A-Z])"), "hip"),
    (re.compile(r"(?<![/\w])CUDA/HIP\b"), "HIP"),
    (re.compile(r"\bCUDA cores\b"), "vector ALUs"),
    (re.compile(r"\bCUDA(?= (context|graphs?|initiali[sz]ation|lazy loading|kernels?|streams?|events?|runtime)\b)"),
     "HIP"),
    (re.compile(r"\bNCCL\b(?!_)"), "RCCL"),
    (re.compile(r"\bcuDNN\b"), "MIOpen"),
    (re.compile(r"\bcudnn(?= autotuning)"), "MIOpen"),
    (re.compile(r"\bcuBLAS\b"), "hipBLASLt"),
    (re.compile(r"\bSMs\b"), "CUs"),
    (re.compile(r"\bSM count\b"), "CU count"),
    (re.compile(r"\btensor cores\b"), "matrix cores"),
    (re.compile(r"\bTensor Cores\b"), "Matrix Cores"),
    (re.compile(r"\btensor-core\b"), "matrix-core"),
    (re.compile(r"\bmultiples of 32\b"), "multiples of 64 (a wavefront)"),
)
_NVIDIA_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![/\w])CUDA/HIP\b"), "CUDA"),
    (re.compile(r"\bcudaGraphLaunch/hipGraphLaunch\b"), "cudaGraphLaunch"),
)


def vendor_of(trace: Trace) -> Vendor:
    """The trace's GPU vendor: from its runtime calls (``hip*`` vs ``cuda*``/``cu*``), else its devices'
    names; ``""`` for a CPU trace or one that says neither."""
    cached = trace.cache.get("rules.vendor")
    if cached not in ("nvidia", "amd", ""):
        cached = _vendor_of(trace)
        trace.cache["rules.vendor"] = cached
    vendor: Vendor = cached
    return vendor


def _vendor_of(trace: Trace) -> Vendor:
    if not trace.has_device_activity:
        return ""
    calls = trace.rows_of(Kind.RUNTIME, Kind.DRIVER)
    if calls.size:
        hip = int(trace.name_matches(calls, r"^(hip|hsa)").sum())
        cuda = int(trace.name_matches(calls, r"^cu").sum())
        if hip != cuda:
            return "amd" if hip > cuda else "nvidia"
    names = [trace.device_info(d).name for d in trace.device_ids] + [d.name for d in trace.devices]
    return vendor_of_names(names)


def vendor_of_names(names: Iterable[str]) -> Vendor:
    """The vendor that device names say (AMD first: ``AMD Instinct MI300X``), ``""`` when none does."""
    texts = [n for n in names if n]
    if any(AMD_DEVICE.search(n) for n in texts):
        return "amd"
    if any(NVIDIA_DEVICE.search(n) for n in texts):
        return "nvidia"
    return ""


def in_vendor_text(text: str, vendor: Vendor) -> str:
    """``text`` in ``vendor``'s words (module text); unchanged for ``""``."""
    table = _AMD_WORDS if vendor == "amd" else _NVIDIA_WORDS if vendor == "nvidia" else ()
    for pattern, replacement in table:
        text = pattern.sub(replacement, text)
    return text


def in_vendor_words(findings: list[Finding], vendor: Vendor) -> list[Finding]:
    """The findings with their titles, fixes and notes in ``vendor``'s words; evidence untouched."""
    if not vendor:
        return findings
    out: list[Finding] = []
    for f in findings:
        title, fix = in_vendor_text(f.title, vendor), in_vendor_text(f.fix, vendor)
        notes = tuple(in_vendor_text(n, vendor) for n in f.notes)
        out.append(f if (title, fix, notes) == (f.title, f.fix, f.notes)
                   else dataclasses.replace(f, title=title, fix=fix, notes=notes))
    return out


__all__ = ["Vendor", "in_vendor_text", "in_vendor_words", "vendor_of", "vendor_of_names"]
