"""``exact``: the best-first search's certified bracket ``lower <= log p(x | c) <= upper``, its midpoint the figure.

(:func:`ppl_tok.infer.search.marginal_bounds_many`: every request's search run together, each stopping when
its bracket is narrower than :attr:`ScoringConfig.exact_tolerance` or it spent :attr:`ScoringConfig.exact_budget`
forwards.) Where the search found nothing, the figure is the upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.pairs import Pair, PairScore
from ppl_tok.common.arguments import POSITIVE, positive
from ppl_tok.common.params import Params, param
from ppl_tok.scorings.registry import PAIR, QUESTION, Scoring, register


def midpoint(lower: float, upper: float) -> float:
    """A bracket's figure: its midpoint, or ``upper`` where nothing was found (``lower = -inf``)."""
    return upper if lower == -math.inf else (lower + upper) / 2


@dataclass(frozen=True)
class ExactParams(Params):
    """Where the best-first search stops: a bracket this narrow, or this many forwards."""

    exact_tolerance: float = param(1e-3, "the bracket's width at which the search stops (nats)",
                                   flag="--exact-tolerance", type=positive, metavar="NATS")
    exact_budget: int = param(2000, "the search's forwards at most, per answer", flag="--exact-budget",
                              type=POSITIVE, metavar="FORWARDS", limit="search_forwards")


@register
class Exact(Scoring):
    """A certified bracket of the marginal, by best-first search over the MDD."""

    name = "exact"
    estimator = "the best-first certified bracket (ppl_tok.infer.search.marginal_bounds_many)"
    levels = (PAIR, QUESTION)
    floor = ceiling = True
    doc = ("the midpoint of a certified bracket lower <= log p(x | c) <= upper (the upper bound where nothing was "
           "found)")
    classifiers = ("exact",)
    params = ExactParams
    settings_fields = ("exact_tolerance", "exact_budget")
    record_kind = "exact"

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        from ppl_tok.infer.search import marginal_bounds_many

        brackets = marginal_bounds_many([p.continuation for p in pairs], lm, contexts=[p.context for p in pairs],
                                        tolerance=config.exact_tolerance, budget=config.exact_budget)
        return [PairScore(midpoint(b.lower, b.upper), lower=b.lower, upper=b.upper) for b in brackets]
