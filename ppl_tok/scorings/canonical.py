"""``canonical``: the tokenizer's own tokenization ``v*`` only, ``log p(v* | c)``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import _log_probs_after, _require_bos, window_length
from ppl_tok.scorings.windows import rolling_windows
from ppl_tok.scorings.classify import SplitScores, canonical_scores as classify_canonical
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.pairs import Pair, PairScore, canonical_tokens
from ppl_tok.scorings.registry import DOCUMENT, PAIR, QUESTION, Scoring, register


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


@register
class Canonical(Scoring):
    """Documents: lm-eval's rolling windows over the canonical tokens (what its ``hf`` model computes);
    requests: the continuation's canonical tokens after the context's string."""

    name = "canonical"
    estimator = "the tokenizer's own tokenization v* (ppl_tok.lm.base.LanguageModel)"
    levels = (DOCUMENT, PAIR, QUESTION)
    doc = "log p(v* | c), the canonical tokens only (documents: lm-eval's rolling windows)"
    classifiers = ("canonical",)
    record_kind = "is"
    baseline = deterministic = True

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        return canonical_scores(lm, docs, window_length(lm, config), on_bytes)

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        scores = lm.log_probs_many([canonical_tokens(lm, p) for p in pairs], [p.context for p in pairs])
        return [PairScore(float(s)) for s in scores]

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """``s_j = log p(v*_j | c)``, the core record's canonical score."""
        return classify_canonical(t, norm)

    def question_columns(self, t: SplitScores) -> dict[str, np.ndarray]:
        return {"canonical_log_probs": t.canonical}
