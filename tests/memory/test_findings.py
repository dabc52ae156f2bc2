"""Memory findings from MemoryReports of small planted snapshots."""

from __future__ import annotations

import pickle
from pathlib import Path

from snapshots import block, entry, segment, snapshot

from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.report import AllocatorStats, MemoryReport
from aiprof.rules.registry import memory_findings

MiB = 1 << 20


def _report(tmp_path: Path, live: int, cached: int, capacity: int | None = None, **settings: object) -> MemoryReport:
    base = 1 << 32
    snap = snapshot([segment(base, [block(base, live), block(base + live, cached, "inactive")])],
                    [entry("alloc", base, live, 10)], **settings)
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap))
    return analyze_memory(load_memory(path), capacity)


def _ids(report: MemoryReport) -> list[str]:
    return [f.id for f in memory_findings(report)]


def test_fragmentation_advises_expandable_segments_unless_already_on(tmp_path: Path) -> None:
    report = _report(tmp_path, 512 * MiB, 1024 * MiB)
    (frag,) = [f for f in memory_findings(report) if f.id == "mem_fragmentation"]
    assert "expandable_segments:True" in frag.fix and frag.evidence["est_saving_bytes"] == 1024 * MiB
    on = _report(tmp_path, 512 * MiB, 1024 * MiB, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    (frag,) = [f for f in memory_findings(on) if f.id == "mem_fragmentation"]
    assert "already on" in frag.fix
    assert "mem_fragmentation" not in _ids(_report(tmp_path, 512 * MiB, 16 * MiB))


def test_capacity_findings(tmp_path: Path) -> None:
    assert "mem_near_capacity" in _ids(_report(tmp_path, 900 * MiB, 50 * MiB, capacity=1000 * MiB))
    assert "mem_underused" in _ids(_report(tmp_path, 100 * MiB, 50 * MiB, capacity=1000 * MiB))
    plain = _ids(_report(tmp_path, 600 * MiB, 50 * MiB, capacity=1000 * MiB))
    assert "mem_near_capacity" not in plain and "mem_underused" not in plain
    assert not {"mem_near_capacity", "mem_underused"} & set(_ids(_report(tmp_path, 100 * MiB, 50 * MiB)))


def test_the_memory_thresholds_are_rule_options(tmp_path: Path) -> None:
    """``--rule-option mem_…=`` reaches the memory rules, in ``aiprof memory`` as in the library call."""
    from aiprof.cli import main
    from aiprof.rules.options import RuleOptions

    report = _report(tmp_path, 600 * MiB, 50 * MiB, capacity=1000 * MiB)  # 65 % of the device reserved at the peak
    assert not {"mem_near_capacity", "mem_underused"} & set(_ids(report))
    near = RuleOptions.from_assignments(["mem_near_capacity_fraction=0.6"])
    assert "mem_near_capacity" in [f.id for f in memory_findings(report, near)]
    roomy = RuleOptions.from_assignments(["mem_underused_fraction=0.9"])
    assert "mem_underused" in [f.id for f in memory_findings(report, roomy)]
    out = tmp_path / "m.json"
    gib = f"{1000 / 1024:.10f}"
    base = ["memory", str(tmp_path / "s.pickle"), "--device-memory-gib", gib, "-o"]
    assert main([*base, str(out), "--rule-option", "mem_near_capacity_fraction=0.6"]) == 0
    assert '"mem_near_capacity"' in out.read_text()
    assert main([*base, str(out), "--force"]) == 0
    assert '"mem_near_capacity"' not in out.read_text()
    assert main([*base, str(out), "--force", "--rule-option", "mem_near_capacity_fraction=2"]) == 2  # one-line error


def test_retries_and_non_pytorch_memory_from_captured_stats(tmp_path: Path) -> None:
    report = _report(tmp_path, 512 * MiB, 16 * MiB)
    report.stats = AllocatorStats(samples=3, num_alloc_retries=4, num_ooms=0, inactive_split_bytes_peak=0,
                                  non_pytorch_bytes=3 << 30)
    ids = _ids(report)
    assert "mem_fragmentation" in ids and "mem_non_pytorch" in ids
