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

Every result carries how far it can be trusted (:mod:`ppl_tok.infer.diagnostics`):
the kind of statement it makes, a certified lower bound (the summed probability
of every tokenization the run knows exactly), its standard error on the log
scale, ESS, PSIS k-hat, and the calibrated warnings;
:meth:`MarginalResult.checked_against` adds a bracket computed afterwards.

Proposals: ``"lookahead"`` (the paper's), ``"uniform"``, ``"prior"`` (the LM
itself, rejecting what leaves the MDD), ``"stratified"`` (the certified search
of :mod:`ppl_tok.infer.search` sums the most probable tokenizations exactly, and the
look-ahead restricted to the rest samples the remainder), or any Pyro guide.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyro
import torch
from pyro import poutine

from ppl_tok import limits
from ppl_tok.infer import diagnostics
from ppl_tok.lm.base import LanguageModel
from ppl_tok.common.logspace import logsumexp
from ppl_tok.mdd import MDD, compile_mdd
from ppl_tok.model import as_pairs, particle_seeds, per_particle_weights, tokenization_model, unpad
from ppl_tok.proposals import StratifiedGuide, named_guide, proposal
from ppl_tok.infer.groups import Group, chunk_seed, particle_groups  # noqa: F401 (re-exported: their home before)
from ppl_tok.infer.search import Bounds, marginal_bounds



