"""``prefix`` and ``with-end``: the LM over strings' events of a document, each a certified bracket.

``prefix`` is ``log P(the output starts with x | BOS)``, ``with-end`` ``log P(the output is exactly x | BOS)``
(:func:`event_scores`; :mod:`ppl_tok.strings.events`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import math
import time

from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import (_require_bos, _window_plans, beam_settings, legacy_exhaustive,
                                        window_length)
from ppl_tok.scorings.windows import sweep_in_groups
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.registry import DOCUMENT, Scoring, SearchParams, register


def event_scores(lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *, with_end: bool,
                 on_bytes: Callable[[int], None] | None = None, partial: Any = None) -> list[DocumentScore]:
    """``prefix`` (``with_end`` false) and ``with-end``: the event in each document's last window, the text in the
    windows before it.

    A document of one window scores ``log P(x | BOS)`` (the output starts with ``x``) or
    ``log P(x, end | BOS)`` (the output is exactly ``x``), bracketed by one walk of the LM over strings
    (:func:`ppl_tok.strings.events.string_events`; every document's last window in lockstep). A longer
    document's windows before the last one score their text without the end, as ``beam`` does
    (:func:`ppl_tok.strings.string_marginals`, in lockstep): the string goes on past them, so the
    prefix and the end are events of the last window only. The figures are sums over windows, floors
    and ceilings included; each window's floor is at least its canonical slice's figure of the same
    event, and ``canonical`` holds that figure (with the end, ``log p(v*) + log p(end | v*)`` in the
    last window).

    ``on_bytes``: progress inside the documents, the bytes the sweeps and walks go past; ``partial``: as in
    :func:`ppl_tok.scorings.beam.marginal_scores`, for the sweeps and the last windows' walks.
    """
    from ppl_tok.strings import string_marginals
    from ppl_tok.strings.events import require_end, string_events

    _require_bos(lm)
    if with_end:
        require_end(lm, "a text followed by the end (--scoring with-end)")
    start = time.perf_counter()
    plans = [(doc, toks, pieces, canon, forwards + with_end)  # with the end: the row after the last token too
             for doc, toks, pieces, canon, forwards in _window_plans(lm, docs, window_length(lm, config))]
    before = [p for _, _, pieces, _, _ in plans for p in pieces[:-1]]
    keys = [(doc.index, k) for doc, _, pieces, _, _ in plans for k in range(len(pieces) - 1)]
    texts = iter(sweep_in_groups(string_marginals, lm, before, config.search, on_bytes=on_bytes,
                                 **(partial.options(keys) if partial else {})))
    lasts = [pieces[-1] for _, _, pieces, _, _ in plans]
    keys = [(doc.index, len(pieces) - 1) for doc, _, pieces, _, _ in plans]
    events = sweep_in_groups(string_events, lm, lasts, config.search, keep=True, on_bytes=on_bytes,
                             **(partial.options(keys) if partial else {}))
    seconds = time.perf_counter() - start
    total_bytes = max(1, sum(count_bytes(doc.text) for doc in docs))
    out = []
    for (doc, toks, pieces, canon, canon_forwards), ev in zip(plans, events):
        lower = upper = 0.0
        canonical, forwards = [], ev.forwards
        for k in range(len(pieces) - 1):
            r = next(texts)
            lo = max(r.lower, canon[k])  # the canonical slice is one tokenization of the window: a floor too
            lower, upper, forwards = lower + lo, upper + max(r.upper, lo), forwards + r.forwards
            canonical.append(canon[k])
        bracket, c = (ev.end, ev.canonical_end) if with_end else (ev.prefix, ev.canonical)
        lo = max(bracket.lower, c)
        canonical.append(c)
        out.append(DocumentScore(doc.index, count_bytes(doc.text), count_words(doc.text), len(toks), len(pieces),
                                 log_likelihood=lower + lo, canonical=math.fsum(canonical), lower=lower + lo,
                                 upper=upper + max(bracket.upper, lo), forwards=forwards,
                                 canonical_forwards=canon_forwards,
                                 seconds=seconds * count_bytes(doc.text) / total_bytes))
    return out


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

    def legacy_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return legacy_exhaustive(settings)


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
    canonical_label = "canonical+end"
    estimator = ("the LM over strings' probability of the whole output by the byte-synchronous beam "
                 "(ppl_tok.strings.events.string_events, StringSearchConfig)")
    doc = ("log P(the output is exactly x | c): every tokenization v of x times p(end | c, v), the end being EOS "
           "or another token without a surface; a certified bracket")

    def check(self, lm: LanguageModel) -> None:
        from ppl_tok.strings.events import require_end

        require_end(lm, "a text followed by the end (--scoring with-end)")
