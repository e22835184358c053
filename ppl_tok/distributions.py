"""Next-token distributions for N particles that never build an ``[N, |V|]`` tensor.

Both are ordinary Pyro distributions (batch shape ``[N]``, integer token ids as
values), so they sit at the model's and the guides' sample sites like
``dist.Categorical`` would, at a fraction of the cost for large vocabularies:

* :class:`NextToken`: the LM's own next-token distribution of each particle,
  given as normalised log-prob rows; ``log_prob`` gathers one entry per row.
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
    """``rows[i]`` is particle ``i``'s normalised next-token log-prob vector ``[V]``."""

    arg_constraints: dict = {}
    support = constraints.nonnegative_integer

    def __init__(self, rows: Sequence[torch.Tensor]):
        self.rows = list(rows)
        super().__init__(batch_shape=torch.Size([len(self.rows)]), validate_args=False)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise NotImplementedError("NextToken draws one token per particle")
        probs = torch.stack(self.rows).double().exp()
        return torch.multinomial(probs, 1).flatten()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        values = value.reshape(-1).tolist()
        return torch.stack([row[int(v)].double() for row, v in zip(self.rows, values)])

    def expand(self, batch_shape, _instance=None):  # plates never broadcast it: shapes already match
        if torch.Size(batch_shape) != self.batch_shape:
            raise ValueError(f"NextToken has batch shape {tuple(self.batch_shape)}, cannot expand to {batch_shape}")
        return self


class OverCandidates(TorchDistribution):
    """``candidates[i, k]`` has logit ``logits[i, k]`` (``-inf`` pads); normalised per row."""

    arg_constraints: dict = {}
    support = constraints.nonnegative_integer

    def __init__(self, candidates: torch.Tensor, logits: torch.Tensor):
        if candidates.shape != logits.shape or candidates.dim() != 2:
            raise ValueError("candidates and logits must both be [N, K]")
        norm = torch.logsumexp(logits, -1, keepdim=True)
        if not torch.isfinite(norm).all():
            raise ValueError("every particle needs at least one candidate with positive probability")
        self.candidates = candidates
        self.logits = (logits - norm).double()
        super().__init__(batch_shape=torch.Size([candidates.shape[0]]), validate_args=False)

    @classmethod
    def from_lists(cls, candidates: Sequence[Sequence[int]], logits: Sequence[torch.Tensor]) -> OverCandidates:
        width = max(1, max((len(c) for c in candidates), default=1))
        ids = torch.zeros(len(candidates), width, dtype=torch.long)
        lps = torch.full((len(candidates), width), -math.inf, dtype=torch.float64)
        for i, (c, lp) in enumerate(zip(candidates, logits)):
            ids[i, : len(c)] = torch.as_tensor(list(c), dtype=torch.long)
            lps[i, : len(c)] = torch.as_tensor(lp, dtype=torch.float64)
        return cls(ids, lps)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise NotImplementedError("OverCandidates draws one token per particle")
        k = torch.multinomial(self.logits.exp(), 1)
        return self.candidates.gather(1, k).flatten()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        hit = self.candidates == value.reshape(-1, 1)
        return torch.logsumexp(self.logits.masked_fill(~hit, -math.inf), -1)

    def expand(self, batch_shape, _instance=None):
        if torch.Size(batch_shape) != self.batch_shape:
            raise ValueError(f"OverCandidates has batch shape {tuple(self.batch_shape)}, cannot expand to {batch_shape}")
        return self
