"""``stratified``: stratified importance sampling, the likeliest tokenizations summed exactly, the rest sampled.

(:class:`ppl_tok.proposals.StratifiedGuide` through :func:`ppl_tok.infer.importance.marginals`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.importance import particles
from ppl_tok.scorings.pairs import Pair, PairScore
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

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        return [PairScore(float(r.log_marginal)) for r in particles(lm, pairs, config, guide="stratified")]
