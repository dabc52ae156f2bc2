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
