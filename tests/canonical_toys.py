"""A toy BPE tokenizer and a toy LM of finite support, for the canonical-LM tests (not a test module)."""

from __future__ import annotations

import itertools
import random

import torch

from ppl_tok.lm.toy import FunctionLM
from ppl_tok.vocabulary import Vocabulary

#: rank order: the first merge applies first
MERGES = [("a", "b"), ("b", "a"), ("ab", "a"), ("b", "b"), ("a", "a")]
TOKENS = [None, "a", "b"] + ["".join(m) for m in MERGES]
MAX_TOKENS = 4  # the toy LM ends every text after at most this many tokens


def bpe_encode(text: str) -> list[int]:
    """Rank-based BPE: merge the adjacent pair of lowest rank, leftmost first, until none applies."""
    rank = {m: r for r, m in enumerate(MERGES)}
    pieces = list(text)
    while True:
        found = [(rank[(x, y)], i) for i, (x, y) in enumerate(zip(pieces, pieces[1:])) if (x, y) in rank]
        if not found:
            break
        _, i = min(found)
        pieces[i: i + 2] = [pieces[i] + pieces[i + 1]]
    return [TOKENS.index(p) for p in pieces]


def bpe_vocab() -> Vocabulary:
    base = Vocabulary.from_tokens(TOKENS, name="toy-bpe")
    return Vocabulary(base.surfaces, base.byte_fallback_ids, base.names, bpe_encode, base.fallback, "toy-bpe")


def toy_lm(vocab: Vocabulary, seed: int = 3) -> FunctionLM:
    """Next-token probabilities a seeded function of the prefix; the end (id 0) is certain after
    :data:`MAX_TOKENS` text tokens, so the support is finite."""
    def fn(prefix: tuple[int, ...]) -> list[float]:
        rng = random.Random(hash((seed,) + prefix))
        n_text = len(prefix) - 1
        weights = [rng.uniform(0.05, 1.0) for _ in range(len(vocab))]
        if n_text >= MAX_TOKENS:
            return [1.0] + [0.0] * (len(vocab) - 1)
        return weights
    return FunctionLM(vocab, fn, bos_id=0, name="toy-canonical")


def canonical_set(max_chars: int = 15) -> set[tuple[int, ...]]:
    """Every canonical sequence of every string over {a, b} of at most ``max_chars`` characters."""
    out = set()
    for n in range(1, max_chars + 1):
        for chars in itertools.product("ab", repeat=n):
            out.add(tuple(bpe_encode("".join(chars))))
    return out


def all_texts(vocab: Vocabulary, max_tokens: int = MAX_TOKENS):
    """Every token sequence of at most ``max_tokens`` text tokens."""
    text_ids = [i for i, s in enumerate(vocab.surfaces) if s is not None]
    for n in range(max_tokens + 1):
        yield from itertools.product(text_ids, repeat=n)


def seq_log_prob(lm: FunctionLM, tokens: tuple[int, ...], end: bool) -> float:
    prefix = (0,)
    total = 0.0
    for t in tokens + ((0,) if end else ()):
        total += float(lm._dist(prefix)[t])
        prefix += (t,)
    return total


__all__ = ["MERGES", "TOKENS", "bpe_encode", "bpe_vocab", "toy_lm", "canonical_set", "all_texts",
           "seq_log_prob", "torch"]
