"""The cross-rank arrival analysis (aiprof.analysis.arrival) on rank tables with known answers, and a synthetic
1,024-rank job with three planted problems: each found with its culprit, nothing else flagged."""

from __future__ import annotations

import numpy as np
import pytest

from aiprof.analysis.arrival import NOISE_FLOOR_NS, cross_rank
from arrival_job import table

MS = 1_000_000
US = 1_000


def test_the_last_rank_is_credited_with_its_lead_over_the_next_latest() -> None:
    # Two all-reduces per step, 3 ranks; rank 2 arrives 5 ms after rank 1, which is 1 ms after rank 0.
    tables = []
    for rank, delay in ((0, 0), (1, 1 * MS), (2, 6 * MS)):
        rows = []
        for step in (1, 2):
            for k in range(2):
                t0 = step * 100 * MS + k * 20 * MS
                rows.append((step, "default", "all_reduce", t0 + delay, t0 + 6 * MS + 500 * US))
        tables.append((rank, table(rows)))
    x = cross_rank(tables)
    assert x is not None
    assert x.matched_instances == 4 and x.steps == 2 and x.unmatched_rows == 0
    assert x.median_skew_ns == 6 * MS
    by_rank = {r.rank: r for r in x.per_rank}
    assert by_rank[2].last_arrivals == 4 and by_rank[2].caused_ns == 4 * 5 * MS
    assert by_rank[2].caused_ns_per_step == 10 * MS
    assert by_rank[0].caused_ns == by_rank[1].caused_ns == 0
    # The victims' wait is evidence: rank 0 waits 6 ms per instance, rank 1 5 ms, rank 2 none.
    assert (by_rank[0].waited_ns, by_rank[1].waited_ns, by_rank[2].waited_ns) == (24 * MS, 20 * MS, 0)
    assert [r.rank for r in x.culprits(1 * MS)] == [2]
    assert x.groups[0].top_culprit == 2 and x.groups[0].median_transfer_ns == 500 * US
    assert x.grid.ranks == [0, 1, 2] and x.grid.steps == [1, 2]
    assert x.grid.caused_ns == [[0, 0, 10 * MS], [0, 0, 10 * MS]]
    assert not x.clock_corrected and not x.slow_groups


