"""``stratified``: stratified importance sampling, the likeliest tokenizations summed exactly, the rest sampled.

(:class:`ppl_tok.proposals.StratifiedGuide` through :func:`ppl_tok.infer.importance.marginals`.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.importance import particles
from ppl_tok.scorings.classify import SplitScores
from ppl_tok.scorings.pairs import Pair, PairScore
from ppl_tok.scorings.records import Item, is_log, question_record, run_num_samples
from ppl_tok.common.params import Params
from ppl_tok.scorings.registry import PAIR, QUESTION, Scoring, register, samples_param


@dataclass(frozen=True)
class StratifiedParams(Params):
    """The particles of ``stratified`` (each request carries its seed; the proposal is the stratified guide)."""

    num_samples: int = samples_param()


@register
class Stratified(Scoring):
    """The enumerated part exact, the rest sampled (unbiased)."""

    name = "stratified"
    estimator = "stratified importance sampling (guide 'stratified', ppl_tok.infer.importance)"
    levels = (PAIR, QUESTION)
    doc = "the stratified estimate of log p(x | c): the enumerated part exact, the rest sampled"
    classifiers = ("stratified",)
    params = StratifiedParams
    settings_fields = ("num_samples",)
    record_kind = "stratified"
    record_fields = {"log_marginal": is_log}
    record_arrays = {"log_marginal": float}

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        return [PairScore(float(r.log_marginal)) for r in particles(lm, pairs, config, guide="stratified")]

    def question_records(self, lm: LanguageModel, items: Sequence[Item],
                         settings: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Each answer's stratified estimate, text by text, N the study's, seeded as the core record's particles."""
        from ppl_tok.common.jsonl_store import encode_log
        from ppl_tok.common.seeds import pair_seed
        from ppl_tok.datasets import continuation
        from ppl_tok.infer.importance import marginal

        def one(split: str, q: Any, j: int) -> dict[str, Any]:
            r = marginal(continuation(q.choices[j]), lm, run_num_samples(settings), guide="stratified",
                         context=q.context, seed=pair_seed(settings["seed"], split, q.id, j))
            return {"log_marginal": encode_log(r.log_marginal)}

        return [question_record(self.stored_kind, (split, index, q), [one(split, q, j) for j in range(len(q.choices))])
                for split, index, q in items]

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """``s_j``: the stored stratified estimate."""
        return t.per_byte(t.optional[self.stored_kind]["log_marginal"], norm)
