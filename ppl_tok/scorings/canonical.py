"""``canonical``: the tokenizer's own tokenization ``v*`` only, ``log p(v* | c)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import canonical_scores, window_length
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.pairs import Pair, PairScore, canonical_tokens
from ppl_tok.scorings.registry import DOCUMENT, PAIR, QUESTION, Scoring, register


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
    baseline = True

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        return canonical_scores(lm, docs, window_length(lm, config), on_bytes)

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        scores = lm.log_probs_many([canonical_tokens(lm, p) for p in pairs], [p.context for p in pairs])
        return [PairScore(float(s)) for s in scores]
