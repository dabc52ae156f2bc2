"""Findings in the GPU vendor's words (rules/vendor.py): HIP names on AMD traces, CUDA on NVIDIA, on the same
model recorded on both (TraceLens Falconsai ViT, H100 and MI300X), and the rewriting itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.document import build_document
from aiprof.report.model import Report
from aiprof.rules.vendor import in_vendor_text, vendor_of_names

PAIR = "tracelens/{}/Falconsai_nsfw_image_detection__1016002.json.gz"
CUDA_API = re.compile(r"\bcuda[A-Z]\w*|\bCUDA (context|graphs?|initiali[sz]ation)\b|nvidia-smi|\bcuDNN\b|\bNCCL\b(?!_)"
                      r"|CUDA_MODULE_LOADING")
HIP_API = re.compile(r"\bhip[A-Z]\w*|\bHIP\b|rocm-smi|MIOpen|\bRCCL\b")


def _doc(traces_dir: Path, device: str) -> Report:
    return build_document(*analyze_and_diagnose([str(traces_dir / PAIR.format(device))]))


def _texts(doc: Report) -> list[str]:
    return [f"{f.title} {f.fix}" for f in doc.findings]


def test_amd_trace_findings_say_hip(traces_dir: Path) -> None:
    doc = _doc(traces_dir, "mi300")
    by_id = {f.id: f for f in doc.findings}
    sync = by_id["sync"]
    assert "hipDeviceSynchronize" in sync.title
    assert "hipFree(0) creates the context" in sync.fix and "HIP context" in sync.fix
    assert "torch.cuda.synchronize()" in sync.fix  # PyTorch's API keeps its name on ROCm
    assert "CUs" in by_id["launch_config"].title and "multiples of 64 (a wavefront)" in by_id["launch_config"].fix
    for text in _texts(doc):
        assert not CUDA_API.search(text), text
        assert "CUDA/HIP" not in text


def test_nvidia_trace_findings_say_cuda(traces_dir: Path) -> None:
    doc = _doc(traces_dir, "h100")
    by_id = {f.id: f for f in doc.findings}
    sync = by_id["sync"]
    assert "cudaDeviceSynchronize" in sync.title and "cudaFree(0) creates the context" in sync.fix
    assert "SMs" in by_id["launch_config"].title
    for text in _texts(doc):
        assert not HIP_API.search(text), text
        assert "CUDA/HIP" not in text


@pytest.mark.parametrize(("text", "amd", "nvidia"), [
    ("avoid cudaDeviceSynchronize(); cudaFree(0) creates the CUDA context",
     "avoid hipDeviceSynchronize(); hipFree(0) creates the HIP context",
     "avoid cudaDeviceSynchronize(); cudaFree(0) creates the CUDA context"),
    ("pin with cudaMallocHost, copy with cudaMemcpyAsync", "pin with hipHostMalloc, copy with hipMemcpyAsync", None),
    ("a CUDA/HIP initialisation", "a HIP initialisation", "a CUDA initialisation"),
    ("check nvidia-smi topo -m and NCCL_DEBUG=INFO (NCCL transport)",
     "check rocm-smi --showtopo and NCCL_DEBUG=INFO (RCCL transport)", None),
    ("throttling (nvidia-smi -q -d PERFORMANCE or rocm-smi)", "throttling (rocm-smi --showperflevel)", None),
    ("cuBLAS/cuDNN workspaces; cudnn autotuning", "hipBLASLt/MIOpen workspaces; MIOpen autotuning", None),
    ("torch.cuda.synchronize() and PYTORCH_CUDA_ALLOC_CONF", None, None),  # PyTorch names stay on both
    ("CUDA_MODULE_LOADING=LAZY (the default since CUDA 11.7) moves module loading to the first cudaLaunchKernel; "
     "CUDA_MODULE_LOADING=EAGER moves it to start-up",
     "lazy code-object loading (HIP_ENABLE_DEFERRED_LOADING=1, the default) moves module loading to the first "
     "hipLaunchKernel; HIP_ENABLE_DEFERRED_LOADING=0 moves it to start-up", None),
    ("fewer blocks than the 132 SMs, on tensor cores", "fewer blocks than the 132 CUs, on matrix cores", None),
])
def test_rewriting(text: str, amd: str | None, nvidia: str | None) -> None:
    assert in_vendor_text(text, "amd") == (amd if amd is not None else text)
    assert in_vendor_text(text, "nvidia") == (nvidia if nvidia is not None else text)
    assert in_vendor_text(text, "") == text


def test_vendor_from_device_names() -> None:
    assert vendor_of_names(["AMD Instinct MI300X VF"]) == "amd"
    assert vendor_of_names(["NVIDIA H100 80GB HBM3"]) == "nvidia"
    assert vendor_of_names(["", "cpu"]) == ""


def test_amd_cold_start_names_hip_loading(traces_dir: Path) -> None:
    """TraceLens perf_model normalization (MI300X): the cold-start fix names HIP's lazy code-object loading."""
    doc = build_document(*analyze_and_diagnose(
        [str(traces_dir / "tracelens/perf_model/normalization/normalization_layer_test.json.gz")]))
    cold = next(f for f in doc.findings if f.id == "cold_start")
    assert "HIP_ENABLE_DEFERRED_LOADING=1" in cold.fix and "hipLaunchKernel" in cold.fix and "MIOpen" in cold.fix
    for text in _texts(doc):
        assert not CUDA_API.search(text), text
