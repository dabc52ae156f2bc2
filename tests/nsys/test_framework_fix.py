"""Fix texts follow the program a trace records (:mod:`aiprof.rules.framework`): an Nsight Systems report
of a CUDA program gets CUDA API advice (events, streams, cudaMemcpyAsync from pinned memory), a PyTorch
trace keeps the PyTorch advice (.item(), non_blocking=True); the kind comes from the trace, never its name."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aiprof
from aiprof.rules.framework import CUDA, CUDA_FIXES, PYTORCH, fix_text, program_kind
from aiprof.trace.model import Trace

ROOT = Path(__file__).resolve().parents[2]
NSYS = ROOT / ".." / "shared" / "traces" / "nsys"
SHARED = sorted(NSYS.glob("*.sqlite")) if NSYS.is_dir() else []
KINETO = ROOT / ".." / "shared" / "traces" / "hta" / "trace_diff" / "control" / "control.json.gz"
PYTORCH_WORDS = (".item()", "non_blocking", "torch.", "pin_memory=True", "DataLoader", "loss.detach")


def findings(path: Path, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / f"{path.stem}.json"
    done = subprocess.run([sys.executable, "-m", "aiprof", "analyze", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(out.read_text())["findings"]
    return found


def load(path: Path) -> Trace:
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


@pytest.mark.skipif(not SHARED, reason="../shared/traces/nsys not present")
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_nsys_reports_of_cuda_programs_get_cuda_advice(path: Path, tmp_path: Path) -> None:
    """No finding on the three CUDA / MPI+CUDA reports tells them to use .item() less or non_blocking=True;
    every finding with a CUDA wording uses it."""
    assert program_kind(load(path)) == CUDA
    found = findings(path, tmp_path)
    assert found
    for f in found:
        if f["id"] in CUDA_FIXES:
            assert f["fix"].endswith(CUDA_FIXES[f["id"]]), f["id"]
        assert not [w for w in PYTORCH_WORDS if w in f["fix"] or w in f["title"]], (f["id"], f["fix"])


@pytest.mark.skipif(not SHARED, reason="../shared/traces/nsys not present")
def test_cloverleaf_sync_fix_names_the_cuda_calls(tmp_path: Path) -> None:
    sync = {f["id"]: f for f in findings(NSYS / "perlmutter-cloverleaf-cuda.sqlite", tmp_path)}["sync"]
    assert "cudaDeviceSynchronize" in sync["fix"] and "cudaStreamWaitEvent" in sync["fix"]
    assert "cudaMemcpyAsync" in sync["fix"] and ".item()" not in sync["title"]


@pytest.mark.skipif(not KINETO.exists(), reason="../shared/traces/hta not present")
def test_a_pytorch_trace_keeps_the_pytorch_advice() -> None:
    trace = load(KINETO)
    assert program_kind(trace) == PYTORCH
    assert fix_text(trace, "sync", "pytorch words") == "pytorch words"


def test_the_kind_comes_from_the_trace_not_the_file_name(tmp_path: Path) -> None:
    """A synthetic nsys report named like a PyTorch run is still a CUDA program; the same report with
    --pytorch=autograd-nvtx op ranges is a PyTorch program; a Kineto trace without ops stays PyTorch."""
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import nsys_import
        from kineto_builder import TraceBuilder
    finally:
        sys.path.remove(str(ROOT / "bench"))
        sys.path.remove(str(ROOT / "tests"))
    plain = tmp_path / "pytorch_resnet50_train.sqlite"
    nsys_import.build(plain, 6)
    assert program_kind(load(plain)) == CUDA
    torch_run = tmp_path / "cuda_solver.sqlite"
    shutil.copy(plain, torch_run)
    import sqlite3

    con = sqlite3.connect(torch_run)
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                "text TEXT, globalTid INTEGER, textId INTEGER)")
    con.execute("INSERT INTO NVTX_EVENTS VALUES (1000500, 1002000, 59, "
                f"'aten::mm, seq = 0, op_id = 1, sizes = [[4, 4], [4, 4]]', {nsys_import.GLOBAL_TID}, NULL)")
    con.commit()
    con.close()
    assert program_kind(load(torch_run)) == PYTORCH
    b = TraceBuilder()
    b.step(0, ts=0, dur=1000)
    b.runtime("cudaDeviceSynchronize", ts=10, dur=500)
    assert program_kind(load(b.write(tmp_path / "k.json"))) == PYTORCH
    sys.modules.pop("nsys_import", None)


def test_a_pytorch_sync_finding_keeps_item_advice(tmp_path: Path) -> None:
    """The same symptom in a torch.profiler trace: the sync fix still speaks PyTorch."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from kineto_builder import TraceBuilder
    finally:
        sys.path.remove(str(ROOT / "tests"))
    from aiprof.analysis.run import analyze_trace
    from aiprof.rules import DEFAULT_OPTIONS, diagnose_rank

    b = TraceBuilder()
    for i in range(4):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 10, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 40, kernel_dur=600, grid=(264, 1, 1))
        item = b.cpu_op("aten::item", ts=t0 + 40, dur=610)
        b.runtime("cudaStreamSynchronize", ts=t0 + 45, dur=600, external_id=int(item["args"]["External id"]))
        after = b.cpu_op("aten::add", ts=t0 + 800, dur=10)
        b.launch(after, kernel="add_kernel", kernel_ts=t0 + 812, kernel_dur=100, grid=(264, 1, 1))
    trace = load(b.write(tmp_path / "t.json"))
    found, _ = diagnose_rank(trace, analyze_trace(trace), DEFAULT_OPTIONS)
    sync = {f.id: f for f in found}["sync"]
    assert ".item()" in sync.fix and "cudaStreamWaitEvent" not in sync.fix and ".item()" in sync.title
