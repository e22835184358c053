"""The per-step canonicality test against encode(decode(v)) == v on every tokenization of short strings."""

from __future__ import annotations

import random

import pytest
import torch

from ppl_tok.canonical_step import START, CanonicalSteps
from ppl_tok.mdd import compile_mdd
from ppl_tok.vocabulary import ByteFallback, Vocabulary

#: whitespace runs, contractions, digits, punctuation, characters of 2 and 3 UTF-8 bytes, newlines
STRINGS = [" the cat", "  a b", "it's 12", " 1234", "x  \n y", "a.'s ", "café!", " €5,00", "'re'", "\n\n\n",
           "ab  ", " ...,", "Paris is", " über", "naïve", "A1b2", "\t\tx", "ok!!", " don't", "1,000",
           "\n\nx", "\n\n\nx", " \n\n", "a \t b"]


def _all_tokenizations(vocab: Vocabulary, text: str):
    return compile_mdd(text, vocab).enumerate(limit=20_000)


def _check(vocab: Vocabulary) -> int:
    """Every tokenization of the strings: the step test against encode(decode(v)) == v, and the fast step mask
    (the merges, where the key allows it) against the step test at every step of every tokenization."""
    steps = CanonicalSteps(vocab)
    n = 0
    for text in STRINGS:
        for v in _all_tokenizations(vocab, text):
            n += 1
            truth = steps.is_canonical(v)
            assert steps.passes(v) == truth, (text, [vocab.token_name(t) for t in v], truth)
            key = START
            for t in v:
                ok, after = steps.step(key, t)
                if not key[1] and not key[2] and len(key[0]) <= 1:  # a key the fast mask serves
                    assert bool(steps.banned(key)[t]) == (not ok), (text, key, vocab.token_name(t))
                if not ok:
                    break
                key = after
            if truth:  # no false negative: every prefix of a canonical sequence passes every step
                key = START
                for t in v:
                    ok, key = steps.step(key, t)
                    assert ok, (text, v)
    return n


def _with_byte_pieces(vocab: Vocabulary) -> Vocabulary:
    """The same vocabulary with byte-fallback pieces allowed anywhere (so the MDD spells characters in bytes)."""
    return Vocabulary(vocab.surfaces, vocab.byte_fallback_ids, vocab.names, vocab.encoder, ByteFallback.ALWAYS,
                      vocab.name, vocab.dummy_prefix, vocab.tokenizer_json)


@pytest.mark.slow  # every tokenization of STRINGS with byte pieces anywhere: about 33 CPU-s
def test_llama2_sentencepiece(llama2_vocab):
    assert _check(_with_byte_pieces(llama2_vocab)) > 1000


def test_smollm2_byte_level_bpe(smollm2_vocab):
    assert _check(smollm2_vocab) > 100


@pytest.mark.slow  # every tokenization of STRINGS with byte pieces anywhere: about 57 CPU-s
def test_gemma3_bpe(gemma_vocab):
    assert _check(_with_byte_pieces(gemma_vocab)) > 1000


def _previous_tokens(vocab: Vocabulary, words: list[str]) -> list[int]:
    return [vocab.encode(w)[0] for w in words]


@pytest.mark.slow  # the slow mask's whole rows of 49,152 ids for five keys: about 26 CPU-s
def test_the_fast_mask_equals_the_slow_one_on_smollm2(smollm2_vocab):
    """The merge-based mask (ppl_tok.canonical_step.pairs) against the step test of every id, whole rows: a word,
    a lone space (which merges with what follows), a whitespace run (GPT-2's regex splits it), an apostrophe
    (contractions), and the start."""
    fast, slow = CanonicalSteps(smollm2_vocab), CanonicalSteps(smollm2_vocab, fast=False)
    keys = [START] + [((a,), (), False) for a in _previous_tokens(smollm2_vocab, [" the", " ", "  ", "'"])]
    for key in keys:
        assert fast._fast_mask(key) is not None, key  # the fast path serves these keys
        assert torch.equal(fast.banned(key), slow.banned(key)), key


@pytest.mark.slow  # 24,000 step tests on Gemma 3: about 45 CPU-s
def test_the_fast_mask_equals_the_step_test_on_gemma3(gemma_vocab):
    """Gemma 3 (262,144 ids; a whole slow row costs minutes): the fast mask against the step test on every id it
    bans, and on 3,000 ids drawn at random, after a word, a space, a newline and a letter."""
    steps = CanonicalSteps(gemma_vocab)
    rng = random.Random(0)
    for a in _previous_tokens(gemma_vocab, [" the", " ", "\n", "a"]):
        key = ((a,), (), False)
        mask = steps.banned(key)
        assert steps._fast_mask(key) is not None
        ids = rng.sample(range(len(gemma_vocab)), 3000) + torch.nonzero(~mask).flatten().tolist()[:3000]
        for t in ids:
            assert bool(mask[t]) == (not steps.step(key, t)[0]), (gemma_vocab.token_name(a), gemma_vocab.token_name(t))


