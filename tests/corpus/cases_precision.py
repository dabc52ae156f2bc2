"""Precision classes: float64 by mistake (``model.double()``, NumPy's float64 inputs) on a CPU run and on a
GPU; the float32 twin stays quiet. Two of them are real CPU PyTorch runs (``scripts/fp64_train.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import ANY, Case, case, run_script
from kineto_builder import TraceBuilder

A = [512, 512]


def _cpu_steps(tmp: Path, dtype: str) -> Path:
    """5 CPU steps: two 4 ms GEMMs of ``dtype`` (``double`` or ``float``), 1 ms of elementwise ops."""
    b = TraceBuilder()
    t = 0.0
    for s in range(5):
        b.step(s, ts=t, dur=10_000)
        b.cpu_op("aten::mm", ts=t + 10, dur=4_000, shapes=[A, A], dtypes=[dtype, dtype])
        b.cpu_op("aten::addmm", ts=t + 4_020, dur=4_000, shapes=[[512], A, A, [], []],
                 dtypes=[dtype, dtype, dtype, "Scalar", "Scalar"])
        for i in range(10):
            b.cpu_op("aten::add_", ts=t + 8_100 + i * 150, dur=100, shapes=[A, A], dtypes=[dtype, dtype])
        t += 10_010
    return b.write(tmp / f"cpu_{dtype}.json")


def _gpu_fp64(tmp: Path) -> Path:
    """An A100 whose steps are one 6 ms DGEMM each (``model.double()`` on the GPU)."""
    b = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")
    t = 0.0
    for s in range(5):
        b.step(s, ts=t, dur=6_300)
        op = b.cpu_op("aten::mm", ts=t + 10, dur=40, shapes=[[4096, 4096], [4096, 4096]], dtypes=["double", "double"])
        b.launch(op, kernel="ampere_dgemm_128x64_nn", kernel_ts=t + 60, kernel_dur=6_000, grid=(512, 1, 1))
        t += 6_310
    return b.write(tmp / "gpu_fp64.json")


def _real(tmp: Path, *args: str) -> Path:
    return run_script("fp64_train.py", tmp / "run", *args) / "trace.json"


def _check_cpu(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    ev = f["evidence"]
    assert "float64" in f["title"] and "model.float()" in f["fix"] and "np.float32" in f["fix"]
    assert ev["matrix_dtype_mix_ns_per_step"].get("fp64", 0) == ev["fp64_matrix_ns_per_step"]
    assert ev["fp32_over_fp64_rate"] >= 1
    # saving = FP64 matrix time x (1 - 1/rate): half of it at the documented 2x
    expected = ev["fp64_matrix_ns_per_step"] * (1 - 1 / ev["fp32_over_fp64_rate"])
    assert abs(f["est_saving_ns_per_step"] - expected) <= 2
    assert not [w for w in ("tensor core", "torch.cuda", "autocast('cuda'") if w in f["fix"]]


def _check_gpu(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["title"].startswith("float64 matrix math on the GPU") and f["fix"].startswith("Compute in float32")


CASES: list[Case] = [
    case("cpu_fp64_matrix", lambda tmp: _cpu_steps(tmp, "double"), "precision",
         "80 % of a CPU step is float64 GEMM: the float32 rate is about twice (MKL DGEMM vs SGEMM), half of it "
         "goes with model.float()", check=_check_cpu),
    case("cpu_fp32_matrix", lambda tmp: _cpu_steps(tmp, "float"), ANY,
         "the same step in float32: nothing to say about precision on a CPU", absent={"precision"}),
    case("gpu_fp64_matrix", _gpu_fp64, "precision",
         "an A100 running DGEMM: float32 (then TF32/bf16) before any tensor-core advice", check=_check_gpu),
    case("real_cpu_fp64_train", _real, "precision",
         "a real CPU training loop with model.double() and NumPy float64 batches: most of the step is float64 "
         "matrix work, not dispatch overhead", check=_check_cpu, real=True),
    case("real_cpu_fp32_train", lambda tmp: _real(tmp, "float32"), ANY,
         "its float32 twin: no precision finding", absent={"precision"}, real=True),
]
