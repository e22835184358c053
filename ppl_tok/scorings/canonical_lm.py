"""The canonical LM's scorings, ``canonical-local`` and ``canonical-global``, at the document level.

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
from typing import Any

from ppl_tok.canonical_step import START, steps_for
from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.infer.canonical_lm import global_log_normaliser, local_scores
from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.windows import rolling_windows

#: the walks of the global normaliser stop after this many tokens (the text then counts as canonical for
#: ``HORIZON`` more tokens: docs/perplexity.md)
HORIZON = 16


def canonical_lm_document_scores(lm: LanguageModel, docs: Sequence[Any], config: Any, window: int | None,
                                 record: Callable[..., Any]) -> list[Any]:
    """``canonical-local`` / ``canonical-global`` scores of ``docs`` (``config``: the run's
    :class:`~ppl_tok.scorings.documents.ScoringConfig`; ``window``: its positions per forward; ``record``:
    :class:`~ppl_tok.scorings.documents.DocumentScore`, passed in by the dispatcher that owns it)."""
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
    scored = local_scores(lm, prefixes, targets, steps, keys)
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
    if config.scoring == "canonical-global":
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


__all__ = ["HORIZON", "canonical_lm_document_scores"]