def test_gaps_below_the_noise_floor_credit_nobody() -> None:
    tables = [(r, table([(1, "default", "all_reduce", 10 * MS + r * (NOISE_FLOOR_NS // 4), 12 * MS)]))
              for r in range(4)]
    x = cross_rank(tables)
    assert x is not None
    assert all(r.caused_ns == 0 for r in x.per_rank) and x.culprits(0) == []


def test_instances_only_one_rank_recorded_are_left_unmatched() -> None:
    a = table([(1, "default", "all_reduce", 0, MS), (1, "default", "all_reduce", 5 * MS, 6 * MS)])
    b = table([(1, "default", "all_reduce", 0, MS)])  # its recording missed the second one
    x = cross_rank([(0, a), (1, b)])
    assert x is not None and x.matched_instances == 1 and x.unmatched_rows == 1


def test_one_rank_or_no_shared_collective_gives_nothing() -> None:
    a = table([(1, "g0", "all_reduce", 0, MS)])
    b = table([(1, "g1", "all_reduce", 0, MS)])
    assert cross_rank([(0, a)]) is None
    assert cross_rank([(0, a), (1, b)]) is None


def test_a_rank_whose_clock_runs_ahead_is_corrected_from_collective_ends() -> None:
    # Rank 1's clock is 50 ms ahead; in truth rank 1 arrives 2 ms after rank 0 every time.
    rows0, rows1 = [], []
    for k in range(6):
        t0 = k * 30 * MS
        end = t0 + 2 * MS + 300 * US
        rows0.append((1, "default", "all_reduce", t0, end))
        rows1.append((1, "default", "all_reduce", t0 + 2 * MS + 50 * MS, end + 50 * MS))
    x = cross_rank([(0, table(rows0)), (1, table(rows1))])
    assert x is not None and x.clock_corrected
    by_rank = {r.rank: r for r in x.per_rank}
    assert abs(by_rank[1].clock_offset_ns - by_rank[0].clock_offset_ns) == 50 * MS
    assert by_rank[1].last_arrivals == 6 and by_rank[1].caused_ns == 6 * 2 * MS


# ---------------------------------------------------------------------------------------------------
# 1,024 ranks: TP groups of 8 inside a node, DP groups across nodes; three planted problems (arrival_job.py)
# ---------------------------------------------------------------------------------------------------
from arrival_job import LATE_GROUP, LATE_RANK, SLOW_LINK_GROUP, SLOW_RANK, TP, WORLD, synthetic_job  # noqa: E402


@pytest.fixture(scope="module")
def job_1024() -> object:
    x = cross_rank(synthetic_job())
    assert x is not None
    return x


def test_1024_ranks_the_two_late_ranks_are_the_culprits_and_nobody_else(job_1024: object) -> None:
    x = job_1024
    assert x.ranks == WORLD and x.clock_corrected
    culprits = x.culprits(1 * MS)
    assert [c.rank for c in culprits] == [SLOW_RANK, LATE_RANK]
    slow, late = culprits
    # (a) 3 ms late at all 28 collectives of a step; (b) 2 ms late at the 4 DP ones.
    assert slow.caused_ns_per_step == pytest.approx(28 * 3 * MS, rel=0.01)
    assert late.caused_ns_per_step == pytest.approx(4 * 2 * MS, rel=0.02)
    assert x.straggler_ranks == [SLOW_RANK, LATE_RANK]
    assert x.straggler_saving_ns_per_step == pytest.approx(28 * 3 * MS + 4 * 2 * MS, rel=0.01)


def test_1024_ranks_the_late_group_names_its_culprit(job_1024: object) -> None:
    x = job_1024
    dp0 = [g for g in x.groups if g.group == LATE_GROUP]
    assert dp0 and dp0[0].top_culprit == LATE_RANK and dp0[0].ranks == WORLD // TP
    tp17 = [g for g in x.groups if g.group == f"tp{SLOW_RANK // TP}"]
    assert tp17 and tp17[0].top_culprit == SLOW_RANK


def test_1024_ranks_the_slow_link_is_the_only_slow_group(job_1024: object) -> None:
    x = job_1024
    assert [g.group for g in x.slow_groups] == [SLOW_LINK_GROUP]
    assert x.slow_groups[0].ratio == pytest.approx(2.0, rel=0.05)


def test_1024_ranks_a_balanced_job_flags_nothing() -> None:
    import aiprof.analysis.arrival as arrival

    tables = synthetic_job(seed=3)
    # Undo the plants: rebuild without delays and slow link by shifting the planted rows back.
    clean = []
    for r, t in tables:
        arrive = t.arrive_ns.copy()
        if r == SLOW_RANK:
            arrive -= 3 * MS
        if r == LATE_RANK:
            arrive[np.asarray([g.startswith("dp") for g in t.group_names()])] -= 2 * MS
        clean.append((r, arrival.ArrivalTable(t.source, t.labels, t.group, t.collective, t.step, t.ordinal, arrive,
                                              t.end_ns, t.message_bytes)))
    x = cross_rank(clean)
    assert x is not None
    assert x.culprits(1 * MS) == []


# ---------------------------------------------------------------------------------------------------
# The map side on CPU runs: the outermost collective op's start is the arrival, its end is unknown
# ---------------------------------------------------------------------------------------------------
def test_a_cpu_run_arrives_at_its_collective_ops_and_its_clock_is_left_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import aiprof
    from aiprof.analysis.run import analyze
    from kineto_builder import TraceBuilder

    paths = []
    for rank, late in ((0, 0), (1, 8000)):  # rank 1 arrives 8 ms late at every all-reduce
        b = TraceBuilder()
        b.distributed(rank=rank, world_size=2, backend="gloo")
        for n in range(3):
            t0 = n * 30_000
            b.step(n, ts=t0, dur=29_000)
            start = t0 + 1_000 + late
            # gloo's allreduce op returns early on the late rank, late on the early one: ends say nothing
            b.cpu_op("c10d::allreduce_", ts=start, dur=20_000 - late if rank == 0 else 200)
            b.cpu_op("record_param_comms", ts=start + 5, dur=50)  # nested: not a second collective
        paths.append(b.write(tmp_path / f"rank{rank}.json"))
    run = analyze(aiprof.load(tmp_path))
    x = run.cross_rank
    assert x is not None and x.source == "cpu op"
    assert x.matched_instances == 3 and not x.clock_corrected
    by_rank = {r.rank: r for r in x.per_rank}
    assert by_rank[1].last_arrivals == 3 and by_rank[1].caused_ns_per_step == 8 * MS
    assert all(g.median_transfer_ns == -1 for g in x.groups)
