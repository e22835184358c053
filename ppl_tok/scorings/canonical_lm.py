"""The canonical LM's scorings, ``canonical-local`` and ``canonical-global`` (documents and requests).

The computation and its math are :mod:`ppl_tok.infer.canonical_lm`; this module lays a document's canonical
tokens out in lm-eval's rolling windows exactly as ``canonical`` does (:func:`ppl_tok.scorings.documents.
canonical_scores`), so the two figures are of the same tokens under the same conditioning. Each window's
tokens are scored locally from the step key the document's earlier tokens left (the document is one
canonical sequence). ``canonical-global`` adds ``log Z(c v*) - log Z(BOS)`` (the normaliser after the last
window, by importance sampling, ``num_samples`` walks; ``Z(BOS)`` is shared by every document of a run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.canonical_step import START, steps_for
from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.infer.canonical_lm import global_log_normaliser, local_scores
from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.documents import _require_bos, window_length
from ppl_tok.scorings.pairs import Pair, PairScore, canonical_tokens
from ppl_tok.common.params import Params
from ppl_tok.scorings.registry import (DOCUMENT, PAIR, Scoring, ScoringConfig, register, samples_param,
                                       seed_param)
from ppl_tok.scorings.results import DocumentScore, ScoredText
from ppl_tok.scorings.windows import rolling_windows

#: the walks of the global normaliser stop after this many tokens (the text then counts as canonical for
#: ``HORIZON`` more tokens: docs/perplexity.md)
HORIZON = 16


def canonical_lm_document_scores(lm: LanguageModel, docs: Sequence[Any], config: Any, window: int | None,
                                 record: Callable[..., Any] = DocumentScore,
                                 on_bytes: Callable[[int], None] | None = None, mode: str = "local") -> list[Any]:
    """``canonical-local`` / ``canonical-global`` (``mode``) scores of ``docs`` (``config``: the run's
    :class:`~ppl_tok.scorings.documents.ScoringConfig`, whose params hold ``num_samples`` and ``seed`` under
    ``mode="global"``; ``window``: its positions per forward; ``record``:
    :class:`~ppl_tok.scorings.documents.DocumentScore`, passed in by the dispatcher that owns it; ``on_bytes``:
    progress inside the documents, each window's bytes as it is scored)."""
    steps = steps_for(lm.vocab)
    tokens = [lm.canonical(d.text) for d in docs]
    prefixes, targets, keys, owner = [], [], [], []
    for i, toks in enumerate(tokens):
        for w in rolling_windows(len(toks), window):
            prefixes.append((lm.bos_id,) if w.bos else tuple(toks[w.context: w.start]))
            targets.append(toks[w.start: w.end])
            keys.append(steps.key(toks[: w.start]) if w.start else START)
            owner.append(i)
    start, forwards = time.perf_counter(), lm.stats.forwards
    def done(k: int) -> None:
        on_bytes(sum(len(lm.vocab[t] or b"") for t in targets[k]))

    scored = local_scores(lm, prefixes, targets, steps, keys, None if on_bytes is None else done)
    seconds = time.perf_counter() - start
    local = [0.0] * len(docs)
    plain = [0.0] * len(docs)
    last: dict[int, tuple[int, ...]] = {}
    for i, (est, lp, _), prefix, target in zip(owner, scored, prefixes, targets):
        local[i] += est
        plain[i] += lp
        last[i] = tuple(prefix) + tuple(target)
    spent = lm.stats.forwards - forwards
    total_tokens = max(1, sum(len(t) for t in tokens))
    figures = local
    if mode == "global":
        z0 = global_log_normaliser(lm, (lm.bos_id,), START, steps, config.num_samples, HORIZON, config.seed)
        figures = [plain[i] + global_log_normaliser(lm, last[i], steps.key(tokens[i]), steps, config.num_samples,
                                                    HORIZON, config.seed + 1 + docs[i].index) - z0
                   for i in range(len(docs))]
    out = []
    for i, (d, toks) in enumerate(zip(docs, tokens)):
        share = len(toks) / total_tokens
        out.append(record(d.index, count_bytes(d.text), count_words(d.text), len(toks),
                          sum(1 for o in owner if o == i), log_likelihood=figures[i], canonical=plain[i],
                          forwards=round(spent * share), canonical_forwards=round(spent * share),
                          seconds=seconds * share))
    return out


class _CanonicalLM(Scoring):
    levels = (DOCUMENT, PAIR)
    mode = "local"

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        _require_bos(lm)
        return canonical_lm_document_scores(lm, docs, config, window_length(lm, config), on_bytes=on_bytes,
                                            mode=self.mode)

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        """The continuation a canonical segment of its own (lm-eval tokenizes it apart from the context)."""
        from ppl_tok.infer.canonical_lm import canonical_lm_scores

        sampling = {"num_samples": config.params.num_samples, "seed": config.params.seed} if self.mode == "global" else {}
        scores = canonical_lm_scores(lm, [p.context for p in pairs], [canonical_tokens(lm, p) for p in pairs],
                                     mode=self.mode, budget=0, **sampling)
        return [PairScore(float(r.estimate)) for r in scores]


@register
class CanonicalLocal(_CanonicalLM):
    """The LM over canonical tokenizations, each step renormalised over the tokens that keep it canonical."""

    name = "canonical-local"
    estimator = ("the LM over canonical tokenizations, locally normalised "
                 "(ppl_tok.infer.canonical_lm.canonical_lm_scores, mode 'local')")
    doc = ("log l(v* | c) = log p(v* | c) - sum_t log Z_t: each step renormalised over the tokens that keep the "
           "prefix canonical (exact; never below canonical)")


@dataclass(frozen=True)
class CanonicalGlobalParams(Params):
    """The walks that estimate ``canonical-global``'s normalisers."""

    num_samples: int = samples_param("importance walks per normaliser")
    seed: int = seed_param("the seed of the normalisers' walks")


@register
class CanonicalGlobal(_CanonicalLM):
    """The LM over canonical tokenizations, normalised over canonical strings (its normalisers sampled)."""

    name = "canonical-global"
    estimator = ("the LM over canonical tokenizations, globally normalised "
                 "(ppl_tok.infer.canonical_lm.canonical_lm_scores, mode 'global')")
    doc = ("log p(v* | c) + log Z(c v*) - log Z(c): P(the output starts with v* | the output canonical), the "
           "normalisers Z estimated by importance sampling with the local model as the proposal")
    params = CanonicalGlobalParams
    settings_fields = ("num_samples", "seed")
    mode = "global"


__all__ = ["HORIZON", "CanonicalGlobal", "CanonicalLocal", "canonical_lm_document_scores"]