@dataclass(frozen=True)
class MarginalResult:
    """An importance-sampling estimate of ``log p(x | c)`` and what it is made of.

    ``log_weights[i]`` and ``samples[i]`` are the i-th particle's log-weight and
    tokens, ``log_p[i]`` and ``log_q[i]`` its model and proposal log-probabilities
    (``log_weights = log_p - log_q``); ``exact_log_mass`` is the mass summed exactly before sampling (the
    stratified proposal; ``-inf`` otherwise), so that
    ``log_marginal = logaddexp(exact_log_mass, logsumexp(log_weights) - log N)``;
    ``exact_tokenizations`` maps the tokenizations summed exactly to their log-probabilities.

    Uncertainty (:mod:`ppl_tok.infer.diagnostics`): ``log_se`` is the standard error of
    ``log_marginal`` (delta method; the exact part has none), ``ess`` Kong's
    effective sample size, ``khat`` the PSIS k-hat (``None``: too few samples to
    fit), ``warnings`` the reasons not to trust the estimate.

    What kind of statement it makes (``statement``, :data:`ppl_tok.infer.diagnostics.STATEMENTS`):
    ``"certified"`` (the search summed everything, or closed its bracket),
    ``"unbiased, sampled part"`` (stratified: the enumerated part exact, ``bracket``
    its certified ``(lower, upper)``), or ``"uncalibrated"`` (IS, SMC: ``log_se`` is no
    error bar). ``certified_lower`` is a lower bound on ``log p(x | c)`` that holds
    whatever the samples: the log of the summed probabilities of every distinct
    tokenization whose probability the run knows exactly (the canonical one, every
    tokenization drawn, the enumerated ones), free to compute. ``distinct`` of the ``support`` tokenizations
    (MDD paths; ``None``: unknown) were drawn with non-zero weight: one of several warns, whatever the ESS.
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
    log_se: float = math.inf
    khat: float | None = None
    warnings: tuple[str, ...] = ()
    exact_tokenizations: dict[tuple[int, ...], float] = field(default_factory=dict)
    statement: str = diagnostics.UNCALIBRATED
    certified_lower: float = -math.inf
    bracket: tuple[float, float] | None = None
    support: int | None = None
    distinct: int = 0

    def __repr__(self) -> str:
        khat = "n/a" if self.khat is None else f"{self.khat:.2f}"
        flag = f", {len(self.warnings)} warning(s)" if self.warnings else ""
        return (f"MarginalResult({self.text!r}, {self.proposal}, N={self.num_samples}: log p = {self.log_marginal:.4f}"
                f" ± {self.log_se:.4f} ({self.statement}; >= {self.certified_lower:.4f} certified), ESS {self.ess:.1f}, "
                f"k-hat {khat}{flag})")

    def to_dict(self) -> dict[str, Any]:
        """The summary numbers (no per-sample tensors), JSON-ready apart from infinities."""
        return {
            "text": self.text, "proposal": self.proposal, "num_samples": self.num_samples,
            "log_marginal": self.log_marginal, "log_se": self.log_se, "ess": self.ess, "khat": self.khat,
            "warnings": list(self.warnings), "canonical": list(self.canonical),
            "canonical_log_prob": self.canonical_log_prob, "canonical_estimate": self.canonical_estimate,
            "noncanonical_estimate": self.noncanonical_estimate, "exact_log_mass": self.exact_log_mass,
            "acceptance_rate": self.acceptance_rate, "forwards": self.forwards, "seconds": self.seconds,
            "statement": self.statement, "certified_lower": self.certified_lower,
            "bracket": None if self.bracket is None else list(self.bracket),
            "distinct_tokenizations": self.distinct, "support": self.support,
        }

    def checked_against(self, lower: float, upper: float) -> MarginalResult:
        """This result with the certified bracket ``[lower, upper]`` computed afterwards: its lower end raises
        :attr:`certified_lower`, and the warnings are recomputed with it (outside the bracket, or a bracket
        that already bounds the error by 1 nat and so silences the statistical warning)."""
        if self.bracket is not None:
            lower, upper = max(lower, self.bracket[0]), min(upper, self.bracket[1])
        lower_bound = max(self.certified_lower, lower)
        nonzero = int(torch.isfinite(self.log_weights).sum())
        warnings = diagnostics.estimate_warnings(
            self.log_marginal, statement=self.statement, ess=self.ess, log_se=self.log_se,
            num_nonzero=nonzero if self.statement == diagnostics.UNCALIBRATED else None, num_samples=self.num_samples,
            certified_lower=lower_bound, bracket=(lower, upper), resampled=self.proposal == "smc",
            distinct=self.distinct if self.statement == diagnostics.UNCALIBRATED else None, support=self.support)
        return replace(self, warnings=tuple(warnings), certified_lower=lower_bound, bracket=(lower, upper))

    @property
    def acceptance_rate(self) -> float:
        """The fraction of samples with non-zero weight (the prior proposal's acceptance rate)."""
        return float(torch.isfinite(self.log_weights).double().mean())


_log_mean_exp = diagnostics.log_mean_exp


def canonical_plus_rest(canonical: Any, rest: Any) -> Any:
    """The ``canonical+rest`` estimate, ``log(p(v* | c) + m)``, of floats or arrays alike.

    ``canonical`` is ``log p(v* | c)``, computed exactly; ``rest`` is ``log m``, ``m = (1/N) sum_i w_i 1[v_i != v*]``
    the unbiased importance estimate of the non-canonical mass (:attr:`MarginalResult.noncanonical_estimate`).
    The sum is unbiased for ``p(x | c)`` and never below the canonical term, its certified floor.
    """
    return np.logaddexp(canonical, rest)


def importance_weights(model: Callable, guide: Callable | None, *args, num_samples: int) -> tuple[torch.Tensor, list]:
    """Per-particle log-weights ``log p - log q`` from one vectorized run of guide and model."""
    log_p, log_q, samples = model_and_guide_log_probs(model, guide, *args, num_samples=num_samples)
    return log_p - log_q, samples


def model_and_guide_log_probs(model: Callable, guide: Callable | None, *args,
                              num_samples: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Per-particle ``log p`` (model) and ``log q`` (guide) from one vectorized run of guide and model.

    ``num_samples`` is passed as ``num_particles``; with a batch of strings the
    plate holds ``num_samples`` particles per string. ``guide=None`` proposes from
    the model itself (its factor sites are the weights). A guide whose sites do
    not hold one value per particle (e.g. one that ignores ``num_particles``) is an error.
    """
    if guide is None:
        guide = poutine.block(model, hide_fn=lambda msg: msg["type"] == "sample" and msg["is_observed"])
    with per_particle_weights():
        guide_trace = poutine.trace(guide).get_trace(*args, num_particles=num_samples)
    total = len(as_pairs(args[1], args[2] if len(args) > 2 else "")[0]) * num_samples
    for name, node in guide_trace.nodes.items():
        if node["type"] == "sample" and not node["is_observed"] and torch.as_tensor(node["value"]).numel() != total:
            raise ValueError(f"the guide drew {torch.as_tensor(node['value']).numel()} values at site {name!r} for "
                             f"{total} particles: a guide must sample every site once per particle "
                             "(does it ignore num_particles?)")
    with per_particle_weights():
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args,
                                                                                        num_particles=num_samples)
    samples = unpad(model_trace.nodes["_RETURN"]["value"])
    guide_trace.compute_log_prob()
    model_trace.compute_log_prob()
    sums = []
    for tr in (model_trace, guide_trace):
        out = torch.zeros(total, dtype=torch.float64)
        for node in tr.nodes.values():
            if node["type"] == "sample" and "log_prob" in node:
                out = out + node["log_prob"].double().cpu().expand(total)
        sums.append(out)
    return sums[0], sums[1], samples


class TokenizationImportance(pyro.infer.Importance):
    """Stock ``pyro.infer.Importance`` that refuses a run in which no sample has non-zero weight.

    ``Importance(tokenization_model, guide=None)`` proposes from the LM prior
    and rejects every sample that leaves the MDD; where the prior puts (almost)
    no mass on the string, every weight is zero and Pyro's normalised weights,
    ``EmpiricalMarginal`` and ESS are undefined (NaN). This subclass raises a
    clear error instead; otherwise it is ``Importance`` unchanged.
    """

    def run(self, *args, **kwargs) -> TokenizationImportance:
        try:
            super().run(*args, **kwargs)
        except ValueError:  # Pyro builds a Categorical over the weights: NaN when all are zero
            if not self._all_zero():
                raise
        if self._all_zero():
            raise ValueError(f"all {len(self.log_weights)} importance samples have weight zero: the proposal "
                             "(the LM prior, if guide=None) never produced a tokenization of the string with "
                             "positive probability; use lookahead_guide, or far more samples")
        return self

    def _all_zero(self) -> bool:
        return bool(self.log_weights) and not any(bool(torch.isfinite(torch.as_tensor(w)).any())
                                                  for w in self.log_weights)


def checked_importance(imp: pyro.infer.Importance, text: str, lm: LanguageModel,
                       context: str | Sequence[int] = "") -> MarginalResult:
    """A stock ``pyro.infer.Importance`` run on the tokenization model of ``text``, as a :class:`MarginalResult`.

    Stock Pyro reports ``get_log_normalizer()`` and ``get_ESS()`` and nothing that
    says the estimate is wrong; this reads each run's tokenization and model
    log-probability from ``imp.exec_traces`` (``log q = log p - log w``) and adds
    what :func:`marginal` reports: the certified lower bound, the statement, the
    standard error, k-hat and the calibrated warnings. One particle per run (the
    model refuses ``num_particles > 1`` under stock ``Importance``).
    """
    if not imp.exec_traces:
        raise ValueError("the Importance object has no runs: call .run(lm, mdd) first")
    log_w = torch.stack([torch.as_tensor(w).double().reshape(()) for w in imp.log_weights])
    log_p = torch.stack([tr.log_prob_sum().double().reshape(()) for tr in imp.exec_traces])
    samples = [v for tr in imp.exec_traces for v in unpad(tr.nodes["_RETURN"]["value"])]
    canonical = tuple(lm.canonical(text))
    name = getattr(imp.guide, "__name__", type(imp.guide).__name__)
    return _result(text, name, log_p, log_p - log_w, samples, canonical, lm.log_prob(canonical, context), None,
                   forwards=0, seconds=0.0, support=compile_mdd(text, lm.vocab).count())


def _enumerates(guide: str | Callable | None) -> bool:
    """Whether ``guide`` names a registered proposal that enumerates a certified search's part and samples the rest
    (:attr:`ppl_tok.proposals.Proposal.enumerates`: ``stratified``), which :func:`marginal` runs text by text."""
    return isinstance(guide, str) and proposal(guide).enumerates


def _proposal(guide: str | Callable | None) -> tuple[Callable | None, str]:
    if isinstance(guide, str):  # a registered proposal's name (ppl_tok.proposals.PROPOSALS)
        return named_guide(guide), guide
    if guide is None:
        return None, "prior"
    return guide, getattr(guide, "__name__", type(guide).__name__)


def _result(text: str, name: str, log_p: torch.Tensor, log_q: torch.Tensor, samples: list, canonical: tuple,
            canonical_lp: float, exact: Bounds | None, forwards: int, seconds: float,
            log_se: float | None = None, support: int | None = None) -> MarginalResult:
    """Assemble one string's estimate; with ``exact`` (stratified), its enumerated mass is added exactly.

    ``support``: the MDD's path count (``"one-tokenization"``). ``log_se`` overrides the importance-sampling standard error (a sampler whose
    weights are not independent, e.g. SMC with resampling, gives its own)."""
    log_w = log_p - log_q
    n = len(samples)
    if torch.isnan(log_w).any():
        raise FloatingPointError(f"NaN importance weight for {text!r} with proposal {name!r}")
    exact_mass = exact.lower if exact is not None else -math.inf
    log_marginal = logsumexp([exact_mass, _log_mean_exp(log_w, n)])
    is_canon = [s == canonical for s in samples]
    mask = torch.tensor(is_canon, dtype=torch.bool)
    canon_part = _log_mean_exp(log_w[mask], n)
    noncanon_part = _log_mean_exp(log_w[~mask], n)
    if exact is not None and canonical in exact.tokenizations:  # the canonical path was summed exactly
        canon_part = logsumexp([canon_part, canonical_lp])
        rest = [lp for path, lp in exact.tokenizations.items() if path != canonical]
        if rest:
            noncanon_part = logsumexp([noncanon_part, *rest])
    sampled = _log_mean_exp(log_w, n)
    log_se = diagnostics.log_standard_error(log_w) if log_se is None else log_se
    if exact is not None and sampled > -math.inf:  # only the sampled part is uncertain
        log_se *= math.exp(sampled - log_marginal)
    elif exact is not None:  # nothing sampled: the exact part is the estimate
        log_se = 0.0 if exact.closed else math.inf
    khat = diagnostics.psis_khat(log_w)
    drawn = {canonical: canonical_lp}  # every tokenization whose probability this run knows exactly
    drawn.update((v, lp) for v, lp, w in zip(samples, log_p.tolist(), log_w.tolist()) if w > -math.inf)
    if exact is not None:
        drawn.update(exact.tokenizations)
    certified_lower = logsumexp(list(drawn.values()))
    if exact is None:
        statement, bracket = diagnostics.UNCALIBRATED, None
    else:
        bracket = (exact.lower, exact.upper)
        statement = diagnostics.CERTIFIED if exact.closed or sampled == -math.inf else diagnostics.PARTLY_SAMPLED
    nonzero = int(torch.isfinite(log_w).sum())
    ess = diagnostics.ess(log_w)
    distinct = len({v for v, w in zip(samples, log_w.tolist()) if w > -math.inf})
    warnings = diagnostics.estimate_warnings(
        log_marginal, statement=statement, ess=ess, log_se=log_se,
        num_nonzero=nonzero if exact is None else None, num_samples=n, certified_lower=certified_lower,
        bracket=bracket, resampled=name == "smc", distinct=distinct if exact is None else None, support=support)
    return MarginalResult(
        text=text, proposal=name, log_marginal=log_marginal, canonical=canonical, canonical_log_prob=canonical_lp,
        log_weights=log_w, samples=samples, log_p=log_p, log_q=log_q, is_canonical=is_canon,
        ess=ess, canonical_estimate=canon_part, noncanonical_estimate=noncanon_part,
        exact_log_mass=exact_mass, num_samples=n, forwards=forwards, seconds=seconds, log_se=log_se, khat=khat,
        warnings=tuple(warnings), exact_tokenizations=dict(exact.tokenizations) if exact is not None else {},
        statement=statement, certified_lower=certified_lower, bracket=bracket, support=support, distinct=distinct)


def marginal(text: str, lm: LanguageModel, num_samples: int = 64, *, guide: str | Callable | None = "lookahead",
             context: str | Sequence[int] = "", seed: int | None = 0, mdd: MDD | None = None,
             search_budget: int = 256, search_tolerance: float = 1e-4) -> MarginalResult:
    """Estimate ``log p(text | context)`` with ``num_samples`` importance samples.

    :param guide: a proposal name (``"lookahead"``, ``"uniform"``, ``"prior"``,
        ``"stratified"``) or any Pyro guide for :func:`~ppl_tok.model.tokenization_model`.
    :param seed: seeds the particles' randomness (same seed, same answer; ``None``: Pyro's global RNG).
    :param search_budget: LM forwards for the exact part of ``"stratified"``.
    """
    text, context = limits.check_text("text", text), limits.check_context("context", context)
    num_samples = limits.check_count("num_samples", num_samples)
    seed = None if seed is None else limits.check_seed("seed", seed)
    limits.check_workload([text], [context], num_samples)
    if not _enumerates(guide):
        return _marginals([text], lm, num_samples, [context], guide, None if seed is None else [seed],
                          None if mdd is None else [mdd])[0]
    start, forwards0 = time.perf_counter(), lm.stats.forwards
    mdd = mdd if mdd is not None else compile_mdd(text, lm.vocab)
    canonical = tuple(lm.canonical(text))
    canonical_lp = lm.log_prob(canonical, context)
    bounds = marginal_bounds(text, lm, context=context, tolerance=search_tolerance, budget=search_budget, mdd=mdd)
    guide_fn = StratifiedGuide(mdd, list(bounds.tokenizations))
    if guide_fn.exhausted:  # the search enumerated everything: the sum is exact
        log_p = torch.full((num_samples,), -math.inf, dtype=torch.float64)
        log_q, samples = torch.zeros(num_samples, dtype=torch.float64), [() for _ in range(num_samples)]
    else:
        if seed is not None:
            pyro.set_rng_seed(seed)
        with particle_seeds(None if seed is None else [seed]):
            log_p, log_q, samples = model_and_guide_log_probs(tokenization_model, guide_fn, lm, mdd, context,
                                                              num_samples=num_samples)
    return _result(text, "stratified", log_p, log_q, samples, canonical, canonical_lp, bounds,
                   lm.stats.forwards - forwards0, time.perf_counter() - start)


def marginals(texts: Sequence[str], lm: LanguageModel, num_samples: int = 64, *,
              contexts: Sequence[str | Sequence[int]] | None = None, guide: str | Callable | None = "lookahead",
              seeds: Sequence[int] | None = None, mdds: Sequence[MDD] | None = None,
              on_done: Callable[[int], None] | None = None) -> list[MarginalResult]:
    """:func:`marginal` for many ``(context, text)`` pairs in one batched run of the engine.

    ``results[i]`` estimates ``log p(texts[i] | contexts[i])`` with ``num_samples``
    particles drawn with seed ``seeds[i]`` (default ``i``; ``seeds=None`` and
    ``guide`` a user guide that ignores the per-pair generators: Pyro's RNG).
    The ``len(texts) * num_samples`` particles advance together, one LM forward
    per step for all of them: different contexts and lengths share the batch,
    each context is computed once, identical prefixes once. Workloads whose
    worst-case KV memory exceeds ``lm.config.particle_bytes`` run in several such
    runs (:func:`particle_groups`; a text too long for its N particles at once,
    in seeded chunks). A pair's samples do not depend on the other pairs in the call.

    ``on_done(i)``: called once per pair, as pair ``i``'s last run of particles ends, in the order the pairs
    finish (progress). It observes only: the runs, their seeds and every figure are those of a call without it.
    """
    texts = limits.check_texts("texts", texts)
    contexts = [""] * len(texts) if contexts is None else limits.check_contexts("contexts", contexts)
    seeds = list(range(len(texts))) if seeds is None else limits.check_seeds(seeds)
    num_samples = limits.check_count("num_samples", num_samples)
    if not len(contexts) == len(seeds) == len(texts):
        raise ValueError(f"{len(texts)} texts, {len(contexts)} contexts and {len(seeds)} seeds: one each")
    limits.check_workload(texts, contexts, num_samples)
    if _enumerates(guide):
        out = []
        for i, (t, c, s) in enumerate(zip(texts, contexts, seeds)):
            out.append(marginal(t, lm, num_samples, guide=guide, context=c, seed=s))
            if on_done is not None:
                on_done(i)
        return out
    return _marginals(texts, lm, num_samples, contexts, guide, seeds, None if mdds is None else list(mdds), on_done)


def _marginals(texts: list[str], lm: LanguageModel, num_samples: int, contexts: list, guide: str | Callable | None,
               seeds: list[int] | None, mdds: list[MDD] | None,
               on_done: Callable[[int], None] | None = None) -> list[MarginalResult]:
    """The batched run (``seeds=None``: Pyro's global RNG; ``on_done``: as in :func:`marginals`)."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not texts:
        return []
    guide_fn, name = _proposal(guide)
    start, forwards0 = time.perf_counter(), lm.stats.forwards
    mdds = [compile_mdd(t, lm.vocab) for t in texts] if mdds is None else list(mdds)
    canonicals = [tuple(lm.canonical(t)) for t in texts]
    canonical_lps = lm.log_probs_many(canonicals, contexts)
    parts: list[list[tuple[torch.Tensor, torch.Tensor, list]]] = [[] for _ in texts]
    groups = particle_groups(texts, num_samples, lm.position_bytes(), lm.config.particle_bytes, seeds)
    last = {g: n for n, (members, _, _) in enumerate(groups) for g in members}  # the run that completes pair g
    for n, (members, count, group_seeds) in enumerate(groups):
        if n and (count < num_samples or groups[n - 1][1] < num_samples):
            lm.clear_cache()  # around the chunks of a long text: the last run's states only take memory
        if group_seeds is not None:
            pyro.set_rng_seed(group_seeds[0])
        with particle_seeds(group_seeds):
            single = len(texts) == 1  # one string: the model's plain (mdd, context) form, which any user guide takes
            log_p, log_q, samples = model_and_guide_log_probs(
                tokenization_model, guide_fn, lm, mdds[members[0]] if single else [mdds[g] for g in members],
                contexts[members[0]] if single else [contexts[g] for g in members], num_samples=count)
        for k, g in enumerate(members):
            part = slice(k * count, (k + 1) * count)
            parts[g].append((log_p[part], log_q[part], samples[part]))
        for g in members if on_done is not None else ():
            if last[g] == n:
                on_done(g)
    forwards, seconds = lm.stats.forwards - forwards0, time.perf_counter() - start
    out = []
    for g, text in enumerate(texts):
        log_p = torch.cat([p for p, _, _ in parts[g]])
        log_q = torch.cat([q for _, q, _ in parts[g]])
        samples = [v for _, _, vs in parts[g] for v in vs]
        out.append(_result(text, name, log_p, log_q, samples, canonicals[g], canonical_lps[g], None, forwards, seconds,
                           support=mdds[g].count()))
    return out
