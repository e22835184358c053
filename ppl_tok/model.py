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
identical prefixes once, and the context's state once for all). ``mdd`` may also
be a list of MDDs with ``context`` a list of the same length: the plate then
holds ``num_particles`` particles for each (context, string) pair, particle ``i``
belonging to pair ``i // num_particles``, and all of them share each step's
forward (the batched engine of :mod:`ppl_tok.lm`).

Randomness: inside :func:`particle_seeds`, each pair draws its particles'
uniforms from its own generator, so a pair's samples do not depend on which
other pairs share the batch (what makes resumed and batched runs reproduce
one-at-a-time runs); outside it, Pyro's global RNG is used. With
``num_particles=1`` (the default) this is the plain sequential program that
stock ``Importance`` runs once per sample; the vectorized path of
:func:`ppl_tok.importance.marginal` runs it once with ``num_particles=N``.
Both compute the same estimator.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence

import pyro
import torch

from .distributions import NextToken
from .lm.base import LanguageModel, LMState
from .mdd import MDD

PLATE = "particles"

_SEEDS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("ppl_tok_particle_seeds", default=None)


@contextlib.contextmanager
def particle_seeds(seeds: Sequence[int] | None) -> Iterator[None]:
    """Within this block, the particles of pair ``g`` draw their randomness from a generator seeded ``seeds[g]``."""
    token = _SEEDS.set(None if seeds is None else [int(s) for s in seeds])
    try:
        yield
    finally:
        _SEEDS.reset(token)


def site(t: int) -> str:
    """The name of the sample site of the ``t``-th token."""
    return f"tok_{t}"


def as_pairs(mdd: MDD | Sequence[MDD], context: str | Sequence[int] | Sequence[str | Sequence[int]]
             ) -> tuple[list[MDD], list[str | Sequence[int]]]:
    """The model's ``(mdd, context)`` arguments as lists of pairs (one pair, or a batch)."""
    if isinstance(mdd, MDD):
        return [mdd], [context]
    mdds = list(mdd)
    contexts = [""] * len(mdds) if isinstance(context, str) and context == "" else list(context)
    if len(contexts) != len(mdds):
        raise ValueError(f"{len(mdds)} MDDs but {len(contexts)} contexts: give one context per string")
    return mdds, contexts


class ParticleWalk:
    """Particles walking down their MDDs together, with their LM states.

    ``nodes[i]`` is particle ``i``'s byte offset (``None`` once it left the MDD);
    ``active[i]`` says it is still walking; ``group[i]`` is its (context, string)
    pair. Model and guides each keep one.
    """

    def __init__(self, lm: LanguageModel, mdd: MDD | Sequence[MDD], context: str | Sequence = "",
                 num_particles: int = 1):
        if num_particles < 1:
            raise ValueError(f"num_particles must be >= 1, got {num_particles}")
        self.lm = lm
        self.mdds, contexts = as_pairs(mdd, context)
        self.num_particles = num_particles
        self.group = [g for g in range(len(self.mdds)) for _ in range(num_particles)]
        roots = lm.states([lm.prefix_ids(c) for c in contexts])
        self.states: list[LMState] = [roots[g] for g in self.group]
        self.nodes: list[int | None] = [self.mdds[g].source for g in self.group]
        self.active = torch.ones(len(self.group), dtype=torch.bool)
        self.tokens: list[list[int]] = [[] for _ in self.group]
        seeds = _SEEDS.get()
        if seeds is not None and len(seeds) != len(self.mdds):
            raise ValueError(f"{len(seeds)} particle seeds for {len(self.mdds)} (context, string) pairs")
        self._rngs = None if seeds is None else [torch.Generator().manual_seed(s) for s in seeds]
        self._edge_lps: list[torch.Tensor | None] | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def mdd(self) -> MDD:
        """The MDD (when the walk has one string)."""
        if len(self.mdds) != 1:
            raise ValueError("this walk spans several strings: use walk.mdd_of(i)")
        return self.mdds[0]

    def mdd_of(self, i: int) -> MDD:
        return self.mdds[self.group[i]]

    def any_active(self) -> bool:
        return bool(self.active.any())

    def out_tokens(self, i: int) -> dict[int, int]:
        """Particle ``i``'s allowed next tokens, each with the node it leads to."""
        node = self.nodes[i]
        return {} if node is None else self.mdd_of(i).out_tokens(node)

    def edge_log_probs(self, i: int) -> torch.Tensor:
        """The LM's log-probs of particle ``i``'s out-edges (in :meth:`out_tokens` order).

        Fetched for every active particle at once, one device gather per step.
        """
        if self._edge_lps is None:
            live = torch.nonzero(self.active).flatten().tolist()
            lps = self.lm.token_log_probs([self.states[j] for j in live], [list(self.out_tokens(j)) for j in live])
            self._edge_lps = [None] * len(self)
            for j, lp in zip(live, lps):
                self._edge_lps[j] = lp
        lp = self._edge_lps[i]
        return lp if lp is not None else self.lm.token_log_probs([self.states[i]], [list(self.out_tokens(i))])[0]

    def uniforms(self) -> torch.Tensor:
        """One uniform per particle for this step (per-pair generators under :func:`particle_seeds`)."""
        if self._rngs is None:
            return torch.rand(len(self), dtype=torch.float64)
        return torch.cat([torch.rand(self.num_particles, generator=g, dtype=torch.float64) for g in self._rngs])

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
            elif nxt == self.mdd_of(i).sink:
                self.active[i] = False
            else:
                grow.append(i)
        if grow:
            want = [list(self.out_tokens(i)) for i in grow]  # the next out-edges, gathered with the forward
            new = self.lm.extend([self.states[i] for i in grow], [self.tokens[i][-1] for i in grow], want)
            for i, state in zip(grow, new):
                self.states[i] = state
        self._edge_lps = None
        return off


def tokenization_model(lm: LanguageModel, mdd: MDD | Sequence[MDD], context: str | Sequence = "",
                       num_particles: int = 1) -> list[tuple[int, ...]]:
    """Sample token sequences from the LM, constrained to the tokenizations in ``mdd``.

    Returns each particle's tokens; a particle whose sequence leaves the MDD
    has weight zero.
    """
    walk = ParticleWalk(lm, mdd, context, num_particles)
    with pyro.plate(PLATE, len(walk)):
        t = 0
        while walk.any_active():
            active = walk.active.clone()
            with pyro.poutine.mask(mask=active):
                tok = pyro.sample(site(t), NextToken(walk))
            off = walk.advance(tok)
            if off.any():
                pyro.factor(f"off_mdd_{t}", torch.where(off, -math.inf, 0.0).double())
            t += 1
    return [tuple(tokens) for tokens in walk.tokens]
