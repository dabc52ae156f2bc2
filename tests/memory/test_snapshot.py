"""The shared allocator snapshot, with every number computed independently here, and planted OOMs."""

from __future__ import annotations

import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from snapshots import block, entry, segment, snapshot

from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.report import MemoryReport

MiB = 1 << 20


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError("no classes")


@pytest.fixture(scope="module")
def raw(traces_dir: Path) -> dict[str, Any]:
    with open(traces_dir / "memory" / "transformer_lm_snapshot.pickle", "rb") as fh:
        loaded: dict[str, Any] = _Plain(fh).load()
    return loaded


@pytest.fixture(scope="module")
def report(traces_dir: Path) -> MemoryReport:
    return analyze_memory(load_memory(traces_dir / "memory" / "transformer_lm_snapshot.pickle"))


def _independent(raw: dict[str, Any]) -> dict[str, Any]:
    """The seeded peak as memory_viz's initially_allocated does it: replay the trace with recorded sizes,
    letting frees of unknown blocks go negative, then add every block that predates recording."""
    trace = raw["device_traces"][0]
    live: dict[int, int] = {}
    running = peak = 0
    pre_freed = 0
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            running += e["size"]
        elif e["action"] == "free_requested":
            if e["addr"] in live:
                running -= live.pop(e["addr"])
            else:
                pre_freed += e["size"]
                running -= e["size"]
        peak = max(peak, running)
    active = [b for s in raw["segments"] for b in s["blocks"] if b["state"] != "inactive"]
    still_live_before = sum(b["size"] for b in active if b["address"] not in live)
    return {"unseeded": peak, "seed": pre_freed + still_live_before, "seeded": peak + pre_freed + still_live_before}


def test_segments_and_identity(report: MemoryReport, raw: dict[str, Any]) -> None:
    dev = report.devices[0]
    state = dev.snapshot
    assert state is not None
    segs = raw["segments"]
    assert state.segments == len(segs) == 216
    assert state.large_segments == sum(s["segment_type"] == "large" for s in segs)
    blocks = [b for s in segs for b in s["blocks"]]
    assert state.reserved_bytes == sum(s["total_size"] for s in segs)
    assert state.cached_free_bytes == sum(b["size"] for b in blocks if b["state"] == "inactive")
    # free (internal rounding + external cached) + allocated (requested) = reserved
    assert state.rounding_loss_bytes + state.cached_free_bytes + state.requested_bytes == state.reserved_bytes
    assert state.requested_bytes + state.rounding_loss_bytes == state.allocated_bytes


def test_peak_is_seeded_with_blocks_from_before_recording(report: MemoryReport, raw: dict[str, Any]) -> None:
    dev = report.devices[0]
    want = _independent(raw)
    # aiprof counts block sizes (each request rounded to the allocator's 512-byte blocks): within 512 B a block
    n_live = sum(1 for g in dev.live_at_peak_by_site for _ in range(g.count))
    assert want["unseeded"] <= dev.unseeded_peak_bytes <= want["unseeded"] + 512 * n_live
    assert want["seed"] <= dev.seed_bytes <= want["seed"] + 512 * n_live
    assert want["seeded"] <= dev.peak_allocated_bytes <= want["seeded"] + 512 * n_live
    assert abs(dev.peak_allocated_bytes - dev.unseeded_peak_bytes) > 0.09 * dev.peak_allocated_bytes
    assert dev.reserved_at_peak_bytes == sum(s["total_size"] for s in raw["segments"])  # no segment events
    assert dev.fragmentation_at_peak_bytes == dev.reserved_at_peak_bytes - dev.peak_allocated_bytes


def test_live_at_peak_sites(report: MemoryReport, raw: dict[str, Any]) -> None:
    # independent: the blocks live at the seeded peak, grouped by their first non-library frame
    trace = raw["device_traces"][0]
    live: dict[int, dict[str, Any]] = {}
    best: dict[int, dict[str, Any]] = {}
    running = peak = 0
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            running += e["size"]
        elif e["action"] == "free_requested":
            running -= live.pop(e["addr"])["size"] if e["addr"] in live else e["size"]
        if running > peak:
            peak, best = running, dict(live)
    by_site: dict[str, int] = defaultdict(int)
    for e in best.values():
        user = next(f for f in e["frames"] if "site-packages" not in f["filename"])
        name = user["filename"].replace("\\", "/").rsplit("/", 1)[-1]
        by_site[f"{name}:{user['line']} {user['name']}"] += e["size"]
    top = sorted(by_site.items(), key=lambda kv: -kv[1])[:5]
    got = {s.site: s.bytes for s in report.devices[0].live_at_peak_by_site}
    for site, size in top:
        assert site in got and size <= got[site] <= size + 512 * 64
    assert top[0][0] == "model.py:39 forward"


def test_activations_dominate_the_transformer_peak(report: MemoryReport) -> None:
    cats = {c.category: c.bytes for c in report.devices[0].live_at_peak_by_category}
    assert cats["activation"] > 0.5 * report.devices[0].peak_allocated_bytes
    assert cats.get("unknown", 0) < 0.05 * report.devices[0].peak_allocated_bytes


def _oom_snapshot(tmp_path: Path, request: int, device_free: int, free_blocks: list[int]) -> MemoryReport:
    base = 1 << 30
    blocks = []
    addr = base
    for i, size in enumerate(free_blocks):
        blocks.append(block(addr, 64 * MiB))
        addr += 64 * MiB
        blocks.append(block(addr, size, state="inactive"))
        addr += size
    trace = [entry("alloc", b["address"], b["size"], 10 + i) for i, b in enumerate(blocks) if b["state"] != "inactive"]
    trace.append(entry("oom", 0, request, 1000, device_free=device_free))
    path = tmp_path / "oom.pickle"
    path.write_bytes(pickle.dumps(snapshot([segment(base, blocks)], trace)))
    return analyze_memory(load_memory(path))


def test_oom_verdict_fragmentation(tmp_path: Path) -> None:
    # 4 × 32 MiB cached free between live blocks, 16 MiB free on the device: 144 MiB free, no block of 100 MiB
    report = _oom_snapshot(tmp_path, 100 * MiB, 16 * MiB, [32 * MiB] * 4)
    (oom,) = report.devices[0].ooms
    assert oom.verdict == "fragmentation"
    assert oom.cached_free_bytes == 128 * MiB and oom.largest_free_block_bytes == 32 * MiB
    assert oom.top_sites and oom.top_sites[0].site == "train.py:10 forward"


def test_oom_verdict_capacity(tmp_path: Path) -> None:
    report = _oom_snapshot(tmp_path, 1024 * MiB, 16 * MiB, [2 * MiB] * 4)
    (oom,) = report.devices[0].ooms
    assert oom.verdict == "capacity" and oom.request_bytes == 1024 * MiB
