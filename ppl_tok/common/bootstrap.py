"""Percentile bootstrap intervals: the one resampling scheme of ppl-tok's reports.

For ``n`` items (questions, documents, prompts), a statistic ``T`` of the items
and a level ``L`` (0.95 by default):

1. draw ``R`` resamples, each ``n`` item indices uniformly with replacement,
   from numpy's ``default_rng(seed)``:
   ``idx = default_rng(seed).integers(0, n, size=(R, n))`` (:func:`resample_indices`),
   so the same seed and ``n`` give the same resamples whatever the statistic;
2. compute ``T_r = T(items[idx[r]])`` on each resample;
3. report ``T`` on the items with the interval of the ``(1 - L) / 2`` and
   ``(1 + L) / 2`` quantiles of ``T_1 .. T_R`` (numpy's default, linear
   interpolation: :func:`percentile_interval`).

Paired: where two figures of the same items are compared (two scorings of the
same questions, a numerator and a denominator of the same documents), an item's
values are resampled together. :func:`paired_difference` is the mean of
``d_i = a_i - b_i`` (``mean(a) - mean(b)``, the QA study's accuracy
differences); :func:`bootstrap_ratio` is ``sum(num_i) / sum(den_i)`` (the
perplexity study's gain in bits per byte); :func:`bootstrap_mean` is the mean
of one list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Interval(NamedTuple):
    """A statistic of the items and its percentile bootstrap interval."""

    value: float
    low: float
    high: float


def resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, n]`` item indices drawn uniformly with replacement from ``default_rng(seed)``."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def percentile_interval(statistics: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the resampled statistics."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    tail = (1 - level) / 2
    low, high = np.quantile(statistics, [tail, 1 - tail])
    return float(low), float(high)


def _vector(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError("the bootstrap needs a non-empty 1-D list of values")
    return x


def bootstrap_mean(values: Sequence[float] | np.ndarray, *, resamples: int = 10_000, seed: int = 0,
                   level: float = 0.95) -> Interval:
    """``mean(values)`` with a percentile bootstrap interval over the items."""
    x = _vector(values)
    means = x[resample_indices(len(x), resamples, seed)].mean(axis=1)
    return Interval(float(x.mean()), *percentile_interval(means, level))


def paired_difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *, resamples: int = 10_000,
                      seed: int = 0, level: float = 0.95) -> Interval:
    """``mean(a) - mean(b)`` with a paired bootstrap interval (item ``i``'s ``a_i`` and ``b_i`` resampled together)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) == 0:
        raise ValueError("the paired bootstrap needs two equal-length, non-empty 1-D lists")
    return bootstrap_mean(x - y, resamples=resamples, seed=seed, level=level)


def bootstrap_ratio(numerators: Sequence[float] | np.ndarray, denominators: Sequence[float] | np.ndarray, *,
                    resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> Interval:
    """``sum(num) / sum(den)`` with a paired bootstrap interval (an item's numerator and denominator together)."""
    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if num.shape != den.shape or num.ndim != 1 or len(num) == 0:
        raise ValueError("the bootstrap needs two equal-length, non-empty lists")
    idx = resample_indices(len(num), resamples, seed)
    ratios = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    return Interval(float(num.sum() / den.sum()), *percentile_interval(ratios, level))
