"""``tree``: a document's marginal through the token tree off the canonical cache, a certified bracket for it.

Each string window of a document (:func:`~ppl_tok.scorings.windows.text_windows`) is one text of
:func:`ppl_tok.strings.tree_marginal.tree_marginals`: its canonical tokens in one prefill forward, then one branch
per segment (cut at canonical boundaries before whitespace, ``segment_bytes`` apart at least), every branch of
every document of the batch in the same LM calls. The figure is ``F``, the sum over the cut-respecting
tokenizations of the product of their segments' probabilities given the canonical tokens before each segment
(that module's docstring): at least the canonical tokens' log-likelihood, but **not** ``log p(x | BOS)`` and no
bound on it (a segment's alternatives are priced in the canonical context). ``lower``/``upper`` are certified for
``F`` only (so the scoring declares no floor or ceiling on the marginal and reports show none); windowed documents
sum the windows' figures.

A record's ``forwards`` is the token positions the batch ran through the LM (``lm.stats``, counted from an empty
prefix cache: the canonical prefill included), shared among the batch's documents in proportion to bytes, as
``seconds`` is; ``extra``: ``segments`` (the document's), ``calls`` (the batch's LM calls) and ``batch`` (its
documents).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import math
import time

from ppl_tok.common.arguments import integer
from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.common.params import param
from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import _require_bos, _windowed, beam_settings, window_length
from ppl_tok.scorings.registry import DOCUMENT, Scoring, ScoringConfig, SearchParams, register
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.windows import text_windows


#: bytes: the fewest a segment holds (its cut then waits for the next whitespace) by default, and the branches'
#: lazy extension by default (one share everywhere): chosen on the first 40 OpenBookQA dev stems, checked on 1-2 kB
#: HellaSwag validation documents from item 5000 on (``benchmarks/perplexity_defaults.py``, docs/perplexity.md)
SEGMENT_BYTES = 64
TREE_LAZY_DEFAULT: dict[str, float | None] = {"extend_threshold": 1e-3, "boundary_threshold": None,
                                              "rejoin_threshold": None}


def tree_scores(lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig) -> list[DocumentScore]:
    """Each document's ``F`` and its certified bracket (module docstring), the whole batch in the same LM calls."""
    from ppl_tok.strings.tree_marginal import tree_marginals

    _require_bos(lm)
    start = time.perf_counter()
    window = window_length(lm, config)
    plans = []
    for doc in docs:
        toks = lm.canonical(doc.text)
        pieces = text_windows(lm.vocab, toks, window)
        canon = None
        if len(pieces) > 1:
            toks, pieces, canon, _ = _windowed(lm, doc, window)
        plans.append((doc, toks, pieces, canon))
    flat = [p for _, _, pieces, _ in plans for p in pieces]
    lm.clear_cache()  # the batch's forwards counted from an empty cache: a record does not depend on earlier ones
    before_forwards, before_calls = lm.stats.forwards, lm.stats.calls
    results = iter(tree_marginals(lm, [p.text for p in flat], [p.context for p in flat], config.search,
                                  config.params.segment_bytes, canonical=[p.tokens for p in flat]))
    seconds = time.perf_counter() - start
    forwards, calls = lm.stats.forwards - before_forwards, lm.stats.calls - before_calls
    total_bytes = max(1, sum(count_bytes(doc.text) for doc in docs))
    out = []
    for doc, toks, pieces, canon in plans:
        mine = [next(results) for _ in pieces]
        share = count_bytes(doc.text) / total_bytes
        canonical = math.fsum(canon) if canon is not None else math.fsum(m.canonical for m in mine)
        out.append(DocumentScore(doc.index, count_bytes(doc.text), count_words(doc.text), len(toks), len(pieces),
                                 log_likelihood=math.fsum(m.estimate for m in mine), canonical=canonical,
                                 lower=math.fsum(m.lower for m in mine), upper=math.fsum(m.upper for m in mine),
                                 forwards=round(forwards * share), canonical_forwards=len(toks),
                                 seconds=seconds * share,
                                 extra={"segments": sum(len(m.cuts) for m in mine), "calls": calls,
                                        "batch": len(docs)}))
    return out


@dataclass(frozen=True)
class TreeParams(SearchParams):
    """The ``tree`` scoring's search (each branch's beam; lazy extension at :data:`TREE_LAZY_DEFAULT` unless shares
    are given or ``exhaustive``) and its segments."""

    lazy_default = TREE_LAZY_DEFAULT

    segment_bytes: int = param(SEGMENT_BYTES, "the fewest bytes a segment of the token tree holds (its cut waits for "
                               "the next whitespace after them; 0: every word)", flag="--segment-bytes",
                               type=integer(0), metavar="BYTES")


@register
class Tree(Scoring):
    """The sum over the cut-respecting tokenizations, segments priced after the canonical tokens (:func:`tree_scores`)."""

    name = "tree"
    estimator = "the token tree off the canonical cache (ppl_tok.strings.tree_marginal.tree_marginals)"
    levels = (DOCUMENT,)
    # its bracket is certified for its own figure, not for log p(x | c): no floor or ceiling on the marginal (reports
    # show none); the records keep it as ``lower``/``upper``
    floor = ceiling = False
    params = TreeParams
    settings_fields = ("segment_bytes",)  # and the search, as beam_settings records it
    doc = ("the sum over the tokenizations with no token across a segment cut, each segment priced after the "
           "canonical tokens before it (not log p(x | c)); a certified bracket for it")

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        return tree_scores(lm, docs, config)

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        return {**super().settings(config), **beam_settings(config)}


__all__ = ["SEGMENT_BYTES", "TREE_LAZY_DEFAULT", "Tree", "TreeParams", "tree_scores"]
