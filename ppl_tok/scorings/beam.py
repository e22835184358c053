"""``beam``: the byte-synchronous beam's mass of a document's tokenizations, a certified bracket."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import math
import time

from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import _require_bos, _window_plans, beam_settings, legacy_exhaustive, window_length
from ppl_tok.scorings.windows import sweep_in_groups
from ppl_tok.strings.marginal import differing_spans
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.registry import BEAM_LAZY_DEFAULT, DOCUMENT, Scoring, SearchParams, register


#: The layout of a beam record's ``span_gain`` (:func:`marginal_scores`); records before it have none.
SPAN_GAIN_VERSION = 1


#: spans holding less than this share of their window's off-canonical mass are summed into ``rest``
SPAN_SHARE_KEPT = 1e-3


def marginal_scores(lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                    on_bytes: Callable[[int], None] | None = None, partial: Any = None) -> list[DocumentScore]:
    """The byte-synchronous beam's certified bracket of each document's marginal, window by window.

    The windows of ``docs`` are swept in lockstep, ``lm_bytes`` of text at a time (:func:`~ppl_tok.scorings.windows.sweep_in_groups`;
    :func:`ppl_tok.strings.string_marginals`: one batched forward per step for a group; each window's
    figures are those of its sweep alone). A document's
    ``seconds`` is the batch's wall time shared in proportion to bytes.

    A one-window document's canonical figure is the beam's own (its canonical path,
    computed with the same forwards as the mass found, so that the gain is not
    float32 rounding); windowed documents use the canonical slices (``ppl_tok.scorings.documents._windowed``).

    ``span_gain`` records where the gain sits: each window's gain over canonical
    (nats) split over the byte spans where the found tokenizations depart from the
    canonical one, in proportion to the off-canonical mass each span holds
    (:attr:`ppl_tok.strings.StringMarginal.departures`); spans under
    ``SPAN_SHARE_KEPT`` of their window's off-canonical mass are summed into
    ``rest``, and ``single_span`` is the part of the gain in tokenizations that
    depart on one span only (attributed without splitting).

    ``on_bytes``: progress inside the documents, the bytes the sweeps go past as they go
    (:func:`ppl_tok.strings.string_marginals`). ``partial``: the checkpoints each window's sweep resumes
    from and saves to (:class:`ppl_tok.perplexity.partial.Partial`; ``None``: none).
    """
    from ppl_tok.strings import string_marginals

    _require_bos(lm)
    start = time.perf_counter()
    plans = _window_plans(lm, docs, window_length(lm, config))
    flat = [p for _, _, pieces, _, _ in plans for p in pieces]
    keys = [(doc.index, k) for doc, _, pieces, _, _ in plans for k in range(len(pieces))]
    results = iter(sweep_in_groups(string_marginals, lm, flat, config.search, on_bytes=on_bytes,
                                   **(partial.options(keys) if partial else {})))
    seconds = time.perf_counter() - start
    total_bytes = max(1, sum(count_bytes(doc.text) for doc in docs))
    return [_marginal_record(lm, doc, toks, pieces, canon, canon_forwards, [next(results) for _ in pieces],
                             seconds * count_bytes(doc.text) / total_bytes)
            for doc, toks, pieces, canon, canon_forwards in plans]


def marginal_score(lm: LanguageModel, doc: ScoredText, config: ScoringConfig) -> DocumentScore:
    """One document's :func:`marginal_scores`."""
    return marginal_scores(lm, [doc], config)[0]


def _marginal_record(lm: LanguageModel, doc: ScoredText, toks: Sequence[int], pieces: Sequence[Any],
                     canon: Sequence[float] | None, canon_forwards: int, results: Sequence[Any],
                     seconds: float) -> DocumentScore:
    """A document's score from its windows' :class:`~ppl_tok.strings.StringMarginal` (see :func:`marginal_scores`)."""
    lower = upper = estimate = 0.0
    canonical: list[float] = []
    forwards = found = 0
    spans: list[list[int]] = []
    departing: list[list[float]] = []
    rest = single = 0.0
    best_gain = 0.0
    offset = 0
    for k, (p, r) in enumerate(zip(pieces, results)):
        c = r.canonical if canon is None else canon[k]
        spans += [[offset + a, offset + b] for a, b in differing_spans(lm.vocab, r.best, lm.canonical(p.text))]
        best_gain += max(0.0, r.best_log_prob - c)
        gain = max(0.0, max(r.estimate, c) - c)
        off = logsumexp(m for _, _, m in r.departures)
        for a, b, m in r.departures:  # the window's gain over canonical, split as its off-canonical mass is
            share = math.exp(m - off)
            if share >= SPAN_SHARE_KEPT:
                departing.append([offset + a, offset + b, gain * share])
            else:
                rest += gain * share
        if r.departures:
            single += gain * math.exp(r.single_span_mass - off)
        offset += len(p.text.encode("utf-8"))
        lo = max(r.lower, c)  # the canonical tokens are one tokenization of the window: a floor too
        lower += lo
        upper += max(r.upper, lo)
        estimate += max(r.estimate, lo)
        canonical.append(c)
        forwards += r.forwards
        found += r.found
    return DocumentScore(doc.index, count_bytes(doc.text), count_words(doc.text), len(toks), len(pieces),
                         log_likelihood=estimate, canonical=math.fsum(canonical), lower=lower, upper=upper,
                         forwards=forwards, canonical_forwards=canon_forwards, seconds=seconds,
                         extra={"found": found, "best_spans": spans, "best_gain": best_gain,
                                "span_gain": {"version": SPAN_GAIN_VERSION, "spans": departing, "rest": rest,
                                              "single_span": single}})


@dataclass(frozen=True)
class BeamParams(SearchParams):
    """The ``beam`` scoring's search: lazy extension at :data:`~ppl_tok.scorings.registry.BEAM_LAZY_DEFAULT` unless
    shares are given or ``exhaustive``."""

    lazy_default = BEAM_LAZY_DEFAULT


@register
class Beam(Scoring):
    """The mass of the tokenizations the beam found (:func:`marginal_scores`)."""

    name = "beam"
    estimator = "the byte-synchronous beam (ppl_tok.strings.string_marginals, StringSearchConfig)"
    levels = (DOCUMENT,)
    floor = ceiling = searched_floor = True
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

    def legacy_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        # before prune_against was recorded, the perplexity beam had only pruning against the offset's best
        return {"prune_against": "offset", **legacy_exhaustive(settings)}
