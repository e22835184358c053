"""``prefix`` and ``with-end``: the LM over strings' events of a document, each a certified bracket.

``prefix`` is ``log P(the output starts with x | BOS)``, ``with-end`` ``log P(the output is exactly x | BOS)``
(:func:`~ppl_tok.scorings.documents.event_scores`; :mod:`ppl_tok.strings.events`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import beam_settings, event_scores
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.registry import DOCUMENT, Scoring, SearchParams, register


@dataclass(frozen=True)
class EventParams(SearchParams):
    """The search of ``prefix`` and ``with-end``: every kept prefix run unless lazy shares are given."""


class _Event(Scoring):
    levels = (DOCUMENT,)
    floor = ceiling = True
    checkpoints = True
    params = EventParams
    settings_fields = ()  # the search is recorded as beam_settings says
    #: the event: the output is exactly the document (the end after it), else it starts with it
    with_end: bool = False

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None, partial: Any = None) -> list[DocumentScore]:
        return event_scores(lm, docs, config, with_end=self.with_end, on_bytes=on_bytes, partial=partial)

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        return {**super().settings(config), **beam_settings(config)}


@register
class Prefix(_Event):
    """The probability that the output starts with the document."""

    name = "prefix"
    estimator = ("the LM over strings' prefix probability by the byte-synchronous beam "
                 "(ppl_tok.strings.events.string_events, StringSearchConfig)")
    doc = ("log P(the output starts with x | c): every token sequence whose spelling starts with x, the last token "
           "allowed to run past its end; a certified bracket (the mass found, plus the pruned mass)")


@register
class WithEnd(_Event):
    """The probability that the output is exactly the document (the end after it)."""

    name = "with-end"
    with_end = True
    estimator = ("the LM over strings' probability of the whole output by the byte-synchronous beam "
                 "(ppl_tok.strings.events.string_events, StringSearchConfig)")
    doc = ("log P(the output is exactly x | c): every tokenization v of x times p(end | c, v), the end being EOS "
           "or another token without a surface; a certified bracket")

    def check(self, lm: LanguageModel) -> None:
        from ppl_tok.strings.events import require_end

        require_end(lm, "a text followed by the end (--scoring with-end)")
