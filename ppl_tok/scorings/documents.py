"""The log-likelihood of a document under each scoring, with its certified floor where there is one.

The document-level scorings of :mod:`ppl_tok.scorings` (the registered scorings;
``marginal``, the old name of ``beam``, is still accepted):

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
  window's, the windows before it score their text (:func:`event_scores`).
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

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.common.logspace import logsumexp
from ppl_tok.scorings.registry import DOCUMENT, ScoringConfig, scoring as find_scoring
from ppl_tok.scorings.results import DocumentScore, ScoredText, checked_scores
from ppl_tok.strings.marginal import differing_spans
from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.scorings.windows import log_probs_after_in_pieces, rolling_windows, sweep_in_groups, text_windows


#: The layout of a beam record's ``span_gain`` (:func:`marginal_scores`); records before it have none.
SPAN_GAIN_VERSION = 1
#: spans holding less than this share of their window's off-canonical mass are summed into ``rest``
SPAN_SHARE_KEPT = 1e-3
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


def canonical_scores(lm: LanguageModel, docs: Sequence[ScoredText], window: int | None,
                     on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
    """The canonical log-likelihoods of ``docs`` in lm-eval's rolling windows, all windows of all documents batched
    (``on_bytes``: progress inside them, the bytes of the tokens scored as each forward ends)."""
    _require_bos(lm)
    tokens = [lm.canonical(d.text) for d in docs]
    prefixes, targets, owner = [], [], []
    for i, toks in enumerate(tokens):
        for w in rolling_windows(len(toks), window):
            prefixes.append((lm.bos_id,) if w.bos else tuple(toks[w.context: w.start]))
            targets.append(toks[w.start: w.end])
            owner.append(i)
    start = time.perf_counter()
    lps = _log_probs_after(lm, prefixes, targets, on_bytes)
    seconds = time.perf_counter() - start
    total_tokens = max(1, sum(len(t) for t in tokens))
    totals = [0.0] * len(docs)
    counts = [0] * len(docs)
    positions = [0] * len(docs)
    for i, lp, prefix, target in zip(owner, lps, prefixes, targets):
        totals[i] += lp
        counts[i] += 1
        positions[i] += len(prefix) + len(target) - 1
    out = []
    for d, toks, total, n_windows, n_pos in zip(docs, tokens, totals, counts, positions):
        out.append(DocumentScore(d.index, count_bytes(d.text), count_words(d.text), len(toks), n_windows,
                                 log_likelihood=total, canonical=total, forwards=n_pos, canonical_forwards=n_pos,
                                 seconds=seconds * len(toks) / total_tokens))
    return out


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


def marginal_scores(lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                    on_bytes: Callable[[int], None] | None = None, partial: Any = None) -> list[DocumentScore]:
    """The byte-synchronous beam's certified bracket of each document's marginal, window by window.

    The windows of ``docs`` are swept in lockstep, ``lm_bytes`` of text at a time (:func:`sweep_in_groups`;
    :func:`ppl_tok.strings.string_marginals`: one batched forward per step for a group; each window's
    figures are those of its sweep alone). A document's
    ``seconds`` is the batch's wall time shared in proportion to bytes.

    A one-window document's canonical figure is the beam's own (its canonical path,
    computed with the same forwards as the mass found, so that the gain is not
    float32 rounding); windowed documents use the canonical slices (:func:`_windowed`).

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


def canonical_plus_rest_score(lm: LanguageModel, doc: ScoredText, config: ScoringConfig,
                              on_bytes: Callable[[int], None] | None = None) -> DocumentScore:
    """``log(p(v*) + m)`` per window (``m``: importance estimate of the non-canonical mass), summed.

    The record's ``is_estimate`` is the plain importance estimate of the same
    particles, ``log mean(p(v_i) / q(v_i))`` summed over windows
    (:attr:`ppl_tok.infer.importance.MarginalResult.log_marginal`): what importance
    sampling alone reports, the canonical term included in the sample average;
    ``is_certified_lower`` the sum over windows of what those particles certify
    (the distinct tokenizations they drew, and the canonical one).

    ``on_bytes``: progress inside the document, each window's new bytes once its particles are done (the
    windows' runs of :func:`~ppl_tok.infer.importance.marginals`, unchanged; they sum to the document's bytes).
    """
    from ppl_tok.infer.importance import canonical_plus_rest, marginals
    from ppl_tok.common.seeds import pair_seed
    from ppl_tok.proposals import settings_guide

    _require_bos(lm)
    start = time.perf_counter()
    toks, pieces, canon, canon_forwards = _windowed(lm, doc, window_length(lm, config))
    lm.clear_cache()  # the particles' forwards, counted from an empty cache, do not depend on earlier documents
    before = lm.stats.forwards
    seeds = [pair_seed(config.seed, "perplexity", str(doc.index), k) for k in range(len(pieces))]
    def done(k: int) -> None:
        on_bytes(count_bytes(pieces[k].text))

    results = marginals([p.text for p in pieces], lm, config.num_samples, contexts=[p.context for p in pieces],
                        seeds=seeds, guide=settings_guide(config.proposal or {}),
                        on_done=None if on_bytes is None else done)
    total, floor = 0.0, 0.0
    plain = math.fsum(r.log_marginal for r in results)  # the standard importance estimate, as the paper reports it
    certified = math.fsum(r.certified_lower for r in results)
    for p, c, r in zip(pieces, canon, results):
        # the importance run's canonical is the canonical tokenization of the window's text; the floor
        # is the better of it and the canonical slice (both are tokenizations of the window)
        total += float(canonical_plus_rest(r.canonical_log_prob, r.noncanonical_estimate))
        floor += max(c, r.canonical_log_prob)
    return DocumentScore(doc.index, count_bytes(doc.text), count_words(doc.text), len(toks), len(pieces),
                         log_likelihood=total, canonical=math.fsum(canon), lower=floor,
                         forwards=lm.stats.forwards - before, canonical_forwards=canon_forwards,
                         seconds=time.perf_counter() - start,
                         extra={"is_estimate": plain, "is_certified_lower": certified})


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
    :func:`marginal_scores`, for the sweeps and the last windows' walks.
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
    implementation = find_scoring(config.scoring, DOCUMENT)
    extra = {"partial": partial} if implementation.checkpoints else {}
    scores = implementation.score_documents(lm, docs, config, on_bytes=on_bytes, **extra)
    return checked_scores(implementation.name, scores, len(docs), DocumentScore, "documents")
