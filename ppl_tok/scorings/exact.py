"""``exact``: the best-first search's certified bracket ``lower <= log p(x | c) <= upper``, its midpoint the figure.

(:func:`ppl_tok.infer.search.marginal_bounds_many`: every request's search run together, each stopping when
its bracket is narrower than :attr:`ScoringConfig.exact_tolerance` or it spent :attr:`ScoringConfig.exact_budget`
forwards.) Where the search found nothing, the figure is the upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.classify import SplitScores, correct, exact_scores
from ppl_tok.scorings.pairs import Pair, PairScore
from ppl_tok.scorings.records import Item, is_flag, is_log, is_nat, question_record
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
    floor = ceiling = deterministic = True
    doc = ("the midpoint of a certified bracket lower <= log p(x | c) <= upper (the upper bound where nothing was "
           "found)")
    classifiers = ("exact",)
    params = ExactParams
    settings_fields = ("exact_tolerance", "exact_budget")
    record_kind = "exact"
    record_fields = {"lower": is_log, "upper": is_log, "closed": is_flag, "forwards": is_nat}
    record_arrays = {"lower": float, "upper": float, "closed": bool}

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        from ppl_tok.infer.search import marginal_bounds_many

        brackets = marginal_bounds_many([p.continuation for p in pairs], lm, contexts=[p.context for p in pairs],
                                        tolerance=config.exact_tolerance, budget=config.exact_budget)
        return [PairScore(midpoint(b.lower, b.upper), lower=b.lower, upper=b.upper) for b in brackets]

    def question_records(self, lm: LanguageModel, items: Sequence[Item],
                         settings: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every answer's bracket (``exact_tolerance``, ``exact_budget`` of the study), all searches run together."""
        from ppl_tok.common.jsonl_store import encode_log
        from ppl_tok.datasets import continuation
        from ppl_tok.infer.search import marginal_bounds_many

        texts = [continuation(c) for _, _, q in items for c in q.choices]
        contexts = [q.context for _, _, q in items for _ in q.choices]
        brackets = iter(marginal_bounds_many(texts, lm, contexts=contexts, tolerance=settings["exact_tolerance"],
                                             budget=settings["exact_budget"]))
        return [question_record(self.stored_kind, item, [
            {"lower": encode_log(b.lower), "upper": encode_log(b.upper), "closed": bool(b.closed),
             "forwards": int(b.forwards)} for b in (next(brackets) for _ in item[2].choices)]) for item in items]

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """``s_j``: the bracket's midpoint (:func:`ppl_tok.scorings.classify.exact_scores`)."""
        return exact_scores(t, norm)[0]

    def question_columns(self, t: SplitScores) -> dict[str, np.ndarray]:
        return {"exact_log_marginals": exact_scores(t)[0]} if self.stored_kind in t.optional else {}

    def report_section(self, tables: Mapping[str, SplitScores],
                       classify: Callable[[SplitScores, bool], np.ndarray]) -> dict[str, Any]:
        """Per split: the questions the brackets leave uncertified, and the accuracy on the certified ones."""
        out = {}
        for s, t in tables.items():
            _, cert = exact_scores(t)
            _, cert_norm = exact_scores(t, norm=True)
            ok = correct(classify(t, False), t)
            out[s] = {
                "questions": len(t), "not_certified": int((~cert).sum()), "not_certified_norm": int((~cert_norm).sum()),
                "brackets_open": int((~t.optional[self.stored_kind]["closed"] & t.valid).sum()),
                "accuracy_certified": float(ok[cert].mean()) if cert.any() else None}
        return out

    def report_markdown(self, section: dict[str, Any]) -> list[str]:
        def pct(x: float | None) -> str:
            return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"

        return (["", "## Exact marginal (certified brackets)", "",
                 "| split | questions | not certified | not certified (acc_norm) | open brackets | acc on certified |",
                 "|---|---|---|---|---|---|"] +
                [f"| {s} | {e['questions']} | {e['not_certified']} | {e['not_certified_norm']} | {e['brackets_open']} | "
                 f"{pct(e['accuracy_certified'])} |" for s, e in section.items()])
