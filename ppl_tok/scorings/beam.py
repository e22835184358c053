"""``beam``: the byte-synchronous beam's mass of a document's tokenizations, a certified bracket."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import beam_settings, marginal_scores
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.registry import BEAM_LAZY_DEFAULT, DOCUMENT, Scoring, SearchParams, register


@dataclass(frozen=True)
class BeamParams(SearchParams):
    """The ``beam`` scoring's search: lazy extension at :data:`~ppl_tok.scorings.registry.BEAM_LAZY_DEFAULT` unless
    shares are given or ``exhaustive``."""

    lazy_default = BEAM_LAZY_DEFAULT


@register
class Beam(Scoring):
    """The mass of the tokenizations the beam found (:func:`~ppl_tok.scorings.documents.marginal_scores`)."""

    name = "beam"
    estimator = "the byte-synchronous beam (ppl_tok.strings.string_marginals, StringSearchConfig)"
    levels = (DOCUMENT,)
    floor = ceiling = True
    checkpoints = True
    params = BeamParams
    settings_fields = ()  # the search is recorded as beam_settings says
    doc = ("the mass of the tokenizations the beam found (a certified floor on log p(x | c)), with the pruned mass "
           "as a certified ceiling")

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None, partial: Any = None) -> list[DocumentScore]:
        return marginal_scores(lm, docs, config, on_bytes=on_bytes, partial=partial)

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        return {**super().settings(config), **beam_settings(config)}
