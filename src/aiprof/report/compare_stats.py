"""How much did the step time change, and is that more than noise? (``aiprof compare``'s statistics.)

``median_change(before, after)`` takes every step duration of each run and returns the change of the
median step in percent with a 95 % confidence interval: a percentile bootstrap of the ratio
``median(after) / median(before)``, each side resampled with replacement on its own, ``RESAMPLES``
times, from a fixed seed, so the same two runs always give the same interval. The change is
*significant* when the interval excludes 0. With fewer than ``MIN_STEPS`` steps on a side there is no
interval to trust: the result says so (``enough=False``) and carries the point estimate only. A side
of more than ``MAX_STEPS`` steps is resampled from ``MAX_STEPS`` evenly spaced ones (the medians are
still every step's): the interval is then slightly wider than it could be, and the cost bounded.

``paired_change(pairs)`` is the same question asked of several pairs of runs (BEFORE₁ AFTER₁, BEFORE₂
AFTER₂, …, best interleaved in time): two processes of one program differ by more than the steps of
either spread (memory layout, the core it ran on, the machine's other load: ±10 % between identical
runs of a small CPU loop on a 2-core machine, ``bench/RESULTS.md``), and one pair cannot see that noise.
Each pair gives the ratio of its medians; the estimate is their geometric mean, and the interval a
Student-t interval on the log ratios (``k − 1`` degrees of freedom), so the noise between runs is in it.
With one pair it is :func:`median_change`.

``verdict_result`` is the verdict rule every compared metric shares (the step time, the requests' latency):
"faster" / "slower" when the change is significant and beyond ±``noise_pct`` % (with too few samples, beyond it
on the point estimate alone), "unchanged" within it, "inconclusive" beyond it but not significant;
``change_text`` words a change with its interval.

numpy only; no timing, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

MIN_STEPS = 5  # per side; fewer: point estimate only, with a warning
RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 20240516
MAX_STEPS = 5_000
_MAX_CELLS = 4_000_000  # resamples × steps drawn at once (memory bound on very long runs)


# Two-sided 95 % Student-t quantiles by degrees of freedom (1..30); beyond 30, the normal's 1.96 is
# within 4 % of the t quantile and errs on the narrow side by less than the ratios' own rounding.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


@dataclass(frozen=True)
class MedianChange:
    """The change of the median step from BEFORE to AFTER, in percent of BEFORE's median."""

    before_median_ns: float
    after_median_ns: float
    change_pct: float
    ci_pct: tuple[float, float] | None  # None when ``enough`` is False
    significant: bool
    enough: bool  # both sides have at least ``MIN_STEPS`` steps (several pairs: always)
    pairs: int = 1  # pairs of runs the estimate rests on
    pair_changes_pct: tuple[float, ...] = ()  # each pair's change of its median (several pairs)


def median_change(
    before: Sequence[float], after: Sequence[float], *, confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES, seed: int = SEED,
) -> MedianChange:
    """The median change with its bootstrap confidence interval (see the module text). Both sides
    must hold at least one positive duration (the caller refuses a run without a baseline)."""
    b = _positive(before)
    a = _positive(after)
    if not b.size or not a.size:
        raise ValueError("median_change needs at least one step on each side")
    mb, ma = float(np.median(b)), float(np.median(a))
    change = 100.0 * (ma / mb - 1.0)
    if b.size < MIN_STEPS or a.size < MIN_STEPS:
        return MedianChange(mb, ma, change, None, False, False)
    rng = np.random.default_rng(seed)
    ratios = _resampled_medians(_thinned(a), resamples, rng) / _resampled_medians(_thinned(b), resamples, rng)
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = (100.0 * (q - 1.0) for q in np.percentile(ratios, [tail, 100.0 - tail]))
    lo, hi = min(lo, change), max(hi, change)  # the estimate always lies in its interval
    return MedianChange(mb, ma, change, (float(lo), float(hi)), bool(lo > 0.0 or hi < 0.0), True)


def paired_change(pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
                  *, confidence: float = CONFIDENCE) -> MedianChange:
    """The change over several pairs of runs (see the module text); one pair: :func:`median_change`.
    Only a 95 % interval is tabulated: another ``confidence`` with several pairs is refused."""
    if len(pairs) == 1:
        return median_change(pairs[0][0], pairs[0][1], confidence=confidence)
    if not pairs:
        raise ValueError("paired_change needs at least one pair of runs")
    if abs(confidence - 0.95) > 1e-9:
        raise ValueError("paired_change tabulates the 95 % interval only")
    medians = []
    for before, after in pairs:
        b, a = _positive(before), _positive(after)
        if not b.size or not a.size:
            raise ValueError("paired_change needs at least one step on each side of every pair")
        medians.append((float(np.median(b)), float(np.median(a))))
    logs = np.log(np.array([a / b for b, a in medians]))
    k = logs.size
    mean = float(logs.mean())
    t = _T95[k - 2] if k - 1 <= len(_T95) else 1.96
    half = t * float(logs.std(ddof=1)) / float(np.sqrt(k))
    change = 100.0 * (np.exp(mean) - 1.0)
    lo, hi = 100.0 * (np.exp(mean - half) - 1.0), 100.0 * (np.exp(mean + half) - 1.0)
    before_median = float(np.median([b for b, _ in medians]))
    return MedianChange(
        before_median, before_median * float(np.exp(mean)), float(change), (float(lo), float(hi)),
        bool(lo > 0.0 or hi < 0.0), True, pairs=k,
        pair_changes_pct=tuple(round(100.0 * (a / b - 1.0), 4) for b, a in medians),
    )


def _positive(values: Sequence[float]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    return arr[np.isfinite(arr) & (arr > 0)]


def _thinned(values: np.ndarray[tuple[int], np.dtype[np.float64]]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    if values.size <= MAX_STEPS:
        return values
    return values[np.linspace(0, values.size - 1, MAX_STEPS).astype(np.int64)]


def _resampled_medians(
    values: np.ndarray[tuple[int], np.dtype[np.float64]], resamples: int, rng: np.random.Generator
) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    """Medians of ``resamples`` resamples with replacement, drawn in chunks that bound memory."""
    n = values.size
    chunk = max(1, _MAX_CELLS // n)
    out = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = np.median(values[idx], axis=1)
    return out


VerdictResult = Literal["faster", "slower", "unchanged", "inconclusive"]


def verdict_result(stats: MedianChange, noise_pct: float) -> VerdictResult:
    """The verdict rule (module text) on a change where a rise is "slower"."""
    pct = stats.change_pct
    if stats.significant or not stats.enough:
        if pct < -noise_pct:
            return "faster"
        if pct > noise_pct:
            return "slower"
        return "unchanged"
    return "inconclusive" if abs(pct) > noise_pct else "unchanged"


def change_text(pct: float, stats: MedianChange) -> str:
    """"+3.1 % (95 % CI −2.0 … +8.4 %), not significant"; without an interval, the estimate alone."""
    if stats.ci_pct is None:
        return f"{signed_pct(pct)} %"
    lo, hi = stats.ci_pct
    verdict = "significant" if stats.significant else "not significant"
    return f"{signed_pct(pct)} % ({round(100 * CONFIDENCE)} % CI {signed_pct(lo)} … {signed_pct(hi)} %), {verdict}"


def signed_pct(value: float) -> str:
    """"+3.1", "−2.0", "±0.0"."""
    text = f"{abs(value):.1f}"
    if text.strip("0.") == "":
        return "±0.0"
    return ("+" if value > 0 else "−") + text
