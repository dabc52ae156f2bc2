"""Span nesting: the vectorised depth method agrees with an exact stack walk, nested or not."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aiprof.trace import links


def stack_parents(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    out = np.full(start.shape, -1, dtype=np.int64)
    for t in np.unique(thread):
        sel = np.flatnonzero(thread == t)
        out[sel] = links._parents_by_stack(start[sel], end[sel], offset=int(sel[0]))
    return out


spans = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 30)), min_size=1, max_size=40
)


@settings(max_examples=400, deadline=None)
@given(spans)
def test_depth_method_with_fallback_equals_the_stack(raw: list[tuple[int, int, int]]) -> None:
    thread = np.array([t for t, _, _ in raw], dtype=np.int64)
    start = np.array([s for _, s, _ in raw], dtype=np.int64)
    end = start + np.array([d for _, _, d in raw], dtype=np.int64)
    order = np.lexsort((-(end - start), start, thread))
    thread, start, end = thread[order], start[order], end[order]
    expected = stack_parents(thread, start, end)
    got = links._parents_by_depth(thread, start, end)
    parent_end = end[np.maximum(got, 0)]
    bad = (got == links._ORPHAN) | ((got >= 0) & ((parent_end < end) | (parent_end <= start)))
    for t in np.unique(thread[bad]).tolist():
        sel = np.flatnonzero(thread == t)
        links._restack_bad_segments(got, sel, start[sel], end[sel], bad[sel])
    assert got.tolist() == expected.tolist()


def test_properly_nested_spans_need_no_fallback() -> None:
    thread = np.zeros(5, dtype=np.int64)
    start = np.array([0, 1, 2, 2, 6], dtype=np.int64)
    end = np.array([10, 5, 4, 2, 9], dtype=np.int64)
    assert links._parents_by_depth(thread, start, end).tolist() == [-1, 0, 1, 2, 0]


def test_thread_time_order_is_the_four_key_sort() -> None:
    """The faster order of nestable rows equals np.lexsort((-dur, ts, tid, pid)), ties included, and
    falls back to it for rows that are not in time order."""
    from aiprof.trace.links import _thread_time_order

    rng = np.random.default_rng(7)
    for trial in range(1500):
        n = int(rng.integers(0, 80))
        pid = rng.integers(0, 3, n).astype(np.int64) * (10**12 if trial % 2 else 1)
        tid = rng.integers(-2, 4, n).astype(np.int64)
        ts = rng.integers(0, 20, n).astype(np.int64)
        if trial % 5:
            ts = np.sort(ts)
        dur = rng.integers(0, 5, n).astype(np.int64)
        assert np.array_equal(_thread_time_order(pid, tid, ts, dur), np.lexsort((-dur, ts, tid, pid)))
    many = np.arange(70_000, dtype=np.int64)  # more than 2^16 thread codes: the plain stable sort
    assert np.array_equal(_thread_time_order(many, many % 7, many, many % 3), np.lexsort((-(many % 3), many, many % 7, many)))
