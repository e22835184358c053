"""Marginal string probability by importance sampling (Geh et al., 2024, Sec. 5, Eq. 1).

    p(x | c) = E_{v ~ q}[ p(x, v | c) / q(v | x) ]  ~  (1/N) sum_i w_i,   w_i = p(v_i) / q(v_i)

:func:`marginal` runs the tokenization model of :mod:`ppl_tok.model` against a
proposal of :mod:`ppl_tok.proposals` with Pyro's own machinery (``poutine.trace``
of the guide, ``poutine.replay`` of the model, log-probabilities from the
traces), with all N particles in one plate: one batched LM call per step.
Stock ``pyro.infer.Importance`` on the same model and guide computes the same
estimator one particle at a time.

The result splits the estimate into the canonical and the non-canonical part.
The non-canonical estimate is ``(1/N) sum_i w_i 1[v_i != v*]``, unbiased; the
paper's code divided by the number of non-canonical samples instead, which is
biased.

Proposals: ``"lookahead"`` (the paper's), ``"uniform"``, ``"prior"`` (the LM
itself, rejecting what leaves the MDD), ``"stratified"`` (the certified search
of :mod:`ppl_tok.search` sums the most probable tokenizations exactly, and the
look-ahead restricted to the rest samples the remainder), or any Pyro guide.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyro
import torch
from pyro import poutine

from .lm.base import LanguageModel
from .logspace import logsumexp
from .mdd import MDD, compile_mdd
from .model import tokenization_model
from .proposals import StratifiedGuide, lookahead_guide, uniform_guide
from .search import marginal_bounds

PROPOSALS = ("lookahead", "uniform", "prior", "stratified")


@dataclass(frozen=True)
class MarginalResult:
    """An importance-sampling estimate of ``log p(x | c)`` and what it is made of.

    ``log_weights[i]`` and ``samples[i]`` are the i-th particle's log-weight and
    tokens, ``log_p[i]`` and ``log_q[i]`` its model and proposal log-probabilities
    (``log_weights = log_p - log_q``); ``exact_log_mass`` is the mass summed exactly before sampling (the
    stratified proposal; ``-inf`` otherwise), so that
    ``log_marginal = logaddexp(exact_log_mass, logsumexp(log_weights) - log N)``.
    """

    text: str
    proposal: str
    log_marginal: float
    canonical: tuple[int, ...]
    canonical_log_prob: float
    log_weights: torch.Tensor
    samples: list[tuple[int, ...]]
    log_p: torch.Tensor
    log_q: torch.Tensor
    is_canonical: list[bool]
    ess: float
    canonical_estimate: float
    noncanonical_estimate: float
    exact_log_mass: float
    num_samples: int
    forwards: int
    seconds: float

    @property
    def acceptance_rate(self) -> float:
        """The fraction of samples with non-zero weight (the prior proposal's acceptance rate)."""
        return float(torch.isfinite(self.log_weights).double().mean())


def _log_mean_exp(values: torch.Tensor, n: int) -> float:
    if values.numel() == 0:
        return -math.inf
    return float(torch.logsumexp(values, 0)) - math.log(n)


def importance_weights(model: Callable, guide: Callable | None, *args, num_samples: int) -> tuple[torch.Tensor, list]:
    """Per-particle log-weights ``log p - log q`` from one vectorized run of guide and model."""
    log_p, log_q, samples = model_and_guide_log_probs(model, guide, *args, num_samples=num_samples)
    return log_p - log_q, samples


def model_and_guide_log_probs(model: Callable, guide: Callable | None, *args,
                              num_samples: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Per-particle ``log p`` (model) and ``log q`` (guide) from one vectorized run of guide and model.

    ``guide=None`` proposes from the model itself (its factor sites are the weights).
    """
    if guide is None:
        guide = poutine.block(model, hide_fn=lambda msg: msg["type"] == "sample" and msg["is_observed"])
    guide_trace = poutine.trace(guide).get_trace(*args, num_particles=num_samples)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, num_particles=num_samples)
    guide_trace.compute_log_prob()
    model_trace.compute_log_prob()
    sums = []
    for tr in (model_trace, guide_trace):
        total = torch.zeros(num_samples, dtype=torch.float64)
        for node in tr.nodes.values():
            if node["type"] == "sample" and "log_prob" in node:
                total = total + node["log_prob"].double().cpu().expand(num_samples)
        sums.append(total)
    return sums[0], sums[1], model_trace.nodes["_RETURN"]["value"]


def _ess(log_w: torch.Tensor) -> float:
    if not torch.isfinite(log_w).any():
        return 0.0
    return float(torch.exp(2 * torch.logsumexp(log_w, 0) - torch.logsumexp(2 * log_w, 0)))


def marginal(text: str, lm: LanguageModel, num_samples: int = 64, *, guide: str | Callable | None = "lookahead",
             context: str | Sequence[int] = "", seed: int | None = 0, mdd: MDD | None = None,
             search_budget: int = 256, search_tolerance: float = 1e-4) -> MarginalResult:
    """Estimate ``log p(text | context)`` with ``num_samples`` importance samples.

    :param guide: a proposal name (``"lookahead"``, ``"uniform"``, ``"prior"``,
        ``"stratified"``) or any Pyro guide for :func:`~ppl_tok.model.tokenization_model`.
    :param seed: seeds Pyro's RNG (same seed, same answer).
    :param search_budget: LM forwards for the exact part of ``"stratified"``.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    start = time.perf_counter()
    forwards0 = lm.stats.forwards
    mdd = mdd if mdd is not None else compile_mdd(text, lm.vocab)
    canonical = tuple(lm.canonical(text))
    canonical_lp = lm.log_prob(canonical, context)
    exact_mass = -math.inf
    enumerated: set[tuple[int, ...]] = set()
    name = guide if isinstance(guide, str) else getattr(guide, "__name__", type(guide).__name__)
    if guide == "stratified":
        bounds = marginal_bounds(text, lm, context=context, tolerance=search_tolerance, budget=search_budget, mdd=mdd)
        enumerated = set(bounds.tokenizations)
        exact_mass = bounds.lower
        guide_fn = StratifiedGuide(mdd, list(enumerated))
        if guide_fn.exhausted:
            guide_fn = None
    elif isinstance(guide, str):
        table = {"lookahead": lookahead_guide, "uniform": uniform_guide, "prior": None}
        if guide not in table:
            raise ValueError(f"unknown proposal {guide!r}: expected one of {PROPOSALS} or a Pyro guide")
        guide_fn = table[guide]
    elif guide is None:
        guide_fn, name = None, "prior"
    else:
        guide_fn = guide
    if seed is not None:
        pyro.set_rng_seed(seed)
    if guide == "stratified" and guide_fn is None:  # the search enumerated everything: exact
        log_w, samples = torch.full((num_samples,), -math.inf, dtype=torch.float64), [() for _ in range(num_samples)]
        log_p, log_q = log_w.clone(), torch.zeros(num_samples, dtype=torch.float64)
    else:
        log_p, log_q, samples = model_and_guide_log_probs(tokenization_model, guide_fn, lm, mdd, context,
                                                          num_samples=num_samples)
        log_w = log_p - log_q
    if torch.isnan(log_w).any():
        raise FloatingPointError(f"NaN importance weight for {text!r} with proposal {name!r}")
    sampled = _log_mean_exp(log_w, num_samples)
    log_marginal = logsumexp([exact_mass, sampled])
    is_canon = [s == canonical for s in samples]
    mask = torch.tensor(is_canon, dtype=torch.bool)
    canon_part = _log_mean_exp(log_w[mask], num_samples)
    noncanon_part = _log_mean_exp(log_w[~mask], num_samples)
    if canonical in enumerated:  # the canonical path was summed exactly
        canon_part = logsumexp([canon_part, canonical_lp])
        rest = [lp for path, lp in bounds.tokenizations.items() if path != canonical]
        if rest:
            noncanon_part = logsumexp([noncanon_part, *rest])
    return MarginalResult(
        text=text, proposal=name, log_marginal=log_marginal, canonical=canonical, canonical_log_prob=canonical_lp,
        log_weights=log_w, samples=samples, log_p=log_p, log_q=log_q, is_canonical=is_canon, ess=_ess(log_w),
        canonical_estimate=canon_part, noncanonical_estimate=noncanon_part, exact_log_mass=exact_mass,
        num_samples=num_samples, forwards=lm.stats.forwards - forwards0, seconds=time.perf_counter() - start,
    )


def marginals(texts: Sequence[str], lm: LanguageModel, num_samples: int = 64, *,
              contexts: Sequence[str | Sequence[int]] | None = None, guide: str | Callable | None = "lookahead",
              seeds: Sequence[int] | None = None) -> list[MarginalResult]:
    """:func:`marginal` for many ``(context, text)`` pairs at once: ``results[i]`` estimates
    ``log p(texts[i] | contexts[i])`` with ``num_samples`` particles drawn with seed ``seeds[i]``
    (default ``i``); a pair's result does not depend on the other pairs in the call.
    """
    contexts = [""] * len(texts) if contexts is None else list(contexts)
    seeds = list(range(len(texts))) if seeds is None else list(seeds)
    if not len(contexts) == len(seeds) == len(texts):
        raise ValueError(f"{len(texts)} texts, {len(contexts)} contexts and {len(seeds)} seeds: one each")
    return [marginal(t, lm, num_samples, guide=guide, context=c, seed=s)
            for t, c, s in zip(texts, contexts, seeds)]
