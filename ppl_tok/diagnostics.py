"""How far an importance-sampling estimate of ``log p(x | c)`` can be trusted.

Given the log-weights ``log w_i = log p(x, v_i) - log q(v_i)`` of ``N`` samples
(Geh et al., 2024, Sec. 5, Eq. 1: ``p_hat = (1/N) sum_i w_i``), with the
self-normalised weights ``pi_i = w_i / sum_j w_j``:

* **Standard error on the log scale** (delta method): ``se(log p_hat) ~=
  se(p_hat) / p_hat = sqrt(sum_i (N pi_i - 1)^2 / (N (N - 1)))``, computed from
  ``pi`` alone, so it never leaves log space.
* **Effective sample size** (Kong, 1992): ``ESS = 1 / sum_i pi_i^2``.
* **PSIS k-hat** (Vehtari et al., 2015, "Pareto smoothed importance sampling";
  the quantity stock ``pyro.infer.importance.psis_diagnostic`` reports): the
  shape of a generalized Pareto fitted (``pyro.ops.stats.fit_generalized_pareto``)
  to the largest ``M = ceil(min(N / 5, 3 sqrt N))`` weights above the next one.
  ``k < 0.5``: the weights have finite variance; ``0.5 < k < 0.7``: usable, slow;
  ``k > 0.7``: the estimate is unreliable however large ``ESS`` looks (a
  proposal that misses the mass can have a high ESS and be far off).

:func:`estimate_warnings` adds the checks no sampler can fail honestly: ``p > 1``,
an estimate below the probability of one tokenization known in the same run
(the marginal sums it, so it is a lower bound), or outside a certified bracket
(:func:`ppl_tok.search.marginal_bounds`).
"""

from __future__ import annotations

import math

import torch
from pyro.ops.stats import fit_generalized_pareto

#: k-hat above which an importance-sampling estimate is flagged (Vehtari et al., 2015)
KHAT_LIMIT = 0.7
#: the fewest tail weights a Pareto fit is attempted on
MIN_TAIL = 5
#: slack (nats) for comparisons with exactly known log-probabilities
TOLERANCE = 1e-6


def log_mean_exp(log_w: torch.Tensor, n: int | None = None) -> float:
    """``log((1/n) sum_i exp(log_w_i))`` (``n`` defaults to the number of weights; ``-inf`` if none)."""
    n = log_w.numel() if n is None else n
    if log_w.numel() == 0 or n == 0:
        return -math.inf
    return float(torch.logsumexp(log_w.double(), 0)) - math.log(n)


def normalized_weights(log_w: torch.Tensor) -> torch.Tensor:
    """``pi_i = w_i / sum_j w_j`` (all zeros when every weight is zero; never NaN)."""
    log_w = log_w.double()
    if not torch.isfinite(log_w).any():
        return torch.zeros_like(log_w)
    return (log_w - torch.logsumexp(log_w, 0)).exp()


def ess(log_w: torch.Tensor) -> float:
    """Kong's effective sample size ``1 / sum_i pi_i^2`` (0 when every weight is zero)."""
    pi = normalized_weights(log_w)
    total = float((pi * pi).sum())
    return 0.0 if total == 0.0 else 1.0 / total


def log_standard_error(log_w: torch.Tensor) -> float:
    """The delta-method standard error of ``log p_hat``: ``sqrt(sum_i (N pi_i - 1)^2 / (N (N - 1)))``.

    ``inf`` when it cannot be estimated (one sample, or every weight zero).
    """
    n = log_w.numel()
    pi = normalized_weights(log_w)
    if n < 2 or float(pi.sum()) == 0.0:
        return math.inf
    return math.sqrt(float(((n * pi - 1.0) ** 2).sum()) / (n * (n - 1)))


def psis_khat(log_w: torch.Tensor) -> float | None:
    """The PSIS k-hat of the weights (``None`` when the tail has fewer than :data:`MIN_TAIL` distinct weights).

    Equal weights (a proposal equal to the posterior) have no tail: ``-inf``.
    """
    log_w = log_w.double()
    finite = log_w[torch.isfinite(log_w)]
    if finite.numel() == 0:
        return None
    if finite.numel() == log_w.numel() and float(finite.max() - finite.min()) == 0.0:
        return -math.inf
    finite = torch.sort(finite - finite.max()).values
    tail_size = int(math.ceil(min(0.2 * log_w.numel(), 3.0 * math.sqrt(log_w.numel()))))
    cutoff = float(finite[-tail_size - 1]) if finite.numel() > tail_size else -math.inf
    cutoff = max(cutoff, math.log(1e-15))
    tail = finite[finite > cutoff]
    if tail.numel() < MIN_TAIL:
        return None
    k, _ = fit_generalized_pareto(tail.exp() - math.exp(cutoff))
    k = float(k)
    return k if math.isfinite(k) else None


def estimate_warnings(log_marginal: float, *, khat: float | None = None, num_nonzero: int | None = None,
                      num_samples: int | None = None, known: dict[str, float] | None = None,
                      bracket: tuple[float, float] | None = None) -> list[str]:
    """The reasons not to trust an estimate of ``log p(x | c)``, as sentences (empty: none found).

    :param known: log-probabilities known in the same run of single tokenizations
        or certified lower bounds (name -> value): the marginal is at least each.
    :param bracket: a certified ``(lower, upper)`` bracket of the marginal.
    """
    out = []
    if num_nonzero == 0:
        out.append(f"no sample of {num_samples} has non-zero weight: the estimate is log 0 (the proposal never "
                   "reached a tokenization of the string with positive probability)")
    if khat is not None and khat > KHAT_LIMIT:
        out.append(f"PSIS k-hat {khat:.2f} > {KHAT_LIMIT}: the weights are too heavy-tailed for the estimate to be "
                   "reliable, whatever the ESS (use more samples or a better proposal)")
    if log_marginal > TOLERANCE:
        out.append(f"log p = {log_marginal:+.4f} > 0: a probability above 1 is impossible; the estimate is noise")
    for name, value in (known or {}).items():
        if log_marginal < value - TOLERANCE:
            out.append(f"the estimate {log_marginal:.4f} is below the {name} ({value:.4f}), which the marginal "
                       "can never be: the proposal missed most of the mass")
    if bracket is not None:
        lower, upper = bracket
        if not lower - TOLERANCE <= log_marginal <= upper + TOLERANCE:
            out.append(f"the estimate {log_marginal:.4f} lies outside the certified bracket "
                       f"[{lower:.4f}, {upper:.4f}] computed in the same run")
    return out
