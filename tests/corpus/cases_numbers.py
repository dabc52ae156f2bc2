"""Trace-level numbers that mislead: partial traces (the device side of late steps missing) and the rank
of a single file.

Kineto writes a trace's CPU events first and the device activity it collected (CUPTI runtime calls,
kernels, copies) after them. A trace cut off mid-write, or whose device buffers were dropped, keeps the
CPU side of its late steps without their kernels: read as they are, those steps are ~100 % idle and
drive HIGH idle findings about time nobody measured. The builders here are also used by
tests/unit/test_coverage.py and tests/report/test_partial_runs.py.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from corpus import Case, case
from kineto_builder import TraceBuilder, _encode

STEP_US = 1000
GEMMS = 4
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
_CPU_CATS = ("cpu_op", "user_annotation", "python_function")


def busy_steps(steps: int = 6, *, loader_us: int = 0) -> TraceBuilder:
    """``steps`` steps of four large bf16 GEMMs that keep the GPU ~95 % busy (after ``loader_us`` of
    waiting for the batch in a single-process DataLoader, when given)."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    shapes = [[4096, 4096], [4096, 4096]]
    gemm_us = (STEP_US - 40 - loader_us) // GEMMS
    for i in range(steps):
        t0 = i * STEP_US
        b.step(i, ts=t0, dur=STEP_US)
        if loader_us:
            b.dataloader(ts=t0 + 2, dur=loader_us)
        for j in range(GEMMS):
            start = t0 + loader_us + 5 + j * gemm_us
            op = b.cpu_op("aten::mm", ts=start, dur=10, shapes=shapes, dtypes=["c10::BFloat16"] * 2)
            b.launch(op, kernel=_GEMM, kernel_ts=start + 3, kernel_dur=gemm_us - 2, grid=(132, 1, 1))
    return b


def drop_device_side(b: TraceBuilder, from_step: int, *, keep_launches: bool = True) -> None:
    """Remove the kernels (and their flows) of steps ``from_step`` on, as a trace whose device buffers
    were lost holds them; with ``keep_launches=False`` the launch calls go too (CUPTI writes them)."""
    start_ns = from_step * STEP_US * 1000
    lost: set[int] = set()
    kept: list[dict[str, Any]] = []
    for e in b.events:
        late = e.get("ph") == "X" and b.ns(e) >= start_ns
        if late and (e.get("cat") == "kernel" or (not keep_launches and e.get("cat") == "cuda_runtime")):
            lost.add(int(e["args"]["correlation"]))
            continue
        kept.append(e)
    b.events[:] = [e for e in kept if not (e.get("ph") in ("s", "f") and e.get("id") in lost)]


def kineto_order(b: TraceBuilder) -> list[dict[str, Any]]:
    """Reorder the events as Kineto writes them: CPU ops and annotations first, then the device-side
    records (runtime calls, kernels, flows) in time order. Returns the device-side events."""
    cpu = [e for e in b.events if e.get("cat") in _CPU_CATS]
    device = sorted((e for e in b.events if e.get("cat") not in _CPU_CATS), key=lambda e: (b.ns(e), e.get("ph") != "X"))
    b.events[:] = cpu + device
    return device


def cut_off_bytes(b: TraceBuilder, at_step: float) -> bytes:
    """The trace's JSON cut off mid-write inside the first device-side record from step ``at_step`` on
    (3.5: the middle of step 3), the events in Kineto's order: everything before that record is
    complete, nothing after it exists."""
    device = kineto_order(b)
    text = b.dumps(metadata=False)
    first = next(e for e in device if e.get("ph") == "X" and b.ns(e) >= int(at_step * STEP_US * 1000))
    cut = text.index(_encode(first)) + 40
    return text[:cut].encode()


def write_cut_off(b: TraceBuilder, path: Path, at_step: float) -> Path:
    data = cut_off_bytes(b, at_step)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


# ----- cases -----------------------------------------------------------------------------------------
def _lost_kernels(tmp: Path) -> Path:
    b = busy_steps()
    drop_device_side(b, from_step=4)
    return b.write(tmp / "lost_kernels.json")


def _cut_off(tmp: Path) -> Path:
    return write_cut_off(busy_steps(), tmp / "cut_off.pt.trace.json.gz", at_step=4)


def _cut_off_loader(tmp: Path) -> Path:
    return write_cut_off(busy_steps(loader_us=400), tmp / "cut_off_loader.json", at_step=4)


def _rank_34(tmp: Path) -> Path:
    b = busy_steps()
    b.distributed(rank=34, world_size=64)
    return b.write(tmp / "trace.json")


def _check_complete_only(run: Any, findings: list[dict[str, Any]]) -> None:
    rank = run.ranks[0]
    assert [s.name for s in rank.incomplete_steps] == ["ProfilerStep#4", "ProfilerStep#5"], rank.incomplete_steps
    assert rank.partial and len(rank.primary.steps) == 4
    assert any("partial trace" in w for w in run.warnings), run.warnings


def _check_loader(run: Any, findings: list[dict[str, Any]]) -> None:
    _check_complete_only(run, findings)
    first = findings[0]
    # 400 µs of every 1000 µs step wait for the batch: the share the complete steps show, not inflated by
    # two steps of pure "host" idle (their kernels were never written)
    assert 0.3 <= first["share_of_step"] <= 0.45, first
    assert first["evidence"]["steps_used"] == 4  # 4 complete steps; the first is kept: no one-time cost, no outlier
    assert first["evidence"]["incomplete_steps_left_out"] == ["ProfilerStep#4", "ProfilerStep#5"]


def _check_rank(run: Any, findings: list[dict[str, Any]]) -> None:
    assert [(r.rank, r.rank_source) for r in run.ranks] == [(34, "distributedInfo")]


CASES: list[Case] = [
    case("lost_kernels_in_late_steps", _lost_kernels, None,
         "the last 2 of 6 steps kept their CPU ops and launch calls but not their kernels (device buffers "
         "lost): the 4 recorded steps keep the GPU ~95 % busy, so nothing is to fix; the 2 steps without a "
         "device record are not idle, they are unmeasured",
         absent={"host_bound", "launch_bound", "sync", "step_variance"}, check=_check_complete_only),
    case("cut_off_trace_first_finding_from_complete_steps", _cut_off, None,
         "a .json.gz cut off mid-write (CPU side of all 6 steps, device side of the first 4): the recorded "
         "steps are healthy; no HIGH idle finding may come from the steps the cut removed",
         absent={"host_bound", "launch_bound", "sync", "step_variance"}, check=_check_complete_only),
    case("cut_off_trace_keeps_the_real_bottleneck", _cut_off_loader, "data_loading",
         "the complete steps wait 40 % for the DataLoader: that is the first finding, at the share those "
         "steps show, and host_bound is not invented from the two steps without kernels",
         absent={"host_bound", "launch_bound"}, check=_check_loader),
    case("single_file_rank_34", _rank_34, None,
         "one file whose distributedInfo says rank 34: the run's rank is 34, as it would be in its folder "
         "(`--rank 34` selects it); the GPU is busy, nothing to fix", check=_check_rank),
]
