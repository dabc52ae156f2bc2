"""Interval algebra against a brute-force boolean timeline."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aiprof.analysis import intervals as iv

HI = 200

raw_sets = st.lists(st.tuples(st.integers(0, 150), st.integers(0, 40)), max_size=8).map(
    lambda pairs: (
        np.array([s for s, _ in pairs], dtype=np.int64),
        np.array([s + d for s, d in pairs], dtype=np.int64),
    )
)


def cover(iset: iv.IntervalSet) -> np.ndarray:
    out = np.zeros(HI, dtype=bool)
    for s, e in zip(iset[0].tolist(), iset[1].tolist()):
        out[s:e] = True
    return out


def normalised(iset: iv.IntervalSet) -> bool:
    s, e = iset
    return bool((e > s).all() and (s[1:] > e[:-1]).all())


@settings(max_examples=300, deadline=None)
@given(raw_sets, raw_sets)
def test_set_operations_match_brute_force(ra: iv.IntervalSet, rb: iv.IntervalSet) -> None:
    a, b = iv.merge(*ra), iv.merge(*rb)
    assert (cover(a) == cover(ra)).all() and normalised(a)
    A, B = cover(a), cover(b)
    for result, expected in (
        (iv.intersect(a, b), A & B),
        (iv.subtract(a, b), A & ~B),
        (iv.union(a, b), A | B),
    ):
        assert normalised(result)
        assert (cover(result) == expected).all()
    window = (np.arange(HI) >= 10) & (np.arange(HI) < 120)
    assert (cover(iv.gaps(a, 10, 120)) == (~A & window)).all()
    assert iv.total(a) == int(A.sum())


@settings(max_examples=200, deadline=None)
@given(raw_sets, st.lists(st.tuples(st.integers(0, 190), st.integers(0, 60)), min_size=1, max_size=5))
def test_overlap_per_window(ra: iv.IntervalSet, windows: list[tuple[int, int]]) -> None:
    a = iv.merge(*ra)
    A = cover(a)
    starts = np.array([s for s, _ in windows], dtype=np.int64)
    ends = np.array([min(s + d, HI) for s, d in windows], dtype=np.int64)
    got = iv.overlap_per_window(a, starts, ends)
    assert got.tolist() == [int(A[s:e].sum()) for s, e in zip(starts.tolist(), ends.tolist())]


def test_empty_inputs() -> None:
    assert iv.total(iv.merge(*iv.EMPTY)) == 0
    assert iv.gaps(iv.EMPTY, 5, 9)[0].tolist() == [5]
    assert iv.overlap_per_window(iv.EMPTY, np.array([0]), np.array([10])).tolist() == [0]
