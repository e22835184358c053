"""The exact marginal probability of a string, by enumeration with prefix sharing.

Geh et al. (2024), Problem 2 (marginal string probability, #P-hard in general):

    p(x | c) = sum over tokenizations v of x of  prod_t p(v_t | c, v_<t)

For short strings the sum is computed exactly by expanding the whole tree of
token prefixes that the MDD allows: the best-first engine of
:mod:`ppl_tok.infer.search` with an unlimited budget (so this is the certified
bracket closed to width zero). Every distinct prefix costs one LM forward
(batched), and the last token of a path costs none (its probability is read
from its parent's next-token distribution). The estimand excludes EOS, as the paper's code does: it is the
probability that the LM's next tokens spell exactly ``x``, not the probability
of ``x`` as a byte prefix.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from ppl_tok.infer.diagnostics import CERTIFIED
from ppl_tok.lm.base import LanguageModel
from ppl_tok.mdd import MDD, compile_mdd
from ppl_tok.infer.search import PrefixSearch


class TimeBudgetExceeded(TimeoutError):
    """An exact computation that ran past its time budget."""


@dataclass(frozen=True)
class ExactMarginal:
    """The full distribution over the tokenizations of a string.

    ``tokenizations[i]`` has joint log-probability ``log_probs[i]`` (sorted,
    most likely first); ``log_marginal`` is their log-sum-exp.
    """

    text: str
    log_marginal: float
    canonical: tuple[int, ...]
    canonical_log_prob: float
    tokenizations: list[tuple[int, ...]]
    log_probs: torch.Tensor
    forwards: int

    @property
    def count(self) -> int:
        return len(self.tokenizations)

    @property
    def most_likely(self) -> tuple[int, ...]:
        return self.tokenizations[0]

    @property
    def statement(self) -> str:
        """``"certified"``: every tokenization summed (:data:`ppl_tok.infer.diagnostics.STATEMENTS`)."""
        return CERTIFIED

    @property
    def canonical_share(self) -> float:
        """p(canonical | x): the canonical tokenization's share of the marginal.

        0.0 when the string has probability zero (no tokenization carries any
        mass, so the share is undefined; never NaN).
        """
        if self.log_marginal == -math.inf:
            return 0.0
        return math.exp(self.canonical_log_prob - self.log_marginal)

    def __repr__(self) -> str:
        return (f"ExactMarginal({self.text!r}: log p = {self.log_marginal:.4f} over {self.count} tokenizations, "
                f"canonical share {self.canonical_share:.4f})")

    def to_dict(self) -> dict[str, Any]:
        """The summary numbers (no per-tokenization lists), JSON-ready apart from infinities."""
        return {"text": self.text, "log_marginal": self.log_marginal, "count": self.count,
                "canonical": list(self.canonical), "canonical_log_prob": self.canonical_log_prob,
                "canonical_share": self.canonical_share, "most_likely": list(self.most_likely),
                "most_likely_log_prob": float(self.log_probs[0]), "forwards": self.forwards,
                "statement": self.statement}

    def posterior(self) -> torch.Tensor:
        """p(v | x) for every tokenization, in the order of ``tokenizations`` (all zeros if p(x) = 0)."""
        if self.log_marginal == -math.inf:
            return torch.zeros_like(self.log_probs)
        return (self.log_probs - self.log_marginal).exp()


def exact_marginal(text: str, lm: LanguageModel, *, context: str | Sequence[int] = "",
                   max_paths: int = 100_000, batch_size: int = 64, mdd: MDD | None = None,
                   time_budget: float | None = None) -> ExactMarginal:
    """``log p(text | context)`` summed exactly over every tokenization of ``text``.

    :param max_paths: refuse (with the count in the message) strings with more tokenizations.
    :param batch_size: the most prefixes extended in one LM call.
    :param time_budget: seconds; raise :class:`TimeBudgetExceeded` if the enumeration takes longer.
    """
    if time_budget is not None and not (time_budget > 0 and math.isfinite(time_budget)):
        raise ValueError(f"time_budget must be a positive number of seconds, got {time_budget}")
    start = time.perf_counter()
    mdd = mdd if mdd is not None else compile_mdd(text, lm.vocab)
    total = mdd.count()
    if total > max_paths:
        raise ValueError(
            f"{text!r} has {total} tokenizations, more than max_paths={max_paths}: exact enumeration is "
            "out of reach (raise max_paths, or estimate the marginal instead)"
        )
    search = PrefixSearch(lm, mdd, context, keep_zero=True)
    with tqdm(total=total, desc="enumerating tokenizations", unit="path", disable=None, leave=False) as bar:
        while not search.done:
            search.expand(batch_size)
            if time_budget is not None and time.perf_counter() - start > time_budget:
                raise TimeBudgetExceeded(
                    f"exact enumeration of {text!r} did not finish within {time_budget:g} s "
                    f"({len(search.found)} of {total} tokenizations done)"
                )
            bar.update(len(search.found) - bar.n)
    done = list(search.found.items())
    done.sort(key=lambda item: -item[1])
    log_probs = torch.tensor([lp for _, lp in done], dtype=torch.float64)
    paths = [p for p, _ in done]
    canonical = tuple(lm.canonical(text))
    if canonical not in paths:
        raise ValueError(f"the canonical tokenization {canonical} of {text!r} is not a path of its MDD")
    return ExactMarginal(
        text=text, log_marginal=float(torch.logsumexp(log_probs, 0)), canonical=canonical,
        canonical_log_prob=float(log_probs[paths.index(canonical)]), tokenizations=paths,
        log_probs=log_probs, forwards=search.forwards,
    )
