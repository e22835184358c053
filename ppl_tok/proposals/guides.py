"""The proposals over the MDD's out-edges as Pyro guides: :func:`mdd_guide` (a step proposal as a guide), the
look-ahead, uniform over paths, and the look-ahead outside an enumerated set (:class:`StratifiedGuide`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pyro
import torch

from ppl_tok.distributions import OverCandidates
from ppl_tok.lm.base import LanguageModel
from ppl_tok.mdd import MDD
from ppl_tok.model import PLATE, ParticleWalk, conditioned, outer_batch_shape, site

#: A step proposal ``proposal(walk, i, out) -> logits``: for particle ``i`` of ``walk`` at an MDD
#: node whose out-edges are ``out`` (token -> next node), one logit per token of
#: ``out`` in its order (``-inf`` forbids a token; at least one must be finite).
StepLogits = Callable[[ParticleWalk, int, dict[int, int]], torch.Tensor]


def mdd_guide(proposal: StepLogits, name: str | None = None) -> Callable[..., torch.Tensor]:
    """A Pyro guide for :func:`~ppl_tok.model.tokenization_model` from a proposal over out-edges.

    Like the model, it runs ``outer_shape`` replicas of its particles inside
    enclosing vectorized plates (stock ``vectorized_importance_weights``), and
    returns the padded tokens (the model's return value).

    The logits stay torch expressions (:class:`~ppl_tok.distributions.OverCandidates`):
    a proposal whose logits depend on ``pyro.param`` sites is learnable with
    stock ``SVI`` / ``ReweightedWakeSleep``. A site observed by ``poutine.condition``
    (applied to the guide and the model alike) is masked out of ``log q``: the
    weight is then ``p(v) / q(v_unobserved | v_observed)``, whose mean is the
    probability of the string *and* the observed tokens.
    """

    def guide(lm: LanguageModel, mdd: MDD | Sequence[MDD], context: str | Sequence = "",
              num_particles: int = 1) -> torch.Tensor:
        walk = ParticleWalk(lm, mdd, context, num_particles, outer_batch_shape())
        with pyro.plate(PLATE, walk.batch_shape[-1], dim=-1):
            for t in range(walk.width):  # the model's sites, every one (finished particles masked)
                active = walk.active.clone()
                if not bool(active.any()):  # every particle finished: a masked placeholder site
                    zeros = torch.zeros(len(walk), 1)  # (uniforms given: no random draw)
                    with pyro.poutine.mask(mask=active.reshape(walk.batch_shape)):
                        pyro.sample(site(t), OverCandidates(zeros.long(), zeros.double(), zeros.flatten(),
                                                            walk.batch_shape))
                    continue
                outs = [walk.out_tokens(i) if a else {} for i, a in enumerate(active.tolist())]
                table = getattr(proposal, "table", None)
                if table is not None:  # the whole step's logits in one tensor
                    proposal_t = _over_table(table, walk, outs)
                else:
                    candidates, logits = [], []
                    for i, out in enumerate(outs):
                        if out:
                            candidates.append(list(out))
                            logits.append(proposal(walk, i, out))
                        else:  # finished particle: any value, masked out
                            candidates.append([0])
                            logits.append(torch.zeros(1))
                    proposal_t = OverCandidates.from_lists(candidates, logits, walk.uniforms(), walk.batch_shape)
                # an observed site (poutine.condition on the guide) is no draw of q: its log q stays out of the weight
                keep = active & (not conditioned(site(t)))
                with pyro.poutine.mask(mask=keep.reshape(walk.batch_shape)):
                    tok = pyro.sample(site(t), proposal_t)
                walk.advance(tok)
        return walk.padded_tokens()

    guide.__name__ = guide.__qualname__ = name or getattr(proposal, "__name__", "mdd_guide")
    guide.__doc__ = proposal.__doc__
    guide.proposal = proposal  # the step proposal, for samplers that draw token by token (smc_marginal(guide=...))
    return guide


#: A step proposal's batched form ``table(walk, rows, width) -> [len(rows), width]``: the logits of
#: :data:`StepLogits` for the particles ``rows`` (each with out-edges) at once, row ``r`` padded with ``-inf``
#: after particle ``rows[r]``'s out-edges; a proposal that has one as its attribute ``table`` gets one call per
#: step instead of one per particle (the same numbers).
StepTable = Callable[[ParticleWalk, list[int], int], torch.Tensor]


def _over_table(table: StepTable, walk: ParticleWalk, outs: list[dict[int, int]]) -> OverCandidates:
    """The step's proposal from a :data:`StepTable`: what :meth:`OverCandidates.from_lists` makes of the
    per-particle logits (a finished particle: the one candidate ``0`` at logit 0), built as one tensor."""
    width = max(1, max(len(out) for out in outs))
    rows = [i for i, out in enumerate(outs) if out]
    pad = [0] * width
    ids = torch.tensor([list(out) + pad[len(out):] if out else pad for out in outs], dtype=torch.long)
    logits = torch.full((len(outs), width), -math.inf, dtype=torch.float64)
    logits[:, 0] = 0.0
    if rows:
        logits[rows] = table(walk, rows, width).to(torch.float64)
    return OverCandidates.from_padded(ids, logits, [len(out) or 1 for out in outs], walk.uniforms(), walk.batch_shape)


def lookahead(walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
    """The 1-step look-ahead: the LM's next-token log-probs of the MDD's out-edges."""
    return walk.edge_log_probs(i)


def _lookahead_table(walk: ParticleWalk, rows: list[int], width: int) -> torch.Tensor:
    """:func:`lookahead` of the particles ``rows`` at once (:data:`StepTable`)."""
    return walk.edge_log_prob_table(rows, width)


lookahead.table = _lookahead_table


def uniform(walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
    """Uniform over the MDD's paths: each out-edge weighted by its number of completions."""
    log_counts = walk.mdd_of(i).log_path_counts
    return torch.tensor([log_counts[j] for j in out.values()], dtype=torch.float64)


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
        self.caps = mdd.capped_path_counts(len(self.covered) + 1)  # exact below the cap: enough to compare
        self.guide = mdd_guide(self.proposal, "stratified_guide")

    def open(self, prefix: tuple[int, ...], node: int) -> bool:
        """Whether some tokenization through ``prefix`` (ending at ``node``) is outside ``S``."""
        return self.covered.get(prefix, 0) < self.caps[node]

    def proposal(self, walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
        """The look-ahead, with the tokens whose completions are all in ``S`` forbidden."""
        if walk.mdd_of(i) is not self.mdd:
            raise ValueError("a StratifiedGuide samples the one string whose tokenizations it enumerated")
        prefix = tuple(walk.tokens[i])
        logits = lookahead(walk, i, out).double()
        closed = torch.tensor([not self.open(prefix + (t,), j) for t, j in out.items()])
        return logits.masked_fill(closed, -math.inf)

    def __call__(self, lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "",
                 num_particles: int = 1) -> torch.Tensor:
        if self.exhausted:
            raise ValueError("every tokenization is already enumerated: there is nothing left to sample")
        return self.guide(lm, mdd, context, num_particles)
