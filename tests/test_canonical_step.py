"""The per-step canonicality test against encode(decode(v)) == v on every tokenization of short strings."""

from __future__ import annotations

import pytest

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
    steps = CanonicalSteps(vocab)
    n = 0
    for text in STRINGS:
        for v in _all_tokenizations(vocab, text):
            n += 1
            truth = steps.is_canonical(v)
            assert steps.passes(v) == truth, (text, [vocab.token_name(t) for t in v], truth)
            if truth:  # no false negative: every prefix of a canonical sequence passes every step
                key = START
                for t in v:
                    ok, key = steps.step(key, t)
                    assert ok, (text, v)
    return n


def _with_byte_pieces(vocab: Vocabulary) -> Vocabulary:
    """The same vocabulary with byte-fallback pieces allowed anywhere (so the MDD spells characters in bytes)."""
    return Vocabulary(vocab.surfaces, vocab.byte_fallback_ids, vocab.names, vocab.encoder, ByteFallback.ALWAYS,
                      vocab.name, vocab.dummy_prefix)


def test_llama2_sentencepiece(llama2_vocab):
    assert _check(_with_byte_pieces(llama2_vocab)) > 1000


def test_smollm2_byte_level_bpe(smollm2_vocab):
    assert _check(smollm2_vocab) > 100


def test_gemma3_bpe(gemma_vocab):
    assert _check(_with_byte_pieces(gemma_vocab)) > 1000


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
