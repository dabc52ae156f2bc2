"""The GPU checks of issue 13 on what ``bench/memory_gpu.py --out tests/memory/fixtures/gpu`` recorded on a
CUDA device: aiprof's peak equals ``torch.cuda.max_memory_allocated()`` to the byte, the snapshot's reserved and
allocated equal ``memory_reserved()`` / ``memory_allocated()``, and a planted capacity OOM and a planted
fragmentation OOM get their verdicts. Skipped until a GPU run has recorded the fixtures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu"


@pytest.mark.skipif(not (FIXTURES / "expected.json").exists(), reason="recorded on a GPU by bench/memory_gpu.py")
def test_gpu_recording_agrees_with_torch() -> None:
    spec = importlib.util.spec_from_file_location("memory_gpu_bench", ROOT / "bench" / "memory_gpu.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.check(FIXTURES) == []
