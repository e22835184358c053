"""``beam``: the byte-synchronous beam's mass of a document's tokenizations, a certified bracket."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import beam_settings, marginal_scores
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.registry import DOCUMENT, Scoring, register


@register
class Beam(Scoring):
    """The mass of the tokenizations the beam found (:func:`~ppl_tok.scorings.documents.marginal_scores`)."""

    name = "beam"
    estimator = "the byte-synchronous beam (ppl_tok.strings.string_marginals, StringSearchConfig)"
    levels = (DOCUMENT,)
    floor = ceiling = True
    checkpoints = True
    doc = ("the mass of the tokenizations the beam found (a certified floor on log p(x | c)), with the pruned mass "
           "as a certified ceiling")

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None, partial: Any = None) -> list[DocumentScore]:
        return marginal_scores(lm, docs, config, on_bytes=on_bytes, partial=partial)

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        return {**super().settings(config), **beam_settings(config)}
