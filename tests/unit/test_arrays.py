"""aiprof.arrays gives exactly what the NumPy functions it replaces give."""

from __future__ import annotations

import numpy as np
import pytest

from aiprof.arrays import setdiff, unique, unique_inverse, unique_pairs


@pytest.mark.parametrize("size, distinct", [(0, 1), (1, 1), (7, 3), (10_000, 50), (10_000, 9_000)])
def test_same_as_numpy(size: int, distinct: int) -> None:
    rng = np.random.default_rng(size + distinct)
    values = rng.integers(-distinct, distinct, size).astype(np.int64)
    other = rng.integers(-distinct, distinct, size // 3).astype(np.int64)
    assert np.array_equal(unique(values), np.unique(values))
    assert unique(values).dtype == values.dtype
    assert np.array_equal(setdiff(values, other), np.setdiff1d(values, other))
    assert np.array_equal(unique(values > 0), np.unique(values > 0))
    pairs = np.unique(np.stack((values, values % 5), axis=1), axis=0) if size else np.zeros((0, 2), np.int64)
    assert unique_pairs(values, values % 5) == [tuple(p) for p in pairs.tolist()]
    for mine, numpys in zip(unique_inverse(values), np.unique(values, return_index=True, return_inverse=True), strict=True):
        assert np.array_equal(mine, numpys)


@pytest.mark.parametrize("values", [[3], [1, 2], [5, 1, 4, 2], [2.5, -1.0, 7.25], list(range(1001))])
def test_median_same_as_numpy(values: list[float]) -> None:
    from aiprof.arrays import median

    assert median(values) == float(np.median(values))
    assert median(np.asarray(values)) == float(np.median(np.asarray(values)))


def test_isin_same_as_numpy() -> None:
    from aiprof.arrays import isin

    rng = np.random.default_rng(7)
    values = rng.integers(-(10**12), 10**12, 5000)
    candidates = np.concatenate((values[::7], rng.integers(-(10**12), 10**12, 100)))
    assert np.array_equal(isin(values, candidates), np.isin(values, candidates))
    assert np.array_equal(isin(values, []), np.isin(values, np.array([], dtype=np.int64)))
    assert isin(values.reshape(50, 100), candidates).shape == (50, 100)


@pytest.mark.parametrize("size", [1, 2, 3, 10, 11, 99, 1000])
def test_percentiles_same_as_numpy(size: int) -> None:
    """Value for value (kernel_variance compares p90 with p10 × a ratio: a last-bit change could flip it)."""
    from aiprof.arrays import percentiles, sorted_percentiles

    rng = np.random.default_rng(size)
    groups = [rng.integers(0, 10**7, size).astype(np.float64), rng.exponential(1e5, size).round(),
              np.repeat(rng.integers(0, 4, max(size // 3, 1)) * 1000.0, 3)[:size]]
    q = [10, 50, 90]
    for values in groups:
        assert percentiles(values, q) == [float(v) for v in np.percentile(values, q)]
    ordered = np.concatenate([np.sort(g) for g in groups])
    counts = np.array([g.size for g in groups], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    batched = sorted_percentiles(ordered, counts, starts, q)
    for row, values in zip(batched.tolist(), groups):
        assert row == [float(v) for v in np.percentile(values, q)]
