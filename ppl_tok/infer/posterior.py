"""Posteriors over the tokenizations of a string: exact, or from importance samples.

The tokenization model of :mod:`ppl_tok.model` conditioned on the string ``x``
has the posterior (Geh et al., 2024, Sec. 3 and Fig. 2)

    p(v | x, c) = p(v | c) 1[v tokenizes x] / p(x | c).

* Exact (:meth:`TokenizationPosterior.from_exact`): every tokenization enumerated
  (:func:`ppl_tok.infer.exact.exact_marginal`).
* From importance samples (:meth:`TokenizationPosterior.from_importance`): the
  self-normalised weights pooled over the distinct tokenizations drawn,

      p_hat(v | x) = [ (1/N) sum_i w_i 1[v_i = v]  +  1[v in S] p(v) ] / p_hat(x),

  where ``S`` is the set summed exactly before sampling (the stratified proposal;
  empty otherwise) and ``p_hat(x)`` the estimate of the marginal. Tokenizations
  never drawn get no mass: the estimate is consistent in ``N``, not unbiased.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ppl_tok.infer.diagnostics import CERTIFIED
from ppl_tok.infer.exact import ExactMarginal, exact_marginal
from ppl_tok.infer.importance import MarginalResult, marginal
from ppl_tok.lm.base import LanguageModel
from ppl_tok.common.logspace import logsumexp

SOURCES = ("exact", "lookahead", "uniform", "prior", "stratified")
#: the overstatement of a posterior probability that warns (absolute; tinier ones are facts, not news)
MATERIAL = 0.05


@dataclass(frozen=True)
class TokenizationPosterior:
    """``probs[i]`` estimates ``p(tokenizations[i] | text)``; most probable first.

    ``source`` is ``"exact"`` or the proposal's name; ``count`` is the number of
    distinct tokenizations listed. From importance samples, the posterior carries
    its estimate's diagnostics (:class:`~ppl_tok.infer.importance.MarginalResult`):
    ``num_samples``, ``ess``, ``khat``, ``statement``, and ``warnings`` (the
    calibrated rule of :mod:`ppl_tok.infer.diagnostics`: the self-normalised
    probabilities divide by the estimate of ``p(x)``, so an estimate off by more
    than a nat puts them off by the same factor). ``covered_log_mass`` is
    ``log sum_i p(tokenizations[i] | c)``, the listed tokenizations' exact joint
    mass: a certified lower bound on ``log p(x | c)`` (equal to it for the exact
    posterior), so ``exp(covered_log_mass - log_marginal)`` is the share of the
    estimated marginal that the list is known to hold. One more warning is the
    posterior's own: a probability more than ``e`` times (and 0.05 above) its
    certified upper bound ``p(v | c) / L``, ``L`` the estimate's certified lower
    bound on ``p(x | c)``.
    """

    text: str
    source: str
    tokenizations: list[tuple[int, ...]]
    probs: torch.Tensor
    canonical: tuple[int, ...]
    log_marginal: float
    num_samples: int | None = None
    ess: float | None = None
    khat: float | None = None
    statement: str = CERTIFIED
    covered_log_mass: float = -math.inf
    warnings: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.tokenizations)

    @property
    def canonical_share(self) -> float:
        """The (estimated) posterior probability of the canonical tokenization (0 if never drawn)."""
        return float(self.probs[self.tokenizations.index(self.canonical)]) if self.canonical in self.tokenizations \
            else 0.0

    def __repr__(self) -> str:
        how = "exact" if self.num_samples is None else f"{self.source} IS, N={self.num_samples}, ESS {self.ess:.1f}"
        flag = f", {len(self.warnings)} warning(s)" if self.warnings else ""
        return (f"TokenizationPosterior({self.text!r}, {how}: {self.count} tokenizations, "
                f"canonical share {self.canonical_share:.4f}{flag})")

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        rows = [{"tokens": list(v), "posterior": float(p), "canonical": v == self.canonical}
                for v, p in zip(self.tokenizations[:top], self.probs.tolist())]
        return {"text": self.text, "source": self.source, "count": self.count, "log_marginal": self.log_marginal,
                "num_samples": self.num_samples, "ess": self.ess, "khat": self.khat, "statement": self.statement,
                "covered_log_mass": self.covered_log_mass, "warnings": list(self.warnings),
                "canonical_share": self.canonical_share, "top": rows}

    @classmethod
    def from_exact(cls, result: ExactMarginal) -> TokenizationPosterior:
        return cls(text=result.text, source="exact", tokenizations=list(result.tokenizations),
                   probs=result.posterior(), canonical=result.canonical, log_marginal=result.log_marginal,
                   covered_log_mass=result.log_marginal)

    @classmethod
    def from_importance(cls, result: MarginalResult) -> TokenizationPosterior:
        """Pool the self-normalised weights of ``result`` (and its exactly summed part) by tokenization."""
        log_mass: dict[tuple[int, ...], list[float]] = {}
        exact_lp: dict[tuple[int, ...], float] = dict(result.exact_tokenizations)
        log_n = math.log(result.num_samples)
        for path, lw, lp in zip(result.samples, result.log_weights.tolist(), result.log_p.tolist()):
            if lw > -math.inf:
                log_mass.setdefault(path, []).append(lw - log_n)
                exact_lp[path] = lp
        for path, lp in result.exact_tokenizations.items():
            log_mass.setdefault(path, []).append(lp)
        pooled = sorted(((path, logsumexp(parts)) for path, parts in log_mass.items()), key=lambda item: -item[1])
        total = result.log_marginal
        probs = torch.tensor([math.exp(lm - total) if total > -math.inf else 0.0 for _, lm in pooled],
                             dtype=torch.float64)
        paths = [p for p, _ in pooled]
        return cls(text=result.text, source=result.proposal, tokenizations=paths, probs=probs,
                   canonical=result.canonical, log_marginal=total, num_samples=result.num_samples, ess=result.ess,
                   khat=result.khat, statement=result.statement,
                   covered_log_mass=logsumexp([exact_lp[p] for p in paths]),
                   warnings=result.warnings + _overstated(paths, probs, exact_lp, result.certified_lower))


def tokenization_posterior(text: str, lm: LanguageModel, source: str | Callable = "exact", num_samples: int = 256, *,
                           context: str | Sequence[int] = "", seed: int | None = 0,
                           max_paths: int = 100_000) -> TokenizationPosterior:
    """The posterior over the tokenizations of ``text``: ``source`` is ``"exact"``, a proposal name, or any Pyro
    guide for :func:`~ppl_tok.model.tokenization_model` (as :func:`~ppl_tok.infer.importance.marginal` takes)."""
    if isinstance(source, str) and source not in SOURCES:
        raise ValueError(f"unknown source {source!r}: expected one of {SOURCES} or a Pyro guide")
    if source == "exact":
        return TokenizationPosterior.from_exact(exact_marginal(text, lm, context=context, max_paths=max_paths))
    return TokenizationPosterior.from_importance(marginal(text, lm, num_samples, guide=source, context=context,
                                                          seed=seed))


def _overstated(paths: list[tuple[int, ...]], probs: torch.Tensor, log_p: dict[tuple[int, ...], float],
                lower: float) -> tuple[str, ...]:
    """A warning when a listed probability exceeds its certified upper bound by more than a factor ``e``
    and by more than :data:`MATERIAL` (the worst such one).

    ``p(v | x) = p(v | c) / p(x | c) <= p(v | c) / L`` for any certified lower bound ``L`` of
    ``p(x | c)``: a probability above ``e`` times that bound is off by more than a nat, certainly.
    """
    if lower == -math.inf:
        return ()
    worst = None
    for rank, (path, prob) in enumerate(zip(paths, probs.tolist()), 1):
        bound = math.exp(min(log_p[path] - lower, 0.0))
        if prob > math.e * bound and prob - bound > MATERIAL and (worst is None or prob - bound > worst[1] - worst[2]):
            worst = (rank, prob, bound)
    if worst is None:
        return ()
    rank, prob, bound = worst
    return (f"the posterior probability {prob:.4g} of tokenization #{rank} is {prob / bound:.3g} times its certified "
            f"upper bound {bound:.3g} (its exact p(v | c) over the certified lower bound of p(x | c)): the "
            "self-normalised weights overstate it (use more samples, or the stratified proposal)",)