def test_llama2_has_no_fast_mask_and_keeps_the_exact_test(llama2_vocab):
    from ppl_tok.canonical_step.pairs import pair_masks_for

    assert pair_masks_for(llama2_vocab) is None  # a SentencePiece file: the step test of every id, cached


def test_the_canonical_tokenization_passes_and_a_split_does_not(smollm2_vocab):
    steps = CanonicalSteps(smollm2_vocab)
    v = smollm2_vocab.encode(" the cat")
    assert steps.passes(v)
    split = smollm2_vocab.ids_of(" t") + smollm2_vocab.ids_of("he") + v[1:]
    assert not steps.passes(split)
    assert steps.banned(steps.key(split[:1]))[split[1]]


def test_a_whitespace_run_before_a_word_is_pending_until_the_word(smollm2_vocab):
    """GPT-2's regex gives the last newline of a run to what follows: ['\\n', '\\n', 'x'] is canonical, while
    ['\\n', '\\n'] alone is not (a prefix of a canonical sequence that is not canonical itself)."""
    steps = CanonicalSteps(smollm2_vocab)
    nl, x = smollm2_vocab.ids_of("\n")[0], smollm2_vocab.ids_of("x")[0]
    assert smollm2_vocab.encode("\n\nx") == [nl, nl, x]
    ok, key = steps.step(steps.key([nl]), nl)
    assert ok and not steps.ends_text(key)
    assert steps.passes([nl, nl, x]) and not steps.passes([nl, nl])
    assert not steps.passes([nl, nl, nl, x])


def test_a_token_that_can_never_be_text_fails(llama2_vocab):
    steps = CanonicalSteps(llama2_vocab)
    continuation = llama2_vocab.ids_of(b"\x82")[0]  # a UTF-8 continuation byte cannot start a character
    assert not steps.allows([], continuation)
    lead = llama2_vocab.ids_of(b"\xe2")[0]
    assert steps.allows([], lead)  # it may still become a character
    assert not steps.ends_text(steps.key([lead]))


@pytest.mark.parametrize("size", [None, 5])
def test_the_mask_matches_the_step_test_and_pads(size):
    vocab = Vocabulary.from_tokens([None, "a", "b", "ab"])
    steps = CanonicalSteps(vocab)
    mask = steps.banned(START, size)
    assert mask.tolist()[:4] == [True, False, False, False]  # greedy longest match: 'a', 'b', 'ab' all canonical
    if size:
        assert mask.tolist()[4] is True
    with pytest.raises(ValueError, match="narrower"):
        steps.banned(START, 2)


def _random_bpe(seed: int) -> tuple[Vocabulary, dict]:
    """A toy BPE ``tokenizer.json`` (no pre-tokenizer) of random merges over ``abc``, each merge made of earlier
    tokens (as BPE training makes them), some of them a second merge of a piece already made (so some pieces
    are never their own BPE)."""
    import json

    rng = random.Random(seed)
    pieces, merges = list("abc"), []
    while len(merges) < 60:
        x, y = rng.choice(pieces), rng.choice(pieces)
        if len(x + y) > 7 or [x, y] in merges:
            continue
        merges.append([x, y])
        if x + y not in pieces:
            pieces.append(x + y)
    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {p: i for i, p in enumerate(pieces)}, "merges": merges}}
    source = json.dumps(data)
    vocab = Vocabulary.from_tokens(pieces, name=f"random-bpe-{seed}")
    return Vocabulary(vocab.surfaces, vocab.byte_fallback_ids, vocab.names, vocab.encoder, vocab.fallback,
                      vocab.name, False, lambda: source), data


@pytest.mark.parametrize("seed", range(20))
def test_the_trees_from_the_parts_up_equal_bpe_run_on_every_piece(seed):
    """The spines built from the parts up (pairs.PairMasks._trees) against BPE run on every piece (the 379ac78 build,
    benchmarks/canonical_step.py), entry for entry, and ``bpe_ok`` against the tokenizers library's own encoder."""
    from tokenizers import Tokenizer

    from benchmarks.canonical_step import PairMasks379ac78
    from ppl_tok.canonical_step.pairs import PairMasks, pair_masks_for

    vocab, data = _random_bpe(seed)
    now, old = pair_masks_for(vocab), PairMasks379ac78(vocab, data, "none")
    assert isinstance(now, PairMasks)
    assert torch.equal(now._spines[0], old._spines[0]) and now._spines[1] == old._spines[1]
    assert torch.equal(now._spines[2], old._spines[2]) and torch.equal(now._spines[3], old._spines[3])
    tokenizer = Tokenizer.from_str(vocab.tokenizer_json())
    own = [tokenizer.encode(p, add_special_tokens=False).ids == [i] for i, p in enumerate(vocab.names)]
    assert now._spines[0].tolist() == own
    assert 0 < sum(own) < len(own)  # some pieces are not their own BPE
    for a in range(len(vocab)):
        got, want = now.after(a), old.after(a)
        assert (got is None) == (want is None), vocab.names[a]
        assert got is None or all(torch.equal(x, y) for x, y in zip(got, want)), vocab.names[a]
