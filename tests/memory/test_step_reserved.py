"""Per step: the highest reserved bytes, reserved − allocated at the step's allocated peak, and the
allocator's retries during the step (from the capture's memory_stats() samples)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from snapshots import block, entry, segment, snapshot

from aiprof.memory import analyze_memory, load_memory
from aiprof.report.memory_render import render_markdown, render_terminal

MiB = 1 << 20
BASE = 0x10_0000


def _annotation(step: int, stage: str, t_us: int) -> dict[str, Any]:
    return {"name": f"ProfilerStep#{step}", "stage": stage, "time_us": t_us, "device": 0}


def _run_dir(tmp_path: Path, retries: list[int] | None) -> Path:
    # one 4 MiB segment; step 0: A (1 MiB, kept) and B (2 MiB, freed) → peak 3 MiB with 4 MiB reserved; the
    # segment is mapped in step 0; step 1: C (1 MiB, freed) → peak 2 MiB; a second 4 MiB segment in step 1
    trace = [
        entry("segment_alloc", BASE, 4 * MiB, 11),
        entry("alloc", BASE, MiB, 12),
        entry("alloc", BASE + MiB, 2 * MiB, 13),
        entry("free_requested", BASE + MiB, 2 * MiB, 14),
        entry("free_completed", BASE + MiB, 2 * MiB, 14),
        entry("segment_alloc", BASE + 8 * MiB, 4 * MiB, 30),
        entry("alloc", BASE + MiB, MiB, 31),
        entry("free_requested", BASE + MiB, MiB, 32),
        entry("free_completed", BASE + MiB, MiB, 32),
    ]
    segments = [segment(BASE, [block(BASE, MiB), block(BASE + MiB, 3 * MiB, "inactive")]),
                segment(BASE + 8 * MiB, [block(BASE + 8 * MiB, 4 * MiB, "inactive")])]
    snap = snapshot(segments, trace)
    snap["external_annotations"] = [_annotation(0, "START", 10), _annotation(0, "END", 20),
                                    _annotation(1, "START", 25), _annotation(1, "END", 40)]
    mem = tmp_path / "memory"
    mem.mkdir()
    (mem / "snapshot.rank0.pickle").write_bytes(pickle.dumps(snap, protocol=4))
    if retries is not None:  # the capture samples the cumulative counter after each step (-1: before the first)
        rows = [{"step": s, "device": 0, "num_alloc_retries": n, "reserved_bytes": 0}
                for s, n in zip((-1, 0, 1), retries)]
        (mem / "memory_stats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_step_reserved_fragmentation_and_retries(tmp_path: Path) -> None:
    report = analyze_memory(load_memory(_run_dir(tmp_path, retries=[1, 3, 7])))
    (dev,) = report.devices
    s0, s1 = dev.steps
    assert (s0.peak_allocated_bytes, s0.peak_reserved_bytes, s0.fragmentation_at_peak_bytes) == (3 * MiB, 4 * MiB, MiB)
    assert (s1.peak_allocated_bytes, s1.peak_reserved_bytes, s1.fragmentation_at_peak_bytes) == (2 * MiB, 8 * MiB, 6 * MiB)
    assert (s0.alloc_retries, s1.alloc_retries) == (2, 4)
    assert (s0.segment_allocs, s1.segment_allocs) == (1, 1)
    text = render_terminal(report, [])
    assert "peak reserved" in text.split("per step:")[1] and "retries" in text.split("per step:")[1]
    assert "| retries |" in render_markdown(report, [])


def test_without_samples_a_step_has_no_retries(tmp_path: Path) -> None:
    (dev,) = analyze_memory(load_memory(_run_dir(tmp_path, retries=None))).devices
    assert [s.alloc_retries for s in dev.steps] == [None, None]
    assert "retries" not in render_terminal(analyze_memory(load_memory(tmp_path)), []).split("per step:")[1]


def test_memory_from_before_recording_is_no_allocation_of_the_step(tmp_path: Path) -> None:
    # a GPU trace inside one step: 1000 B were allocated before the profiler (seeded), 2 allocations recorded
    def mem(ts: float, nbytes: int, addr: int, total: int) -> dict[str, Any]:
        return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                "args": {"Bytes": nbytes, "Addr": addr, "Device Type": 1, "Device Id": 0, "Total Allocated": total,
                         "Total Reserved": 4096}}

    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
              mem(1.0, 100, 1, 1100), mem(2.0, 200, 2, 1300), mem(3.0, -100, 1, 1200)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (dev,) = analyze_memory(load_memory(path)).devices
    (step,) = dev.steps
    assert dev.seed_bytes == 1000 and dev.allocations == 2
    assert (step.allocations, step.allocated_bytes) == (dev.allocations, dev.allocated_bytes_total) == (2, 300)
    assert (step.peak_allocated_bytes, step.peak_reserved_bytes, step.fragmentation_at_peak_bytes) == (1300, 4096, 2796)
