"""torchtitan and torchtune write allocator snapshots as ``iteration_<N>[_exit]/rank<R>_memory_snapshot.pickle``
(torchtitan: ``--profiling.enable_memory_snapshot``, every ``profile_freq`` steps and at an OOM): ``aiprof
memory <folder>`` reads the OOM dump first, else the latest iteration, rank 0 first."""

from __future__ import annotations

import pickle
from pathlib import Path

from snapshots import block, entry, segment, snapshot

from aiprof.memory import load_memory
from aiprof.memory.load import iteration_snapshots

MiB = 1 << 20


def _dump(path: Path, blocks: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    live = [block((1 << 30) + k * MiB, MiB) for k in range(blocks)]
    trace = [entry("alloc", b["address"], b["size"], 10 + i) for i, b in enumerate(live)]
    path.write_bytes(pickle.dumps(snapshot([segment(1 << 30, live)], trace)))


def test_the_latest_iteration_then_the_oom_dump(tmp_path: Path) -> None:
    root = tmp_path / "outputs" / "memory_snapshot"
    for n, blocks in ((10, 1), (20, 2)):
        for rank in (1, 0):
            _dump(root / f"iteration_{n}" / f"rank{rank}_memory_snapshot.pickle", blocks + rank)
    latest = iteration_snapshots(tmp_path / "outputs")
    assert [p.relative_to(root).as_posix() for p in latest[:2]] == ["iteration_20/rank0_memory_snapshot.pickle",
                                                                    "iteration_20/rank1_memory_snapshot.pickle"]
    data = load_memory(root)
    assert data.segments is not None and int(data.segments.total.sum()) == 2 * MiB  # iteration_20, rank 0
    assert any("4 memory inputs" in w for w in data.warnings)
    _dump(root / "iteration_24_exit" / "rank0_memory_snapshot.pickle", 5)  # an OOM at step 25
    assert iteration_snapshots(root)[0].parent.name == "iteration_24_exit"
    oom = load_memory(tmp_path / "outputs").segments
    assert oom is not None and int(oom.total.sum()) == 5 * MiB
