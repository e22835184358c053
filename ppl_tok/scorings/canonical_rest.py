"""``canonical+rest``: ``log(p(v* | c) + m)``, the canonical term exact, ``m`` the importance estimate of the rest.

One formula (:func:`ppl_tok.infer.importance.canonical_plus_rest`) for documents (per window, summed:
:func:`~ppl_tok.scorings.documents.canonical_plus_rest_score`), requests and the QA study's classifier
(:func:`ppl_tok.qa.classify.canonical_plus_rest_scores`). Its certified floor is the canonical term.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.infer.importance import canonical_plus_rest
from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import canonical_plus_rest_score
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.importance import particles
from ppl_tok.scorings.pairs import Pair, PairScore
from ppl_tok.common.params import Params
from ppl_tok.scorings.registry import (DOCUMENT, PAIR, QUESTION, Scoring, proposal_param, register, samples_param,
                                       seed_param)


@dataclass(frozen=True)
class CanonicalPlusRestParams(Params):
    """The particles of ``canonical+rest``: how many, their seed and their proposal."""

    num_samples: int = samples_param()
    seed: int = seed_param()
    proposal: dict[str, Any] | None = proposal_param()


@register
class CanonicalPlusRest(Scoring):
    """The canonical probability exact, the non-canonical mass sampled (look-ahead particles)."""

    name = "canonical+rest"
    estimator = "the canonical term exact, importance sampling for the rest (ppl_tok.infer.importance.marginals)"
    levels = (DOCUMENT, PAIR, QUESTION)
    floor = True
    doc = ("log(p(v* | c) + m), m the unbiased importance estimate of the non-canonical mass; the canonical term "
           "is its certified floor")
    classifiers = ("canonical+rest",)
    params = CanonicalPlusRestParams
    settings_fields = ("num_samples", "seed")  # the proposal: where it is not the look-ahead (settings)
    record_kind = "is"

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        out = super().settings(config)
        if config.proposal is not None and config.proposal.get("proposal") != "lookahead":
            out.update(config.proposal)  # recorded when not the look-ahead: runs from before it resume
        return out

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        return [canonical_plus_rest_score(lm, d, config, on_bytes) for d in docs]

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        return [PairScore(float(canonical_plus_rest(r.canonical_log_prob, r.noncanonical_estimate)),
                          lower=float(r.canonical_log_prob))
                for r in particles(lm, pairs, config)]
