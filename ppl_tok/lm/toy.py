"""Exact, fast toy LMs for tests, docs and the hardness reductions.

* :class:`FunctionLM`: a Python function from prefix to next-token distribution
  (the programmable LM of the paper's appendix).
* :class:`TableLM`: a table of next-token distributions keyed by prefix, with a
  default for prefixes not in the table.
* :class:`BigramLM`: the next token depends only on the previous one.

All normalise what they are given and work in log space.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ppl_tok.vocabulary import Vocabulary
from ppl_tok.lm.base import LanguageModel

#: What a toy LM may return for a prefix: log-probs or probabilities as a tensor
#: of size |V|, or a mapping token -> probability (missing tokens get zero).
Distribution = torch.Tensor | Mapping[int, float] | Sequence[float]


def _to_log_probs(dist: Distribution, size: int, *, log: bool) -> torch.Tensor:
    if isinstance(dist, Mapping):
        if log:
            out = torch.full((size,), -math.inf, dtype=torch.float64)
            for t, lp in dist.items():
                out[t] = lp
        else:
            out = torch.zeros(size, dtype=torch.float64)
            for t, p in dist.items():
                out[t] = p
    else:
        out = torch.as_tensor(dist, dtype=torch.float64).clone()
    if out.shape != (size,):
        raise ValueError(f"a next-token distribution must have {size} entries, got shape {tuple(out.shape)}")
    if not log:
        if (out < 0).any():
            raise ValueError("probabilities must be non-negative")
        out = out.log()
    if torch.isnan(out).any():
        raise ValueError("the next-token distribution contains NaN")
    norm = torch.logsumexp(out, 0)
    if not torch.isfinite(norm):
        raise ValueError("the next-token distribution has no mass")
    return out - norm


class FunctionLM(LanguageModel):
    """An LM given by a function ``prefix (tuple of ids, BOS included) -> distribution``.

    :param fn: returns probabilities (or log-probs if ``log=True``) for the next token.
    """

    def __init__(self, vocab: Vocabulary, fn: Callable[[tuple[int, ...]], Distribution], *,
                 bos_id: int | None = None, log: bool = False, name: str = "function-lm"):
        super().__init__(vocab, bos_id, name=name)
        self.fn = fn
        self.log = log

    def _dist(self, tokens: tuple[int, ...]) -> torch.Tensor:
        return _to_log_probs(self.fn(tokens), len(self.vocab), log=self.log)

    def _prefill(self, keys: list[tuple[int, ...]]) -> tuple[torch.Tensor, list[Any]]:
        return torch.stack([self._dist(k) for k in keys]), list(keys)

    def _extend(self, payloads: list[Any], tokens: list[int]) -> tuple[torch.Tensor, list[Any]]:
        new = [p + (t,) for p, t in zip(payloads, tokens)]
        return torch.stack([self._dist(p) for p in new]), new


class TableLM(FunctionLM):
    """An LM given by a table ``prefix -> distribution`` and a default distribution.

    Without a default, prefixes missing from the table get the uniform distribution.
    """

    def __init__(self, vocab: Vocabulary, table: Mapping[tuple[int, ...], Distribution], *,
                 default: Distribution | None = None, bos_id: int | None = None, name: str = "table-lm"):
        uniform = torch.ones(len(vocab), dtype=torch.float64)
        self.table = {tuple(k): v for k, v in table.items()}
        self.default = uniform if default is None else default
        super().__init__(vocab, lambda prefix: self.table.get(prefix, self.default), bos_id=bos_id, name=name)


class BigramLM(LanguageModel):
    """``p(v_t | v_<t) = P[v_{t-1}, v_t]``; the first token (or the one after BOS) uses ``P[bos]``.

    :param matrix: ``|V| x |V|`` probabilities (rows are normalised).
    :param start: the distribution of the first token when there is no BOS.
    """

    def __init__(self, vocab: Vocabulary, matrix: torch.Tensor, *, bos_id: int | None = None,
                 start: Distribution | None = None, name: str = "bigram-lm"):
        super().__init__(vocab, bos_id, name=name)
        size = len(vocab)
        matrix = torch.as_tensor(matrix, dtype=torch.float64)
        if matrix.shape != (size, size):
            raise ValueError(f"a bigram matrix must be {size} x {size}, got {tuple(matrix.shape)}")
        self.log_matrix = torch.stack([_to_log_probs(row, size, log=False) for row in matrix])
        self.log_start = (_to_log_probs(start, size, log=False) if start is not None
                          else torch.full((size,), -math.log(size), dtype=torch.float64))

    @classmethod
    def random(cls, vocab: Vocabulary, seed: int = 0, concentration: float = 0.5, **kw: Any) -> BigramLM:
        """A bigram LM with Dirichlet-random rows (seeded)."""
        g = torch.Generator().manual_seed(seed)
        alpha = torch.full((len(vocab),), concentration, dtype=torch.float64)
        gamma = torch._standard_gamma(alpha.expand(len(vocab) + 1, -1).contiguous(), generator=g)
        gamma = gamma.clamp_min(1e-12)
        return cls(vocab, gamma[:-1], start=gamma[-1], **kw)

    def transition(self, prev: int | None) -> torch.Tensor:
        return self.log_start if prev is None else self.log_matrix[prev]

    def _prefill(self, keys: list[tuple[int, ...]]) -> tuple[torch.Tensor, list[Any]]:
        prevs = [k[-1] if k else None for k in keys]
        return torch.stack([self.transition(p) for p in prevs]), prevs

    def _extend(self, payloads: list[Any], tokens: list[int]) -> tuple[torch.Tensor, list[Any]]:
        return self.log_matrix[list(tokens)], list(tokens)

    def log_prob(self, tokens: Sequence[int], context: str | Sequence[int] = "") -> float:
        prefix = self.prefix_ids(context)
        prev = prefix[-1] if prefix else None
        total = 0.0
        for t in tokens:
            total += float(self.transition(prev)[t])
            prev = t
        return total
