"""``most-likely``: ``log p(v^ | c)`` of the most likely tokenization ``v^`` of an answer (the QA study's classifier).

(:func:`ppl_tok.infer.search.most_likely`, anytime branch and bound within the study's ``most_likely_time``
seconds per answer; the study stores each answer's ``"most-likely"`` record, :meth:`MostLikely.question_records`.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ppl_tok.common.arguments import positive
from ppl_tok.common.params import Params, param
from ppl_tok.scorings.records import Item, is_flag, is_log, is_nat, list_of, question_record
from ppl_tok.scorings.registry import QUESTION, Scoring, register

if TYPE_CHECKING:  # the QA study's hooks run with them; registering the scoring needs neither
    import numpy as np

    from ppl_tok.lm.base import LanguageModel
    from ppl_tok.scorings.classify import SplitScores


@dataclass(frozen=True)
class MostLikelyParams(Params):
    """How long the anytime search runs per answer (the QA study records it as ``most_likely_time``)."""

    most_likely_time: float = param(10.0, "seconds of the anytime branch and bound per answer",
                                    flag="--time-budget", type=positive, metavar="SECONDS")


@register
class MostLikely(Scoring):
    """A classifier over the answers' most likely tokenizations."""

    name = "most-likely"
    estimator = "the most likely tokenization (ppl_tok.infer.search)"
    levels = (QUESTION,)
    doc = "log p(v^ | c) of the most probable tokenization v^ of the answer"
    classifiers = ("most-likely",)
    record_kind = "most-likely"
    record_fields = {"log_prob": is_log, "tokens": list_of(is_nat), "optimal": is_flag}
    record_arrays = {"log_prob": float}
    params = MostLikelyParams

    def question_records(self, lm: LanguageModel, items: Sequence[Item],
                         settings: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Each answer's most likely tokenization, its log-probability and whether the search proved it optimal."""
        from ppl_tok.common.jsonl_store import encode_log
        from ppl_tok.datasets import continuation
        from ppl_tok.infer.search import most_likely

        def one(q: Any, j: int) -> dict[str, Any]:
            r = most_likely(continuation(q.choices[j]), lm, context=q.context, time_budget=settings["most_likely_time"])
            return {"log_prob": encode_log(r.log_prob), "tokens": list(r.tokens), "optimal": bool(r.optimal)}

        return [question_record(self.stored_kind, item, [one(item[2], j) for j in range(len(item[2].choices))])
                for item in items]

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """``s_j``: the stored ``log p(v^_j | c)``."""
        return t.per_byte(t.optional[self.stored_kind]["log_prob"], norm)
