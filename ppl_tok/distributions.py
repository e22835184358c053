"""Next-token distributions for N particles that never build an ``[N, |V|]`` tensor.

Both are ordinary Pyro distributions (batch shape ``[N]``, integer token ids as
values), so they sit at the model's and the guides' sample sites like
``dist.Categorical`` would, at a fraction of the cost for large vocabularies:

* :class:`NextToken`: the LM's own next-token distribution of each particle,
  read from the LM's states on its device; ``log_prob`` fetches one entry per particle.
* :class:`OverCandidates`: a distribution over a few candidate tokens per
  particle (a proposal restricted to the MDD's out-edges), normalised over them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints


class NextToken(TorchDistribution):
    """Each particle's LM next-token distribution, read from a particle walk.

    ``walk`` is a :class:`~ppl_tok.model.ParticleWalk` (its ``lm``, ``states``,
    ``active`` and ``uniforms()``), snapshotted at construction. Sampling draws
    on the device by inverse CDF; ``log_prob`` fetches one entry per active
    particle (finished particles get 0: the model masks them out).
    """

    arg_constraints: dict = {}
    support = constraints.nonnegative_integer

    def __init__(self, walk):
        self.lm = walk.lm
        self.states = list(walk.states)
        self.live = torch.nonzero(walk.active).flatten().tolist()
        self._uniforms = walk.uniforms
        super().__init__(batch_shape=torch.Size([len(self.states)]), validate_args=False)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise NotImplementedError("NextToken draws one token per particle")
        u = self._uniforms()
        out = torch.zeros(len(self.states), dtype=torch.long)
        if self.live:
            out[self.live] = self.lm.sample_tokens([self.states[i] for i in self.live], u[self.live])
        return out

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        values = value.reshape(-1).tolist()
        out = torch.zeros(len(self.states), dtype=torch.float64)
        if self.live:
            lps = self.lm.token_log_probs([self.states[i] for i in self.live], [[int(values[i])] for i in self.live])
            out[self.live] = torch.cat(lps)
        return out

    def expand(self, batch_shape, _instance=None):  # plates never broadcast it: shapes already match
        if torch.Size(batch_shape) != self.batch_shape:
            raise ValueError(f"NextToken has batch shape {tuple(self.batch_shape)}, cannot expand to {batch_shape}")
        return self


class OverCandidates(TorchDistribution):
    """``candidates[i, k]`` has logit ``logits[i, k]`` (``-inf`` pads); normalised per row."""

    arg_constraints: dict = {}
    support = constraints.nonnegative_integer

    def __init__(self, candidates: torch.Tensor, logits: torch.Tensor, uniforms: torch.Tensor | None = None):
        if candidates.shape != logits.shape or candidates.dim() != 2:
            raise ValueError("candidates and logits must both be [N, K]")
        if torch.isnan(logits).any():
            raise ValueError("a proposal gave NaN logits")
        norm = torch.logsumexp(logits, -1, keepdim=True)
        if (norm == math.inf).any():
            raise ValueError("a proposal gave +inf logits")
        self.candidates = candidates
        self.logits = (logits - norm).double()
        self.uniforms = uniforms
        super().__init__(batch_shape=torch.Size([candidates.shape[0]]), validate_args=False)

    @classmethod
    def from_lists(cls, candidates: Sequence[Sequence[int]], logits: Sequence[torch.Tensor],
                   uniforms: torch.Tensor | None = None) -> OverCandidates:
        """Pad ragged candidate lists. A row whose logits are all ``-inf`` (every allowed token has
        probability zero) becomes uniform over its candidates: the model then gives the drawn
        token probability zero, so the particle gets weight zero instead of an error."""
        width = max(1, max((len(c) for c in candidates), default=1))
        ids, lps = [], []
        for c, lp in zip(candidates, logits):
            row = lp.tolist() if torch.is_tensor(lp) else [float(x) for x in lp]
            if len(row) != len(c):
                raise ValueError(f"{len(c)} candidates but {len(row)} logits")
            if not any(x > -math.inf for x in row):
                row = [0.0] * len(row)
            pad = width - len(c)
            ids.append(list(c) + [0] * pad)
            lps.append(row + [-math.inf] * pad)
        ids = torch.tensor(ids, dtype=torch.long).reshape(len(candidates), width)
        lps = torch.tensor(lps, dtype=torch.float64).reshape(len(candidates), width)
        return cls(ids, lps, uniforms)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise NotImplementedError("OverCandidates draws one token per particle")
        probs = self.logits.exp()
        if self.uniforms is None:
            k = torch.multinomial(probs, 1)
        else:  # inverse CDF at the given uniforms
            cdf = probs.cumsum(-1)
            u = self.uniforms.reshape(-1, 1).double() * cdf[:, -1:]
            k = torch.searchsorted(cdf, u, right=True).clamp_max(probs.shape[1] - 1)
        return self.candidates.gather(1, k).flatten()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        hit = self.candidates == value.reshape(-1, 1)
        return torch.logsumexp(self.logits.masked_fill(~hit, -math.inf), -1)

    def expand(self, batch_shape, _instance=None):
        if torch.Size(batch_shape) != self.batch_shape:
            raise ValueError(f"OverCandidates has batch shape {tuple(self.batch_shape)}, cannot expand to {batch_shape}")
        return self
