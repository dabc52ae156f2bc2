"""A synthetic many-rank job as rank arrival tables (tests/unit/test_arrival.py, bench/scale_out.py):
TP groups of 8 inside a node, DP groups across nodes, a clock per node, and three planted problems."""

from __future__ import annotations

import numpy as np

from aiprof.analysis.arrival import ArrivalTable

MS = 1_000_000
US = 1_000

def table(rows: list[tuple[int, str, str, int, int]], source: str = "kernel") -> ArrivalTable:
    """Rows of (step, group, collective, arrive_ns, end_ns), ordinals numbered as the map side does."""
    rows = sorted(rows, key=lambda r: r[3])
    seen: dict[tuple[int, str, str], int] = {}
    ordinal = []
    for step, group, coll, _, _ in rows:
        ordinal.append(seen.get((step, group, coll), 0))
        seen[(step, group, coll)] = ordinal[-1] + 1
    return ArrivalTable.of(
        source,
        [r[1] for r in rows],
        [r[2] for r in rows],
        step=np.asarray([r[0] for r in rows], dtype=np.int64),
        ordinal=np.asarray(ordinal, dtype=np.int64),
        arrive_ns=np.asarray([r[3] for r in rows], dtype=np.int64),
        end_ns=np.asarray([r[4] for r in rows], dtype=np.int64),
        message_bytes=np.full(len(rows), 1 << 20, dtype=np.int64),
    )


WORLD, TP = 1024, 8
SLOW_RANK, LATE_RANK, LATE_GROUP, SLOW_LINK_GROUP = 137, 600, "dp0", "tp50"


def synthetic_job(seed: int = 7, steps: int = 3, tp_per_step: int = 24, dp_per_step: int = 4,
                  world: int = 0) -> list[tuple[int, ArrivalTable]]:
    """Every rank runs the same schedule: ``tp_per_step`` all-reduces in its TP group (``tp{rank // 8}``), then
    ``dp_per_step`` in its DP group (``dp{rank % 8}``). Arrival = schedule + jitter (< 10 µs) + planted delays
    ((a) ``SLOW_RANK`` 3 ms late everywhere, (b) ``LATE_RANK`` 2 ms late at its DP collectives only); a
    collective ends when its last rank arrives plus 300 µs ((c) 600 µs in ``SLOW_LINK_GROUP``); each node
    (8 ranks) has its own clock, up to ±40 ms off. ``world`` ranks (default ``WORLD``)."""
    n = world or WORLD
    rng = np.random.default_rng(seed)
    step_ns, gap, per_step = 200 * MS, 4 * MS, tp_per_step + dp_per_step
    arrive = (np.arange(steps)[:, None] * step_ns + np.arange(per_step)[None, :] * gap)[None, :, :].repeat(n, axis=0)
    arrive = arrive + rng.integers(0, 10 * US, size=arrive.shape)
    arrive[SLOW_RANK] += 3 * MS
    arrive[LATE_RANK, :, tp_per_step:] += 2 * MS
    ranks = np.arange(n)
    # group id per (rank, collective k): TP groups 0..n/8-1, DP groups after them
    tp_id, dp_id = ranks // TP, n // TP + ranks % TP
    gid = np.where(np.arange(per_step)[None, :] < tp_per_step, tp_id[:, None], dp_id[:, None])  # (n, per_step)
    n_groups = n // TP + TP
    last = np.full((n_groups, steps, per_step), np.iinfo(np.int64).min, dtype=np.int64)
    for k in range(per_step):
        for st in range(steps):
            np.maximum.at(last[:, st, k], gid[:, k], arrive[:, st, k])
    transfer = np.full(n_groups, 300 * US, dtype=np.int64)
    transfer[int(SLOW_LINK_GROUP.removeprefix("tp"))] = 600 * US
    ends = np.empty_like(arrive)
    for k in range(per_step):
        ends[:, :, k] = last[gid[:, k], :, k] + transfer[gid[:, k]][:, None]
    clock = rng.integers(-40 * MS, 40 * MS, size=n // TP).repeat(TP)[:, None, None]
    arrive, ends = arrive + clock, ends + clock
    names = [f"tp{g}" for g in range(n // TP)] + [f"dp{g}" for g in range(TP)]
    step_col = np.repeat(np.arange(1, steps + 1), per_step)
    ordinal = np.tile(np.r_[np.arange(tp_per_step), np.arange(dp_per_step)], steps)
    out = []
    for r in range(n):
        labels = (names[tp_id[r]], names[dp_id[r]], "all_reduce")
        group = np.tile(np.r_[np.zeros(tp_per_step, dtype=np.int64), np.ones(dp_per_step, dtype=np.int64)], steps)
        out.append((r, ArrivalTable("kernel", labels, group, np.full(group.size, 2, dtype=np.int64), step_col,
                                    ordinal, arrive[r].reshape(-1), ends[r].reshape(-1),
                                    np.full(group.size, 1 << 20, dtype=np.int64))))
    return out
