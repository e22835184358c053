"""The request-level (``pair``) view of a scoring: one (context, continuation) request and its figure.

lm-eval's ``loglikelihood`` (:mod:`ppl_tok.integrations.lm_eval`) and the QA study's scorings without a stored
record kind (:mod:`ppl_tok.qa.run`) ask :meth:`ppl_tok.scorings.Scoring.score_pairs` for these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.lm.base import LanguageModel


@dataclass(frozen=True)
class Pair:
    """One request: ``log p(continuation | context)`` is wanted.

    :param seed: the seed of whatever the scoring samples for it (``pair_seed(run seed, split, id, choice)``).
    :param group: what the request belongs to (lm-eval: ``(task, doc_id)``; a question's answers share it):
        ``mixture`` normalises over a group's requests.
    :param choice: its index in its group.
    """

    context: str
    continuation: str
    seed: int = 0
    group: tuple[Any, ...] = ()
    choice: int = 0


@dataclass(frozen=True)
class PairScore:
    """A request's figure (nats) and, where the scoring certifies one, its bracket ``lower <= log p <= upper``."""

    estimate: float
    lower: float | None = None
    upper: float | None = None
    #: whether greedy decoding writes the continuation (lm-eval's ``is_greedy``; ``None``: not computed)
    greedy: bool | None = None

    def __post_init__(self) -> None:
        if math.isnan(self.estimate):
            raise ValueError("a scoring returned NaN (a bug: every figure is a finite number or -inf)")


def canonical_tokens(lm: LanguageModel, pair: Pair) -> list[int]:
    """The continuation's canonical tokens, or an error naming the request."""
    try:
        return list(lm.canonical(pair.continuation))
    except ValueError as err:
        raise ValueError(f"request {pair.group} choice {pair.choice}: continuation {pair.continuation!r} has no "
                         f"canonical tokenization ({err})") from err


def groups(pairs: Sequence[Pair]) -> list[list[int]]:
    """The indices of ``pairs`` by :attr:`Pair.group`, in order of first appearance."""
    out: dict[tuple[Any, ...], list[int]] = {}
    for i, p in enumerate(pairs):
        out.setdefault(p.group, []).append(i)
    return list(out.values())
