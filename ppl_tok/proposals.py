"""Proposals for the tokenization model: ordinary Pyro guides over its sites.

A guide takes the model's arguments ``(lm, mdd, context, num_particles)`` and
samples every ``"tok_{t}"`` site of :func:`ppl_tok.model.tokenization_model`
inside the plate ``"particles"``; any function that does so swaps in. The
easiest way to write one is :func:`mdd_guide`, which turns a function from the
particles' state to next-token logits into a guide (see the tutorial "Writing
your own proposal").

* :func:`lookahead_guide`: the paper's 1-step look-ahead proposal (Sec. 5,
  after Chirkova et al., 2023): the LM's next-token distribution masked to the
  MDD's out-edges at the current node and renormalised,
  ``q(v_j | v_<j) ∝ p(v_j | v_<j) 1[v_<=j tokenizes a prefix of x]``.
  The importance weight of a path is the product of the masked masses,
  ``prod_j sum_{v in out(node_j)} p(v | v_<j)``: no second scoring pass.
* :func:`uniform_guide`: uniform over the MDD's paths (exact, from path counts).
* :class:`StratifiedGuide`: the look-ahead restricted to the tokenizations a
  certified search has *not* enumerated (:mod:`ppl_tok.inference`).

The LM prior (the naive proposal the paper dismisses) is ``guide=None`` in
:func:`ppl_tok.inference.marginal`: the model is its own proposal and every
sample that leaves the MDD is rejected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pyro
import pyro.distributions as dist
import torch

from .lm.base import LanguageModel
from .mdd import MDD
from .model import PLATE, ParticleWalk, site

#: ``proposal_logits(walk) -> [N, V]``: next-token logits of each particle.
#: Rows of finished particles are ignored; every active row must allow at least
#: one of the particle's MDD out-tokens and nothing else with positive mass.
ProposalLogits = Callable[[ParticleWalk], torch.Tensor]


def mdd_guide(proposal_logits: ProposalLogits, name: str | None = None) -> Callable[..., list[tuple[int, ...]]]:
    """A Pyro guide for :func:`~ppl_tok.model.tokenization_model` from a logits function."""

    def guide(lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "",
              num_particles: int = 1) -> list[tuple[int, ...]]:
        walk = ParticleWalk(lm, mdd, context, num_particles)
        with pyro.plate(PLATE, num_particles):
            t = 0
            while walk.any_active():
                active = walk.active.clone()
                logits = proposal_logits(walk).clone()
                logits[~active] = 0.0  # finished particles: any value, masked out
                with pyro.poutine.mask(mask=active):
                    tok = pyro.sample(site(t), dist.Categorical(logits=logits))
                walk.advance(tok)
                t += 1
        return [tuple(tokens) for tokens in walk.tokens]

    guide.__name__ = guide.__qualname__ = name or getattr(proposal_logits, "__name__", "mdd_guide")
    guide.__doc__ = proposal_logits.__doc__
    return guide


def restrict(logits: torch.Tensor, walk: ParticleWalk,
             allowed: Callable[[int, dict[int, int]], Sequence[int]] | None = None) -> torch.Tensor:
    """``logits`` with each active row masked to its particle's MDD out-tokens (or a subset)."""
    out = torch.full_like(logits, -math.inf)
    for i in torch.nonzero(walk.active).flatten().tolist():
        tokens = walk.out_tokens(i)
        keep = list(tokens) if allowed is None else list(allowed(i, tokens))
        if keep:
            idx = torch.tensor(keep)
            out[i, idx] = logits[i, idx]
    return out


def lookahead(walk: ParticleWalk) -> torch.Tensor:
    """The 1-step look-ahead: the LM's next-token log-probs masked to the MDD's out-edges."""
    return restrict(walk.lm_logits(), walk)


def uniform(walk: ParticleWalk) -> torch.Tensor:
    """Uniform over the MDD's paths: each out-edge weighted by its number of completions."""
    counts = walk.mdd.path_counts
    out = torch.full((len(walk), len(walk.lm.vocab)), -math.inf, dtype=torch.float64)
    for i in torch.nonzero(walk.active).flatten().tolist():
        for tok, j in walk.out_tokens(i).items():
            out[i, tok] = math.log(counts[j])  # math.log is exact for big integers
    return out


lookahead_guide = mdd_guide(lookahead, "lookahead_guide")
uniform_guide = mdd_guide(uniform, "uniform_guide")


class StratifiedGuide:
    """The look-ahead proposal restricted to tokenizations outside an enumerated set ``S``.

    With ``S`` summed exactly, ``p(x) = sum_{v in S} p(v) + E_q[p(v)/q(v)]`` where
    ``q`` is supported on the complement of ``S``; the estimator stays unbiased and
    its variance comes only from the mass left outside ``S``. A token is allowed
    when some completion through it is not in ``S`` (``S`` counted per prefix
    against the MDD's path counts).
    """

    def __init__(self, mdd: MDD, enumerated: Sequence[tuple[int, ...]]):
        self.mdd = mdd
        self.covered: dict[tuple[int, ...], int] = {}
        for path in set(enumerated):
            for k in range(1, len(path) + 1):
                self.covered[path[:k]] = self.covered.get(path[:k], 0) + 1
        self.exhausted = len(set(enumerated)) >= mdd.count()
        self.guide = mdd_guide(self.logits, "stratified_guide")

    def open(self, prefix: tuple[int, ...], node: int) -> bool:
        """Whether some tokenization through ``prefix`` (ending at ``node``) is outside ``S``."""
        return self.covered.get(prefix, 0) < self.mdd.path_counts[node]

    def logits(self, walk: ParticleWalk) -> torch.Tensor:
        def allowed(i: int, tokens: dict[int, int]) -> list[int]:
            prefix = tuple(walk.tokens[i])
            return [t for t, j in tokens.items() if self.open(prefix + (t,), j)]

        return restrict(walk.lm_logits(), walk, allowed)

    def __call__(self, lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "",
                 num_particles: int = 1) -> list[tuple[int, ...]]:
        if self.exhausted:
            raise ValueError("every tokenization is already enumerated: there is nothing left to sample")
        return self.guide(lm, mdd, context, num_particles)
