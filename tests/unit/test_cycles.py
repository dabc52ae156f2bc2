"""Profiler cycles of one process are one rank, not several (aiprof.trace.cycles)."""

from __future__ import annotations

from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.run import analyze_paths
from aiprof.trace.cycles import Identity, cycle_groups
from aiprof.trace.model import Trace
from tests.kineto_builder import TraceBuilder

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"


def _cycle(path: Path, first_step: int, start_us: float, *, pid: int = 4242, rank: int | None = None) -> Path:
    """One cycle: three steps of one launch each, starting at ``start_us``."""
    b = TraceBuilder(pid=pid, tid=pid)
    for k in range(3):
        t = start_us + k * 100
        b.step(first_step + k, ts=t, dur=90)
        op = b.cpu_op("aten::mm", ts=t + 10, dur=20)
        b.launch(op, kernel="sgemm", kernel_ts=t + 35, kernel_dur=40)
    if rank is not None:
        b.distributed(rank=rank, world_size=2)
    return b.write(path)


def test_cycles_of_one_process_are_one_rank_with_every_step(tmp_path: Path) -> None:
    _cycle(tmp_path / "host_1.1000.pt.trace.json", 1, 0)
    _cycle(tmp_path / "host_1.2000.pt.trace.json", 11, 5_000)
    run = analyze_paths([tmp_path], workers=1)
    assert len(run.ranks) == 1
    numbers = [w.number for w in run.ranks[0].windows]
    assert numbers == [1, 2, 3, 11, 12, 13]
    assert any("profiler cycles of one process" in w and "cycle 2" in w for w in run.warnings)


def test_load_merges_cycles_too(tmp_path: Path) -> None:
    _cycle(tmp_path / "a.pt.trace.json", 1, 0)
    _cycle(tmp_path / "b.pt.trace.json", 4, 1_000)
    with pytest.warns(Warning):
        loaded = aiprof.load(tmp_path)
    traces = [loaded] if isinstance(loaded, Trace) else list(loaded.traces)
    assert len(traces) == 1
    assert len(traces[0].steps()) == 6
    # Each cycle's launch still links to its own kernel: ids were offset, not shared.
    corr = traces[0].columns.correlation
    assert len(set(corr[corr >= 0].tolist())) == len(corr[corr >= 0]) // 2


def test_overlapping_files_of_one_pid_stay_ranks(tmp_path: Path) -> None:
    _cycle(tmp_path / "rank0.json", 1, 0)
    _cycle(tmp_path / "rank1.json", 1, 50)  # same pid (containers), same time: two ranks
    run = analyze_paths([tmp_path], workers=1)
    assert sorted(r.rank for r in run.ranks) == [0, 1]


def test_distinct_distributed_ranks_are_never_cycles(tmp_path: Path) -> None:
    _cycle(tmp_path / "x.json", 1, 0, rank=0)
    _cycle(tmp_path / "y.json", 4, 5_000, rank=1)
    run = analyze_paths([tmp_path], workers=1)
    assert len(run.ranks) == 2


def test_grouping_rule() -> None:
    a = Identity("h", 7, None, 0, 10)
    b = Identity("h", 7, None, 20, 30)
    assert cycle_groups([b, a]) == [[1, 0]]  # time order
    assert cycle_groups([a, Identity("other", 7, None, 20, 30)]) == []  # another host
    assert cycle_groups([a, Identity("h", 8, None, 20, 30)]) == []  # another pid
    assert cycle_groups([a, Identity("h", 7, None, 5, 30)]) == []  # overlap
    assert cycle_groups([Identity("h", 7, 0, 0, 10), Identity("h", 7, 0, 20, 30)]) == [[0, 1]]  # same rank


@pytest.mark.skipif(not (SHARED / "kineto-tbplugin").is_dir(), reason="shared traces absent")
def test_tensorboard_cycles_folder_is_one_rank() -> None:
    folder = SHARED / "kineto-tbplugin" / "samples" / "resnet50_num_workers_0"
    run = analyze_paths([folder], workers=1)
    assert len(run.ranks) == 1
    assert len(run.ranks[0].windows) == 12  # 6 steps in each of the two cycles


MULTI_RANK = [
    "hta/trace_filter",
    "param/dlrm_8rank",
    "astra-sim/megatron_tp8",
    "tracelens/h100",
    "tracelens/mi300",
]


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces absent")
@pytest.mark.parametrize("folder", MULTI_RANK)
def test_shared_multi_file_sets_are_not_cycles(folder: str) -> None:
    """Every multi-file set of the shared traces: no two files are cycles of one process."""
    from aiprof.trace.cycles import identity
    from aiprof.trace.readers import load_ranks
    from aiprof.trace.runset import find_trace_files

    idents = []
    for path in find_trace_files(SHARED / folder):
        for trace in load_ranks(path):
            idents.append(identity(trace))
    assert len(idents) >= 2
    assert cycle_groups(idents) == []
