"""What the document-level scorings share (the window, BOS, the canonical slices of string windows, the beam's
recorded settings) and :func:`score_documents`, which calls the registered scoring. Each scoring's body is in its
own module: ``canonical`` (:func:`ppl_tok.scorings.canonical.canonical_scores`), ``beam``
(:func:`ppl_tok.scorings.beam.marginal_scores`), ``prefix`` and ``with-end``
(:func:`ppl_tok.scorings.events.event_scores`), ``canonical+rest``
(:func:`ppl_tok.scorings.canonical_rest.canonical_plus_rest_score`).

What they compute (``marginal``, the old name of ``beam``, is still accepted):

* ``canonical``: ``log p(t_1 .. t_n | BOS)`` of the document's canonical tokens,
  in lm-eval's rolling windows (:func:`~ppl_tok.scorings.windows.rolling_windows`);
  exactly what lm-eval's ``loglikelihood_rolling`` computes.
* ``beam``: ``log p(x | BOS)`` summed over every tokenization of the text
  ``x``, by the byte-synchronous beam of :func:`ppl_tok.strings.string_marginal`
  (one search engine for ppl-tok). It returns a certified bracket
  ``lower <= log p(x) <= upper``; the figure reported is its estimate (the mass
  found, = ``lower``), and the bits per byte computed from ``lower`` is a
  certified *ceiling* on the marginal's bits per byte (``upper`` gives a floor).
* ``prefix`` and ``with-end``: ``log P(x | BOS)``, the probability that the output
  starts with ``x``, and ``log P(x, end | BOS)``, that it is exactly ``x`` (the
  LM over strings, :mod:`ppl_tok.strings.events`), each a certified bracket
  from the beam like ``beam``'s; in rolling windows the event is the last
  window's, the windows before it score their text (:func:`ppl_tok.scorings.events.event_scores`).
* ``canonical+rest``: ``log(p(v*) + m)``, the canonical probability exact plus
  the unbiased importance-sampling estimate ``m`` of the non-canonical mass
  (:func:`ppl_tok.infer.importance.marginals`, ``num_samples`` look-ahead particles,
  seeded per document and window); its certified floor is the canonical term.

Long documents run in string windows for the two marginal scorings
(:func:`~ppl_tok.scorings.windows.text_windows`): the document's figures are
sums over windows, floors and ceilings included (sums of bounds are bounds).
``forwards`` counts the token positions each document's scoring runs through
the LM, cache hits included (so that a document's record does not depend on
what was scored before it): for canonical scoring, the positions of its
windows; for ``beam``, the beam's count (:class:`ppl_tok.strings.StringMarginal`);
for ``canonical+rest``, the particles' (``lm.stats``, from an empty cache).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import DOCUMENT, LAZY_FIELDS, ScoringConfig, scoring as find_scoring
from ppl_tok.scorings.results import DocumentScore, ScoredText, checked_scores
from ppl_tok.scorings.windows import log_probs_after_in_pieces, text_windows


#: The next-token rows (4 V bytes a token) one canonical call computes at most (:func:`_log_probs_after`).
CALL_ROW_BYTES = 256 << 20
#: The prefix cache of a ``beam`` run (:func:`cap_prefix_cache`).
MARGINAL_CACHE_BYTES = 256 << 20


def beam_settings(config: ScoringConfig) -> dict[str, Any]:
    """The byte-synchronous beam's settings a run of ``beam``, ``prefix`` or ``with-end`` records: ``exhaustive``
    (every kept prefix run: no lazy extension; filled in for older folders by
    :meth:`ppl_tok.perplexity.store.PerplexityStore.complete`) and the lazy shares where it is not."""
    out: dict[str, Any] = {"beam": config.search.beam, "prune": config.search.prune,
                           "budget": config.search.budget, "prune_against": config.search.prune_against,
                           "exhaustive": not config.search.lazy}
    if config.search.lazy:  # recorded when set: runs from before lazy extension resume
        out.update(config.search.lazy_settings())
    return out


def legacy_exhaustive(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``exhaustive`` of a folder of ``beam``, ``prefix`` or ``with-end`` written before :func:`beam_settings`
    recorded it (its ``beam`` width recorded): every kept prefix run unless a lazy share was set
    (:meth:`ppl_tok.scorings.Scoring.legacy_settings`)."""
    if "beam" not in settings:
        return {}
    return {"exhaustive": not any(settings.get(k) for k in LAZY_FIELDS)}


