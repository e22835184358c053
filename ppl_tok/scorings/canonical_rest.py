"""``canonical+rest``: ``log(p(v* | c) + m)``, the canonical term exact, ``m`` the importance estimate of the rest.

One formula (:func:`ppl_tok.infer.importance.canonical_plus_rest`) for documents (per window, summed:
:func:`canonical_plus_rest_score`), requests and the QA study's classifier
(:func:`ppl_tok.scorings.classify.canonical_plus_rest_scores`). Its certified floor is the canonical term.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppl_tok.infer.importance import canonical_plus_rest
from ppl_tok.lm.base import LanguageModel
import math
import time

from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.scorings.documents import _require_bos, _windowed, window_length
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.importance import particles
from ppl_tok.scorings.classify import SplitScores, canonical_plus_rest_scores
from ppl_tok.scorings.pairs import Pair, PairScore
from ppl_tok.proposals.registry import DEFAULT_PROPOSAL
from ppl_tok.common.params import Params
from ppl_tok.scorings.registry import (DOCUMENT, PAIR, QUESTION, Scoring, proposal_param, register, samples_param,
                                       seed_param)

#: the key of a document record's ``extra`` holding the plain importance estimate (:attr:`Scoring.estimate_field`)
IS_ESTIMATE = "is_estimate"


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
                         extra={IS_ESTIMATE: plain, "is_certified_lower": certified})


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
    estimate_field = IS_ESTIMATE
    doc = ("log(p(v* | c) + m), m the unbiased importance estimate of the non-canonical mass; the canonical term "
           "is its certified floor")
    classifiers = ("canonical+rest",)
    params = CanonicalPlusRestParams
    settings_fields = ("num_samples", "seed")  # the proposal: where it is not the look-ahead (settings)
    record_kind = "is"

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        out = super().settings(config)
        if config.proposal is not None and config.proposal.get("proposal") != DEFAULT_PROPOSAL:
            out.update(config.proposal)  # recorded when not the look-ahead: runs from before it resume
        return out

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        return [canonical_plus_rest_score(lm, d, config, on_bytes) for d in docs]

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        return [PairScore(float(canonical_plus_rest(r.canonical_log_prob, r.noncanonical_estimate)),
                          lower=float(r.canonical_log_prob))
                for r in particles(lm, pairs, config)]

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """``s_j = log (p(v*_j | c) + m_j)`` from the core record (all N particles)."""
        return canonical_plus_rest_scores(t, norm)
