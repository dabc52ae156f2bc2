"""Array helpers where NumPy's general versions are slow on trace-sized integer columns.

``np.unique(a)`` without extra outputs hashes since NumPy 2.3; on a column of a million int64 values with
many distinct ones that is 5-25x slower than sorting (335 ms against 13 ms for 1.3M values with 500k
distinct), and ``np.setdiff1d`` and ``np.unique(axis=0)`` inherit the cost. These give the same results
for integer and boolean arrays (sorted distinct values), by sorting.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def unique(values: npt.ArrayLike) -> npt.NDArray[Any]:
    """Sorted distinct values of a 1-D integer or boolean array (``np.unique(values)``)."""
    ordered = np.sort(np.asarray(values).ravel())
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.shape, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def unique_inverse(values: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``np.unique(values, return_index=True, return_inverse=True)`` for a 1-D integer array, by one
    stable sort: the distinct values, the first position of each, and each value's index among them."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.ones(ordered.size, dtype=bool)
    new[1:] = ordered[1:] != ordered[:-1]
    inverse = np.empty(values.size, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new].astype(np.int64), order[new].astype(np.int64), inverse


def setdiff(values: npt.ArrayLike, remove: npt.ArrayLike) -> npt.NDArray[Any]:
    """Sorted distinct values of ``values`` that are not in ``remove`` (``np.setdiff1d``)."""
    distinct, gone = unique(values), unique(remove)
    return distinct[~_member(distinct, gone)]


def isin(values: npt.NDArray[Any], candidates: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """``np.isin(values, candidates)`` for integer arrays, by binary search (``np.isin`` sorts with a
    plain ``np.unique`` when the values span a wide range, which hashes and imports ``numpy.ma``)."""
    return _member(np.asarray(values), unique(candidates))


def _member(values: npt.NDArray[Any], sorted_distinct: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    if sorted_distinct.size == 0:
        return np.zeros(values.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_distinct, values), sorted_distinct.size - 1)
    found: npt.NDArray[np.bool_] = sorted_distinct[pos] == values
    return found


def unique_pairs(first: npt.NDArray[Any], second: npt.NDArray[Any]) -> list[tuple[int, int]]:
    """Distinct ``(first[i], second[i])`` pairs, sorted (``np.unique(np.stack(...), axis=0)``)."""
    if first.size == 0:
        return []
    order = np.lexsort((second, first))
    a, b = first[order], second[order]
    keep = np.ones(a.shape, dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return list(zip(a[keep].tolist(), b[keep].tolist(), strict=True))


def median(values: npt.ArrayLike) -> float:
    """``float(np.median(values))`` for a 1-D array without NaN, without importing ``numpy.ma`` (which
    ``np.median`` does on first use: 13 ms of a ~0.7 s run). NaN for an empty array."""
    ordered = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = ordered.size
    if n == 0:
        return float("nan")
    if n % 2:
        return float(ordered[n // 2])
    return (float(ordered[n // 2 - 1]) + float(ordered[n // 2])) / 2.0


def percentiles(values: npt.ArrayLike, q: list[float]) -> list[float]:
    """``np.percentile(values, q)`` (method ``linear``), value for value, for a non-empty 1-D array without
    NaN, without importing ``numpy.ma`` (``np.percentile`` does on first use, through ``np.unique``)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64).ravel())
    return [float(v) for v in sorted_percentiles(ordered, np.array([ordered.size]), np.array([0]), q)[0]]


def sorted_percentiles(ordered: npt.NDArray[np.float64], counts: npt.NDArray[np.int64], starts: npt.NDArray[np.int64],
                       q: list[float]) -> npt.NDArray[np.float64]:
    """``np.percentile`` (method ``linear``) of many groups at once: group ``g`` is the ascending slice
    ``ordered[starts[g]:starts[g] + counts[g]]`` (non-empty). Returns one row per group, one column per
    ``q``, with NumPy's arithmetic (index ``(n - 1) * q / 100``, its two-sided linear interpolation)."""
    quantiles = np.true_divide(np.asarray(q, dtype=np.float64), 100)
    n = counts.astype(np.int64)[:, None]
    virtual = (n - 1) * quantiles[None, :]
    previous = np.floor(virtual)
    above = virtual >= n - 1
    previous[above] = n.repeat(len(q), axis=1)[above] - 1
    nxt = np.where(above, previous, previous + 1)
    gamma = virtual - np.where(above, -1.0, previous)  # NumPy indexes the last value as -1 there
    base = starts.astype(np.int64)[:, None]
    a = ordered[base + previous.astype(np.int64)]
    b = ordered[base + nxt.astype(np.int64)]
    diff = b - a
    out: npt.NDArray[np.float64] = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    return out
