"""The tokenization process as a Pyro model (Geh et al., 2024, Def. 3.1 and Sec. 5).

Step ``t`` samples ``tok_t ~ Categorical(p(. | context, tok_<t))`` at the sample
site ``"tok_{t}"``; the MDD of the string constrains the process: a token that
leaves the MDD gets weight zero (the factor ``"off_mdd_{t}"`` is ``-inf``) and
ends that particle, reaching the MDD's end ends it too. The evidence is

    p(x | c) = sum over tokenizations v of x of prod_t p(v_t | c, v_<t),

the marginal string probability, so ``pyro.infer.Importance(model, guide)``
estimates it with any guide over the same sites (:mod:`ppl_tok.proposals`).

``num_particles`` particles advance in lock-step inside the plate
``"particles"``; finished particles are masked out of later sites, and the live
ones share one batched LM call per step (the LM's prefix cache computes
identical prefixes once, and the context's state once for all). With
``num_particles=1`` (the default) this is the plain sequential program that
stock ``Importance`` runs once per sample; the vectorized path of
:func:`ppl_tok.importance.marginal` runs it once with ``num_particles=N``.
Both compute the same estimator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import torch

from .distributions import NextToken
from .lm.base import LanguageModel, LMState
from .mdd import MDD

PLATE = "particles"


def site(t: int) -> str:
    """The name of the sample site of the ``t``-th token."""
    return f"tok_{t}"


class ParticleWalk:
    """Particles walking down the MDD together, with their LM states.

    ``nodes[i]`` is particle ``i``'s byte offset (``None`` once it left the MDD);
    ``active[i]`` says it is still walking. Model and guides each keep one.
    """

    def __init__(self, lm: LanguageModel, mdd: MDD, context: str | Sequence[int], num_particles: int):
        if num_particles < 1:
            raise ValueError(f"num_particles must be >= 1, got {num_particles}")
        self.lm, self.mdd = lm, mdd
        root = lm.initial(context)
        self.states: list[LMState] = [root] * num_particles
        self.nodes: list[int | None] = [mdd.source] * num_particles
        self.active = torch.ones(num_particles, dtype=torch.bool)
        self.tokens: list[list[int]] = [[] for _ in range(num_particles)]

    def __len__(self) -> int:
        return len(self.nodes)

    def any_active(self) -> bool:
        return bool(self.active.any())

    def lm_log_probs(self) -> list[torch.Tensor]:
        """The LM's next-token log-probs of every particle (stale rows for finished ones)."""
        return [s.log_probs for s in self.states]

    def out_tokens(self, i: int) -> dict[int, int]:
        node = self.nodes[i]
        return {} if node is None else self.mdd.out_tokens(node)

    def advance(self, tokens: torch.Tensor) -> torch.Tensor:
        """Move the active particles by ``tokens``; return which of them left the MDD."""
        tokens = torch.as_tensor(tokens).reshape(-1)
        off = torch.zeros(len(self), dtype=torch.bool)
        grow: list[int] = []
        for i in torch.nonzero(self.active).flatten().tolist():
            tok = int(tokens[i])
            self.tokens[i].append(tok)
            nxt = self.out_tokens(i).get(tok)
            self.nodes[i] = nxt
            if nxt is None:
                off[i] = True
                self.active[i] = False
            elif nxt == self.mdd.sink:
                self.active[i] = False
            else:
                grow.append(i)
        if grow:
            new = self.lm.extend([self.states[i] for i in grow], [self.tokens[i][-1] for i in grow])
            for i, state in zip(grow, new):
                self.states[i] = state
        return off


def tokenization_model(lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "",
                       num_particles: int = 1) -> list[tuple[int, ...]]:
    """Sample token sequences from the LM, constrained to the tokenizations in ``mdd``.

    Returns each particle's tokens; a particle whose sequence leaves the MDD
    has weight zero.
    """
    walk = ParticleWalk(lm, mdd, context, num_particles)
    with pyro.plate(PLATE, num_particles):
        t = 0
        while walk.any_active():
            active = walk.active.clone()
            with pyro.poutine.mask(mask=active):
                tok = pyro.sample(site(t), NextToken(walk.lm_log_probs()))
            off = walk.advance(tok)
            if off.any():
                zero = torch.zeros((), dtype=walk.states[0].log_probs.dtype)
                pyro.factor(f"off_mdd_{t}", torch.where(off, -math.inf, zero))
            t += 1
    return [tuple(tokens) for tokens in walk.tokens]
