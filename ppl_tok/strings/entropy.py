"""The next unit's entropy for reading studies, approximated by the canonical next-token entropy.

Reading-time studies regress on the *entropy* of what comes next as well as on the surprisal of
what came (the reader's uncertainty before the next word). Over strings the exact quantity,
the entropy of the next word ``H(W_{k+1} | x_{<=k})``, sums over every word the LM can write
next and every tokenization of each; ppl-tok does not compute it. What it computes, and names
as what it is, is the standard approximation that minicons-style pipelines use, the **next-token
entropy after the canonical tokens**: with ``v* = (v_1 .. v_m)`` the canonical tokens of the
text ``x`` (after BOS and the context ``c``) and ``j_k`` the number of them that start in units
``0 .. k``,

    H_k = - sum over tokens v of  p(v | c, v_1 .. v_{j_k}) log2 p(v | c, v_1 .. v_{j_k})     (bits),

the entropy of the LM's next token once unit ``k`` has been read canonically (every row of the
vocabulary, EOS and special tokens included). With a leading-space tokenizer that next token is
the start of unit ``k + 1`` (" man"), so ``H_k`` is the entropy of the next word's first token,
neither a lower nor an upper bound on the next word's entropy (the first token of a word leaves
the rest of it open; tokens that continue the current word, or that split the next one, are
counted as outcomes of their own). Where a canonical token runs across the
end of unit ``k`` (a word-internal cut), ``H_k`` is taken after it. The last unit's ``H`` is the
entropy of whatever follows the text (the end of the string included).

**Cost.** One row per unit, read from the LM's prefix cache where the canonical column's forward
left it, else from one batched prefill of the texts' canonical tokens (canonical scoring's
cost: no beam, nothing over strings), and a ``|V|``-long reduction per unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ppl_tok.limits import check_contexts
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.units import WordRules, unit_byte_spans

LN2 = math.log(2.0)


def row_entropy(log_probs: torch.Tensor) -> float:
    """``-sum p log2 p`` of one row of log-probabilities (``p = 0`` terms count 0), in float64."""
    lp = log_probs.double()
    p = lp.exp()
    return float(-(torch.where(p > 0, p * lp, torch.zeros_like(lp))).sum()) / LN2


def next_token_entropies(lm: LanguageModel, texts: Sequence[str], *, units: str | Sequence[Any] = "word",
                         contexts: Sequence[str | Sequence[int]] | None = None,
                         rules: WordRules | None = None) -> list[list[float]]:
    """Per text, per unit ``k``: ``H_k`` of the module docstring (bits).

    ``units`` is one kind for every text (``"word"``, ``"char"``, ``"byte"``) or one region list per text,
    as :func:`~ppl_tok.strings.surprisal.surprisals_many` takes them.

    :raises ValueError: a text the tokenizer cannot spell with canonical tokens, or mismatched lengths.
    """
    texts = list(texts)
    contexts = [""] * len(texts) if contexts is None else check_contexts("contexts", contexts)
    per_item = [units] * len(texts) if isinstance(units, str) else list(units)
    if not len(contexts) == len(per_item) == len(texts):
        raise ValueError(f"{len(texts)} texts, {len(contexts)} contexts and {len(per_item)} unit specifications: "
                         "give one of each per text")
    rules = rules or WordRules()
    plans, keys = [], []
    for text, u, c in zip(texts, per_item, contexts):
        spans, _ = unit_byte_spans(text, u, rules)
        ids = lm.canonical(text)
        prefix = lm.prefix_ids(c)
        starts, at = [], 0
        for t in ids:
            starts.append(at)
            at += len(lm.vocab[t] or b"")
        if at != len(text.encode("utf-8")):
            raise ValueError(f"the canonical tokens of {text!r} do not spell it under {lm.vocab.name}")
        # j_k: the canonical tokens starting before the end of unit k
        counts = [sum(1 for s in starts if s < b) for _, b in spans]
        plans.append(counts)
        keys.append([prefix + tuple(ids[:j]) for j in counts])
    flat = [k for ks in keys for k in ks]
    rows = lm.states(flat) if flat else []
    out, at = [], 0
    for ks in keys:
        out.append([row_entropy(s.log_probs) for s in rows[at: at + len(ks)]])
        at += len(ks)
    return out


__all__ = ["next_token_entropies", "row_entropy"]
