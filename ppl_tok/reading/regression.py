"""The regression protocol of the reading study: k-fold cross-validated test log-likelihood gain over a baseline.

As Giulianelli et al. (EMNLP 2024, section 5; after Wilcox et al. 2020 and Pimentel et al. 2023) do it: every
predictor column is min-max scaled to [0, 1] over the data; for each of ``repeats`` shuffles (seeds ``seed + r``)
the rows are split into ``folds`` folds (scikit-learn's ``KFold``); on each fold's training rows an ordinary least
squares regression (scikit-learn's ``LinearRegression``) is fitted of the measure on the baseline predictors
(length and frequency of the word and of the two before it: the spill-over), and one on the baseline plus a target
set (a surprisal of the word and the whole-region surprisal of the two words before it). On the fold's test rows
each has the Gaussian log-likelihood per item with the variance at its maximum on those rows (statsmodels'
``OLS.loglike`` of the fitted parameters, divided by the rows):

    ll = -1/2 (log(2 pi sigma^2) + 1),   sigma^2 = RSS_test / n_test,

so the gain of a target set is ``Delta ll = ll_target - ll_baseline = -1/2 log(RSS_target / RSS_baseline)``
(nats per item; > 0: the surprisal predicts held-out rows better).

**The interval over folds.** The ``J = folds x repeats`` fold gains ``d_j`` share training rows, so their plain
standard error is too small; the interval is the corrected resampled t interval of Nadeau & Bengio (2003):
``mean(d) +- t_{J-1, 0.975} sd(d) sqrt(1/J + n_test/n_train)``. Two target sets compared on the same folds use
the per-fold differences (paired). A gain whose interval holds 0 is within the fold noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd


def _require_sklearn():
    try:
        from sklearn.linear_model import LinearRegression
        from sklearn.model_selection import KFold
        from threadpoolctl import threadpool_limits  # scikit-learn's own dependency
    except ImportError:  # pragma: no cover - the optional extra
        raise ImportError("the reading study's regressions need scikit-learn: pip install 'ppl-tok[reading]'") from None
    return LinearRegression, KFold, threadpool_limits


def minmax(data: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``data`` with ``columns`` scaled to [0, 1] (a constant column to 0)."""
    out = data.copy()
    for c in columns:
        lo, hi = float(data[c].min()), float(data[c].max())
        out[c] = (data[c] - lo) / (hi - lo) if hi > lo else 0.0
    return out


def _rss(model, x_train, y_train, x_test, y_test) -> float:
    model.fit(x_train, y_train)
    r = y_test - model.predict(x_test)
    return float(r @ r)


def cross_validate(data: pd.DataFrame, measure: str, baseline: Sequence[str], targets: Mapping[str, Sequence[str]],
                   *, folds: int = 10, repeats: int = 10, seed: int = 0) -> pd.DataFrame:
    """One row per (target, repeat, fold): the test log-likelihood gain ``delta_loglik`` (nats per item) of the
    baseline plus the target's columns over the baseline alone (module docstring). ``data`` must hold no NaN in
    the columns used (the caller drops and reports such rows)."""
    LinearRegression, KFold, threadpool_limits = _require_sklearn()
    with threadpool_limits(limits=1):  # each fit is rows x a dozen columns: BLAS threads only add synchronisation
        return _cross_validate(data, measure, baseline, targets, folds, repeats, seed, LinearRegression, KFold)


def _cross_validate(data, measure, baseline, targets, folds, repeats, seed, LinearRegression, KFold) -> pd.DataFrame:
    used = list(dict.fromkeys([*baseline, *(c for cols in targets.values() for c in cols)]))
    missing = [c for c in [measure, *used] if c not in data.columns]
    if missing:
        raise ValueError(f"the regression data has no column {missing[0]!r}")
    if data[[measure, *used]].isna().any().any():
        raise ValueError("the regression data holds NaN (drop those rows first, and say how many)")
    if not 2 <= folds <= len(data):
        raise ValueError(f"folds must be between 2 and the number of rows ({len(data)}), got {folds}")
    scaled = minmax(data, used)
    y = scaled[measure].to_numpy(float)
    base = scaled[list(baseline)].to_numpy(float)
    xs = {name: scaled[list(baseline) + list(cols)].to_numpy(float) for name, cols in targets.items()}
    model = LinearRegression()
    rows = []
    for r in range(repeats):
        for f, (train, test) in enumerate(KFold(folds, shuffle=True, random_state=seed + r).split(y)):
            rss0 = _rss(model, base[train], y[train], base[test], y[test])
            for name, x in xs.items():
                rss = _rss(model, x[train], y[train], x[test], y[test])
                rows.append({"measure": measure, "predictor": name, "repeat": r, "fold": f, "n_test": len(test),
                             "n_train": len(train), "delta_loglik": -0.5 * math.log(rss / rss0)})
    return pd.DataFrame(rows)


def corrected_interval(d: Sequence[float] | np.ndarray, n_test: float, n_train: float,
                       level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the corrected resampled t interval (Nadeau & Bengio 2003) of fold values ``d``."""
    from scipy import stats

    d = np.asarray(d, float)
    j = len(d)
    if j < 2:
        raise ValueError("an interval over folds needs at least two folds")
    mean = float(d.mean())
    se = float(d.std(ddof=1)) * math.sqrt(1.0 / j + n_test / n_train)
    half = float(stats.t.ppf(0.5 + level / 2, j - 1)) * se
    return mean, mean - half, mean + half


def summarise(folds: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per (measure, predictor): the mean gain over folds and its interval (:func:`corrected_interval`)."""
    out = []
    for (measure, name), g in folds.groupby(["measure", "predictor"], sort=False):
        mean, lo, hi = corrected_interval(g.delta_loglik, g.n_test.mean(), g.n_train.mean(), level)
        out.append({"measure": measure, "predictor": name, "delta_loglik": mean, "low": lo, "high": hi,
                    "folds": len(g)})
    return pd.DataFrame(out)


def paired(folds: pd.DataFrame, measure: str, a: str, b: str, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the gain of ``a`` minus that of ``b`` on the same folds (paired)."""
    g = folds[folds.measure == measure]
    ga = g[g.predictor == a].set_index(["repeat", "fold"])
    gb = g[g.predictor == b].set_index(["repeat", "fold"])
    if ga.empty or gb.empty:
        raise ValueError(f"no folds of {a if ga.empty else b!r} for {measure}")
    d = (ga.delta_loglik - gb.delta_loglik.reindex(ga.index)).to_numpy()
    return corrected_interval(d, ga.n_test.mean(), ga.n_train.mean(), level)
