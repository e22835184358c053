"""The regression protocol on synthetic data: a known effect is recovered, a predictor of pure noise gains nothing
beyond the fold noise, and the gain is the Gaussian log-likelihood difference it says it is."""

import math

import numpy as np
import pandas as pd
import pytest

from ppl_tok.reading.regression import corrected_interval, cross_validate, minmax, paired, summarise


def synthetic(n=600, seed=1):
    rng = np.random.default_rng(seed)
    d = pd.DataFrame({"length": rng.integers(1, 12, n).astype(float), "freq": rng.normal(4, 1, n),
                      "surprisal": rng.gamma(2.0, 3.0, n), "noise": rng.normal(0, 1, n)})
    d["weak"] = d.surprisal + rng.normal(0, 6, n)  # the same effect seen through noise
    d["rt"] = 200 + 8 * d.length - 10 * d.freq + 6 * d.surprisal + rng.normal(0, 20, n)
    return d


def test_a_known_effect_is_recovered_and_noise_gains_nothing():
    d = synthetic()
    folds = cross_validate(d, "rt", ["length", "freq"], {"surprisal": ["surprisal"], "noise": ["noise"],
                                                          "weak": ["weak"]}, folds=10, repeats=2)
    s = summarise(folds).set_index("predictor")
    assert s.loc["surprisal", "low"] > 0.05  # the effect: a large, certain gain
    assert s.loc["noise", "low"] <= 0 <= s.loc["noise", "high"] or s.loc["noise", "high"] < 0
    assert s.loc["noise", "delta_loglik"] < 0.01
    # the true predictor beats its noisy copy beyond the fold noise, on the same folds
    mean, lo, _ = paired(folds, "rt", "surprisal", "weak")
    assert lo > 0 and mean == pytest.approx(s.loc["surprisal", "delta_loglik"] - s.loc["weak", "delta_loglik"])
    assert s.folds.tolist() == [20, 20, 20]


def test_the_gain_is_the_gaussian_log_likelihood_difference():
    """One fold by hand: OLS by numpy's lstsq, the log-likelihood with the variance at its maximum on the test rows."""
    d = synthetic(200, seed=3)
    folds = cross_validate(d, "rt", ["length"], {"s": ["surprisal"]}, folds=2, repeats=1, seed=5)
    from sklearn.model_selection import KFold

    train, test = next(KFold(2, shuffle=True, random_state=5).split(d))
    x = minmax(d, ["length", "surprisal"])

    def ll(cols):
        a = np.c_[np.ones(len(train)), x[cols].to_numpy()[train]]
        beta = np.linalg.lstsq(a, d.rt.to_numpy()[train], rcond=None)[0]
        r = d.rt.to_numpy()[test] - np.c_[np.ones(len(test)), x[cols].to_numpy()[test]] @ beta
        s2 = r @ r / len(test)
        return -0.5 * (math.log(2 * math.pi * s2) + 1)

    assert folds.delta_loglik[0] == pytest.approx(ll(["length", "surprisal"]) - ll(["length"]), abs=1e-9)


def test_the_corrected_interval_and_bad_input():
    mean, lo, hi = corrected_interval([1.0, 2.0, 3.0], 1, 9)
    assert mean == 2.0 and lo < 2.0 < hi
    from scipy import stats
    assert hi - mean == pytest.approx(stats.t.ppf(0.975, 2) * 1.0 * math.sqrt(1 / 3 + 1 / 9))
    d = synthetic(50)
    with pytest.raises(ValueError, match="no column 'x'"):
        cross_validate(d, "rt", ["x"], {})
    d.loc[3, "freq"] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cross_validate(d, "rt", ["freq"], {})
