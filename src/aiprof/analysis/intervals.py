"""Vectorised interval algebra on int64 ns: sort + sweep in numpy, never a Python loop per interval.

An *interval set* is a pair ``(starts, ends)`` of equal-length int64 arrays. Functions that return a set
return it *normalised*: sorted, disjoint, non-empty intervals (touching intervals are merged).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
IntervalSet = tuple[I64, I64]

EMPTY: IntervalSet = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def as_set(starts: Any, ends: Any) -> IntervalSet:
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def merge(starts: I64, ends: I64) -> IntervalSet:
    """Union of possibly overlapping intervals, normalised."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running_end = np.maximum.accumulate(e)
    # A new group begins where a start lies beyond every end seen so far.
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1]
    group_starts = np.flatnonzero(new_group)
    group_ends = np.append(group_starts[1:], s.size) - 1
    return s[group_starts], running_end[group_ends]


def union(*sets: IntervalSet) -> IntervalSet:
    if not sets:
        return EMPTY
    return merge(np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets]))


def total(iset: IntervalSet) -> int:
    """Covered length of a normalised set."""
    return int((iset[1] - iset[0]).sum())


def covered_before(iset: IntervalSet, points: I64) -> I64:
    """For each point t, the length of the normalised set that lies before t (the set's CDF)."""
    starts, ends = iset
    if starts.size == 0:
        return np.zeros(points.shape, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(ends - starts)))
    idx = np.searchsorted(starts, points, side="right")  # intervals that start at or before t
    before = cum[np.maximum(idx - 1, 0)]
    last = np.maximum(idx - 1, 0)
    partial = np.clip(points - starts[last], 0, ends[last] - starts[last])
    return np.where(idx > 0, before + partial, 0).astype(np.int64)


def overlap_per_window(iset: IntervalSet, win_starts: I64, win_ends: I64) -> I64:
    """Length of the normalised set inside each window (windows may overlap each other)."""
    return covered_before(iset, win_ends) - covered_before(iset, win_starts)


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Intersection of two normalised sets."""
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    # Points where coverage count (a + b) becomes 2 / drops below 2.
    starts = np.concatenate((a[0], b[0]))
    ends = np.concatenate((a[1], b[1]))
    times = np.concatenate((starts, ends))
    delta = np.concatenate((np.ones(starts.size, np.int64), -np.ones(ends.size, np.int64)))
    order = np.lexsort((delta, times))  # at equal times, ends (-1) before starts (+1)
    times, delta = times[order], delta[order]
    depth = np.cumsum(delta)
    opened = np.flatnonzero(depth == 2)
    out_s = times[opened]
    out_e = times[opened + 1]
    return merge(out_s, out_e)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """``a`` minus ``b`` for normalised sets."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    return complement_within(b, a)


def complement_within(b: IntervalSet, a: IntervalSet) -> IntervalSet:
    """Parts of normalised ``a`` not covered by normalised ``b``."""
    lo = min(int(a[0][0]), int(b[0][0])) if b[0].size else int(a[0][0])
    hi = max(int(a[1][-1]), int(b[1][-1])) if b[0].size else int(a[1][-1])
    gaps_s = np.concatenate(([lo], b[1]))
    gaps_e = np.concatenate((b[0], [hi]))
    gaps = merge(gaps_s, gaps_e)
    return intersect(a, gaps)


def clip(iset: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """The part of a normalised set inside [lo, hi)."""
    s = np.maximum(iset[0], lo)
    e = np.minimum(iset[1], hi)
    keep = e > s
    return s[keep], e[keep]


def gaps(iset: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """The parts of [lo, hi) not covered by the normalised set."""
    inside = clip(iset, lo, hi)
    s = np.concatenate(([lo], inside[1]))
    e = np.concatenate((inside[0], [hi]))
    keep = e > s
    return s[keep], e[keep]