def cap_prefix_cache(lm: LanguageModel, limit: int = MARGINAL_CACHE_BYTES) -> None:
    """Cap ``lm``'s prefix cache at ``limit`` bytes of KV entries, for a ``beam`` run.

    The beam holds the states of its own hypotheses and runs each token prefix
    once, so cached prefixes are never looked up again. The engine's CPU default
    (2 GiB of KV entries; 46 kB per SmolLM2 position) fills over a long run and
    lifts peak memory past 3 GB; the figures do not depend on the cache.
    """
    from dataclasses import replace

    lm.config = replace(lm.config, cache_bytes=min(lm.config.cache_bytes, limit))


def _require_bos(lm: LanguageModel) -> None:
    if lm.bos_id is None:
        raise ValueError(f"{lm.name} has no BOS token: perplexity conditions the first token on BOS; "
                         "give one with --bos-id")


def window_length(lm: LanguageModel, config: ScoringConfig) -> int | None:
    """The window: ``config.window``, else the model's context length (``None``: unbounded)."""
    from ppl_tok.scorings.windows import model_window

    return config.window if config.window is not None else model_window(lm)


def _log_probs_after(lm: LanguageModel, prefixes: list[tuple[int, ...]], targets: list,
                     on_bytes: Callable[[int], None] | None = None) -> list[float]:
    """:func:`~ppl_tok.scorings.windows.log_probs_after_in_pieces` at :data:`CALL_ROW_BYTES` of rows a call;
    ``on_bytes``: the bytes of each piece's target tokens once it is scored (they sum to the targets' bytes)."""
    def scored(_: int, tokens: tuple[int, ...]) -> None:
        on_bytes(sum(len(lm.vocab[t] or b"") for t in tokens))

    return log_probs_after_in_pieces(lm, prefixes, targets, CALL_ROW_BYTES, None if on_bytes is None else scored)


def _windowed(lm: LanguageModel, doc: ScoredText, window: int | None):
    toks = lm.canonical(doc.text)
    pieces = text_windows(lm.vocab, toks, window)
    # the canonical slice of each window, under the window's own conditioning (BOS + preceding tokens)
    prefixes = [(lm.bos_id,) + p.context for p in pieces]
    canon = _log_probs_after(lm, prefixes, [p.tokens for p in pieces])
    positions = sum(len(a) + len(p.tokens) - 1 for a, p in zip(prefixes, pieces))
    return toks, pieces, canon, positions


def _window_plans(lm: LanguageModel, docs: Sequence[ScoredText], window: int | None) -> list[tuple[Any, ...]]:
    """Per document: ``(doc, canonical tokens, string windows, canonical slices or None, canonical forwards)``.

    A one-window document's canonical figure is the search's own (``None`` here: BOS and the canonical
    tokens but the last are run by the search); a windowed one's are the slices (:func:`_windowed`).
    """
    plans = []
    for doc in docs:
        toks = lm.canonical(doc.text)
        pieces = text_windows(lm.vocab, toks, window)
        canon, canon_forwards = None, len(toks)
        if len(pieces) > 1:
            toks, pieces, canon, canon_forwards = _windowed(lm, doc, window)
        plans.append((doc, toks, pieces, canon, canon_forwards))
    return plans


def score_documents(lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                    on_bytes: Callable[[int], None] | None = None, partial: Any = None) -> list[DocumentScore]:
    """The scores of ``docs`` under ``config.scoring``: the registered scoring's
    :meth:`~ppl_tok.scorings.Scoring.score_documents` (canonical, beam, prefix and with-end batch the documents;
    canonical+rest runs one at a time).

    ``on_bytes``: progress inside the documents where a scoring reports it (``beam``, ``prefix``, ``with-end``:
    the bytes their sweeps and walks go past; the canonical scorings: each forward's tokens; ``canonical+rest``:
    each window's bytes as its particles finish); the caller counts the rest when the batch is done. ``partial``:
    the checkpoints of those three (:class:`ppl_tok.perplexity.partial.Partial`).

    :raises ValueError: ``config.scoring`` is not a document-level scoring (:mod:`ppl_tok.scorings`).
    """
    implementation = config.implementation
    if DOCUMENT not in implementation.levels:
        find_scoring(config.scoring, DOCUMENT)  # the error naming the document-level scorings
    extra = {"partial": partial} if implementation.checkpoints else {}
    scores = implementation.score_documents(lm, docs, config, on_bytes=on_bytes, **extra)
    return checked_scores(implementation.name, scores, len(docs), DocumentScore, "documents")
