import numpy as np
import pytest

from ppl_tok.common.bootstrap import (
    Interval,
    bootstrap_mean,
    bootstrap_ratio,
    paired_difference,
    percentile_interval,
    resample_indices,
)


def test_the_draws_are_those_of_the_qa_study():
    """The resamples are ``default_rng(seed).integers(0, n, (R, n))``: the QA study's stored intervals stay."""
    rng = np.random.default_rng(5)
    a, b = (rng.random(300) < 0.6).astype(float), (rng.random(300) < 0.5).astype(float)
    d = a - b
    means = d[np.random.default_rng(7).integers(0, 300, size=(3000, 300))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    assert paired_difference(a, b, resamples=3000, seed=7) == (d.mean(), low, high)
    assert np.array_equal(resample_indices(300, 3000, 7), np.random.default_rng(7).integers(0, 300, (3000, 300)))


def test_the_stored_figures_do_not_move():
    """Values the QA study's paired bootstrap and the perplexity study's ratio gave before they shared this module."""
    rng = np.random.default_rng(5)
    a, b = rng.random(300) < 0.6, rng.random(300) < 0.5
    num, den = rng.normal(size=40), rng.random(40) + 1
    assert paired_difference(a, b, resamples=3000, seed=7) == pytest.approx(
        (0.07666666666666666, 0.0, 0.15333333333333332), abs=1e-15)
    assert bootstrap_ratio(num, den, resamples=2000, seed=3) == pytest.approx(
        (0.14661767420172872, -0.06918547915328291, 0.35906909274846366), abs=1e-15)


def test_mean_ratio_and_interval():
    r = bootstrap_mean([1.0, 2.0, 3.0, 4.0])
    assert isinstance(r, Interval) and r.value == 2.5 and 1.0 <= r.low < r.value < r.high <= 4.0
    assert bootstrap_mean([1.0, 2.0, 3.0], seed=1) == bootstrap_mean([1.0, 2.0, 3.0], seed=1)
    assert bootstrap_ratio([1.0, 1.0], [2.0, 2.0]) == (0.5, 0.5, 0.5)
    assert paired_difference([1.0, 1.0], [1.0, 1.0]) == (0.0, 0.0, 0.0)
    assert percentile_interval(np.arange(101.0), 0.9) == pytest.approx((5.0, 95.0))
    for bad in (lambda: bootstrap_mean([]), lambda: paired_difference([1.0], [1.0, 2.0]),
                lambda: bootstrap_ratio([1.0], []), lambda: percentile_interval(np.ones(3), 1.0)):
        with pytest.raises(ValueError):
            bad()
