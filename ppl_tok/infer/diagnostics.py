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
  Vehtari et al. read ``k > 0.7`` as unreliable; on tokenization weights, which
  take a handful of distinct values, it separated estimates off by more than a
  nat from the others poorly (``python -m benchmarks diagnostics``), so it is reported
  and does not warn.

Every estimate makes one of three kinds of statement (:data:`STATEMENTS`), and
:func:`estimate_checks` gives the reasons not to trust it: facts (``p > 1``; an
estimate below a certified lower bound, e.g. the summed probability of the
tokenizations known in the same run, or outside a certified bracket of
:func:`ppl_tok.infer.search.marginal_bounds`) and the statistical checks that the
benchmark calibrated to flag estimates off by more than :data:`ERROR_NATS`.
"""

from __future__ import annotations

import math

import torch
from pyro.ops.stats import fit_generalized_pareto

#: Vehtari et al.'s (2015) k-hat threshold; reported beside k-hat, not a warning (see :func:`estimate_checks`)
KHAT_LIMIT = 0.7
#: the error (nats) the warnings are calibrated to catch ("off by more than 1 nat")
ERROR_NATS = 1.0
#: ``"below-lower"``: the estimate below a certified lower bound by more than the rounding of the LM's rows
#: (nats; :mod:`ppl_tok.common.rounding`: float32 SmolLM2 rows round by 5.5e-5 nats a term). It is then off by at
#: least the gap, certainly, and the gap says nothing of the mass the proposal missed: a learned proposal was 2.33
#: nats low at a gap under 0.9 (issue 56), so no larger gap is small enough to stay silent
BELOW_NATS = 1e-4
#: the ``"few-samples"`` warning: the standard error of ``log p_hat`` above this (importance sampling; SMC's
#: Lee-Whiteley estimate does not warn: in the benchmark it flagged no bad run that the other checks missed)
SE_LIMIT = 0.5
SMC_SE_LIMIT = math.inf

#: The kinds of statement an estimate of ``log p(x | c)`` makes.
#: ``CERTIFIED``: exact, or a closed bracket, the bounds hold.
CERTIFIED = "certified"
#: ``PARTLY_SAMPLED``: an enumerated part summed exactly plus an unbiased estimate of the rest
#: (stratified, canonical+rest); the uncertainty is the sampled part's only.
PARTLY_SAMPLED = "unbiased, sampled part"
#: ``UNCALIBRATED``: importance sampling or SMC; unbiased for ``p``, but no error bar that holds.
UNCALIBRATED = "uncalibrated"
STATEMENTS = (CERTIFIED, PARTLY_SAMPLED, UNCALIBRATED)
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


def certified_error(log_marginal: float, bracket: tuple[float, float] | None) -> float:
    """The most an estimate inside a certified bracket can be off: ``max(upper - est, est - lower)``
    (``inf`` without a bracket, or outside it)."""
    if bracket is None:
        return math.inf
    lower, upper = bracket
    if not lower - TOLERANCE <= log_marginal <= upper + TOLERANCE:
        return math.inf
    return max(upper - log_marginal, log_marginal - lower, 0.0)


def estimate_checks(log_marginal: float, *, statement: str = UNCALIBRATED, ess: float | None = None,
                    log_se: float | None = None, num_nonzero: int | None = None,
                    num_samples: int | None = None, certified_lower: float | None = None,
                    known: dict[str, float] | None = None, bracket: tuple[float, float] | None = None,
                    resampled: bool = False, distinct: int | None = None,
                    support: int | None = None) -> list[tuple[str, str]]:
    """The reasons not to trust an estimate of ``log p(x | c)``: ``(code, sentence)`` pairs (empty: none found).

    Sure checks (facts about the estimate, whatever its kind): ``"no-mass"`` no
    sample with non-zero weight; ``"above-one"`` ``log p > 0``; ``"below-lower"``
    the estimate below ``certified_lower`` or a value in ``known`` by more than
    :data:`BELOW_NATS` + :data:`TOLERANCE` (log-probabilities of single tokenizations,
    or certified lower bounds: the marginal is at least each), so off by at least the gap;
    ``"outside-bracket"`` outside the certified ``bracket`` (unless the bracket is
    narrow enough that the error is under :data:`ERROR_NATS` anyway).

    Statistical checks (a sampled estimate whose error no bracket already bounds
    by :data:`ERROR_NATS`): ``"above-seen"`` the estimate more than :data:`ERROR_NATS`
    above ``certified_lower``, i.e. more than ``e`` times the mass of every
    tokenization the run has seen, extrapolated from the ``1 / q`` of a few draws;
    ``"few-samples"`` a standard error above :data:`SE_LIMIT` (importance sampling:
    the weights dominated by about four samples or fewer; :data:`SMC_SE_LIMIT` for
    ``resampled`` SMC weights); ``"one-tokenization"`` every one of the ``num_samples``
    draws with non-zero weight is the same tokenization (``distinct == 1``) while the
    proposal's support, the MDD's ``support`` paths, holds more: the estimate is that one
    tokenization's ``p / q``, its ESS is ``N``, its k-hat ``-inf`` and its standard error 0
    whatever the error (a collapsed proposal; issue 56: 0.51 and 35 nats off at "ESS 64.0").
    ``python -m benchmarks diagnostics``
    measured these thresholds (docs/pyro.md); ESS and k-hat are reported and do
    not warn (k-hat > 0.7 flagged bad runs with 42-62% precision and ~57% recall).
    """
    out = []
    if num_nonzero == 0:
        out.append(("no-mass", f"no sample of {num_samples} has non-zero weight: the estimate is log 0 (the proposal "
                               "never reached a tokenization of the string with positive probability)"))
    if log_marginal > TOLERANCE:
        out.append(("above-one", f"log p = {log_marginal:+.4f} > 0: a probability above 1 is impossible; "
                                 "the estimate is noise"))
    lowers = dict(known or {})
    if certified_lower is not None:
        lowers["certified lower bound"] = certified_lower
    for name, value in lowers.items():
        if log_marginal < value - BELOW_NATS - TOLERANCE:
            gap = value - log_marginal
            out.append(("below-lower", f"the estimate {log_marginal:.4f} is {gap:.2g} nats below the {name} "
                                       f"({value:.4f}), which the marginal can never be: it is off by at least that "
                                       "much, and by how much more no sample says"
                                       + (" (the proposal missed most of the mass)" if gap > math.log(2) else "")))
    if bracket is not None:
        lower, upper = bracket
        outside = not lower - TOLERANCE <= log_marginal <= upper + TOLERANCE
        if outside and max(abs(log_marginal - lower), abs(log_marginal - upper)) > ERROR_NATS:
            out.append(("outside-bracket", f"the estimate {log_marginal:.4f} lies outside the certified bracket "
                                           f"[{lower:.4f}, {upper:.4f}], which does not bound its error by "
                                           f"{ERROR_NATS:g} nat"))
    sampled = statement != CERTIFIED and num_nonzero != 0
    if (sampled and certified_lower is not None and certified_error(log_marginal, bracket) > ERROR_NATS
            and log_marginal > certified_lower + ERROR_NATS):
        out.append(("above-seen", f"the estimate {log_marginal:.4f} is {log_marginal - certified_lower:.2f} nats "
                                  f"above the mass of every tokenization this run has seen ({certified_lower:.4f}): "
                                  "it extrapolates from the 1/q of a few draws, and estimates like this were off by "
                                  f"more than {ERROR_NATS:g} nat in the calibration benchmark (use more samples, "
                                  "the stratified proposal, or a certified bracket)"))
    if (sampled and distinct == 1 and support is not None and support > 1 and (num_samples or 0) > 1
            and certified_error(log_marginal, bracket) > ERROR_NATS):
        out.append(("one-tokenization", f"all {num_samples} draws are one tokenization of the {support}: the estimate "
                                        "is that tokenization's p/q alone, so its ESS, k-hat and standard error say "
                                        "only that the draws agree, not how far off it is (the proposal may have "
                                        "collapsed: use another proposal, more samples, or a certified bracket)"))
    limit = SMC_SE_LIMIT if resampled else SE_LIMIT
    if sampled and certified_error(log_marginal, bracket) > ERROR_NATS and log_se is not None and log_se > limit:
        out.append(("few-samples", f"standard error {log_se:.2f} > {limit:g} nats: a few samples carry the weight "
                                   f"(ESS {ess if ess is not None else float('nan'):.1f}), and such estimates were off "
                                   f"by more than {ERROR_NATS:g} nat in the calibration benchmark; the standard error "
                                   "itself is no bound (use more samples, the stratified proposal, or a bracket)"))
    return out


def estimate_warnings(log_marginal: float, **kwargs) -> list[str]:
    """The sentences of :func:`estimate_checks`."""
    return [sentence for _, sentence in estimate_checks(log_marginal, **kwargs)]
