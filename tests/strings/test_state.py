"""Prefix probabilities, next-byte distributions and conditionals over strings, against brute force."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import FunctionLM, Vocabulary, compile_mdd
from ppl_tok.common.logspace import logsumexp
from ppl_tok.mdd import NoTokenizationError
from ppl_tok.strings import (ContextLengthError, DeadEndError, EndUnavailableError, StringSearchConfig, StringState,
                             initial, string_conditional, string_marginal)

PIECES = [None, "a", "b", "ab", "ba", "aba", "bb", "abb", "bab"]
VOCAB = Vocabulary.from_tokens(PIECES)
WIDE = StringSearchConfig(beam=10_000, prune=math.inf)


def history_lm(seed: int, vocab: Vocabulary = VOCAB, bos_id: int | None = 0) -> FunctionLM:
    """A non-Markov toy LM; token 0 (no surface) is BOS and ends the string."""
    return FunctionLM(vocab, lambda p: [float((7 * len(p) + 3 * sum(p) + t * seed) % 5) - 2.0
                                        for t in range(len(vocab))], bos_id=bos_id, log=True)


def tokenizations(x: bytes, vocab: Vocabulary) -> list[tuple[int, ...]]:
    """Every tokenization of ``x`` (none when no token sequence spells it, e.g. half a UTF-8 character)."""
    if not x:
        return [()]
    try:
        return list(compile_mdd(x, vocab).enumerate())
    except NoTokenizationError:
        return []


def brute_prefix(lm, x: bytes, context=()) -> float:
    """log P(x is a prefix of the output): every token path to a boundary i < |x| times its covering tokens."""
    if not x:
        return 0.0
    terms = []
    for i in range(len(x)):
        cover = [t for t, s in enumerate(lm.vocab.surfaces) if s is not None and s.startswith(x[i:])]
        for v in tokenizations(x[:i], lm.vocab):
            row, head = lm.state(lm.prefix_ids(context) + v).log_probs.tolist(), lm.log_prob(v, context)
            terms += [head + row[t] for t in cover]
    return logsumexp(terms)


def brute_exact(lm, x: bytes) -> float:
    """log P(the output is exactly x): every tokenization of x followed by a token without a surface."""
    special = sorted(lm.vocab.special_ids)
    return logsumexp(lm.log_prob(v) + float(torch.logsumexp(lm.state(lm.prefix_ids() + v).log_probs[special], 0))
                     for v in tokenizations(x, lm.vocab))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.binary(min_size=0, max_size=6).map(lambda b: bytes(98 if c % 2 else 97 for c in b)),
       st.sampled_from([(), (1,), (3, 4)]))
def test_prefix_probabilities_equal_brute_force(seed, x, context):
    lm = history_lm(seed)
    state = StringState(lm, context, WIDE).extend(x)
    exact = brute_prefix(lm, x, context)
    got = state.prefix_log_prob()
    assert got.lower == pytest.approx(exact, abs=1e-9) and got.upper == pytest.approx(exact, abs=1e-9)
    nb = state.next_byte_log_probs()
    # every next token writes a byte or ends the string: sum_b P(xb) + P(x, end) = P(x)
    assert float(torch.logsumexp(nb.unnormalised, 0)) == pytest.approx(exact, abs=1e-9)
    assert float(nb.log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-9)
    for b in (97, 98):
        assert float(nb.log_probs[b]) == pytest.approx(brute_prefix(lm, x + bytes([b]), context) - exact, abs=1e-9)
    assert nb.log_probs[:97].eq(-math.inf).all() and nb.log_probs[99:256].eq(-math.inf).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.text("ab", min_size=1, max_size=6))
def test_chain_rule_gives_the_probability_of_the_whole_output(seed, text):
    lm = history_lm(seed)
    state = initial(lm, "", config=WIDE)
    total = 0.0
    for b in text.encode():
        total += float(state.next_byte_log_probs().log_probs[b])
        state.extend(b)
    total += state.next_byte_log_probs().end
    assert total == pytest.approx(brute_exact(lm, text.encode()), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.text("ab", min_size=0, max_size=5), st.text("ab", min_size=0, max_size=4),
       st.integers(1, 3), st.sampled_from([0.5, 3.0, math.inf]), st.sampled_from(["offset", "text"]),
       st.sampled_from([0.0, 0.0, 1e-3, 0.05, 0.3]))
def test_narrow_beams_are_certified(seed, prompt, text, beam, prune, against, share):
    """Pruning, and lazy extension (``share``: a prefix is run only if it holds that share of the text's
    prefix probability found), keep every bracket of a walk certified."""
    lm = history_lm(seed)
    config = StringSearchConfig(beam=beam, prune=prune, prune_against=against, extend_threshold=share)
    x, xy = prompt.encode(), (prompt + text).encode()
    p_x, p_xy = brute_prefix(lm, x), brute_prefix(lm, xy)
    try:
        state = initial(lm, prompt, config=config)
        px = state.prefix_log_prob()
        assert px.lower <= p_x + 1e-9 <= px.upper + 2e-9
        nb = state.next_byte_log_probs()
        for b in (97, 98):
            exact = brute_prefix(lm, x + bytes([b])) - p_x
            assert float(nb.lower[b]) <= exact + 1e-9 <= float(nb.upper[b]) + 2e-9
        cond = string_conditional(lm, prompt, text, config=config, event="prefix")
        assert cond.lower <= p_xy - p_x + 1e-9 <= cond.upper + 2e-9
        assert cond.lower <= cond.estimate <= cond.upper
        if share == 0:  # (a heal sweeps bytes again)
            assert cond.forwards <= (beam + 1) * (len(xy) + 1)  # flat cost per byte
    except DeadEndError:
        # only pruning against the text, or lazy extension, can drop every prefix that spells it (documented;
        # genlm-bytes' beam empties the same way); the bounds checked before the dead end held
        assert against == "text" or share > 0
    wide = string_conditional(lm, prompt, text, config=WIDE, event="prefix")
    assert wide.estimate == pytest.approx(p_xy - p_x, abs=1e-9) and wide.width == pytest.approx(0.0, abs=1e-9)


def test_healed_dead_ends_stay_certified():
    """Pruning against the text drops every prefix that spells the next byte again and again on these strings;
    each heal revives the dropped prefixes, and the bracket still holds the exact prefix probability."""
    heals = walks = 0
    for seed in range(1, 10):
        lm = history_lm(seed)
        for text in ("abab", "aabb", "baab", "abba", "bbaa", "aaab", "babb"):
            for beam, prune in ((1, 0.5), (2, 0.5), (1, 3.0)):
                try:
                    state = initial(lm, text, config=StringSearchConfig(beam=beam, prune=prune, prune_against="text"))
                except DeadEndError:
                    continue  # the prefix needed was dropped more than a token's length back: not kept to heal
                bracket, exact = state.prefix_log_prob(), brute_prefix(lm, text.encode())
                assert bracket.lower <= exact + 1e-9 <= bracket.upper + 2e-9
                heals += state.heals
                walks += 1
    assert heals > 50 and walks > 150


def test_pruning_against_the_text_runs_fewer_prefixes_and_stays_certified():
    """And lazy extension (a share of 0.05 of the text's mass) runs fewer than extending every kept prefix."""
    lm = history_lm(4)
    x = b"abbaabab"
    exact = [brute_prefix(lm, x[:k]) for k in range(len(x) + 1)]
    forwards = {}
    configs = {"offset": StringSearchConfig(beam=3, prune=1.0), "lazy": StringSearchConfig(beam=3, prune=1.0,
                                                                                           extend_threshold=0.05),
               "text": StringSearchConfig(beam=3, prune=1.0, prune_against="text")}
    for against, config in configs.items():
        state = StringState(lm, "", config)
        for k, b in enumerate(x):
            nb = state.next_byte_log_probs()
            assert float(nb.lower[b]) <= exact[k + 1] - exact[k] + 1e-9 <= float(nb.upper[b]) + 2e-9
            state.extend(b)
        px = state.prefix_log_prob()
        assert px.lower <= exact[-1] + 1e-9 <= px.upper + 2e-9
        forwards[against] = state.forwards
    assert forwards["text"] < forwards["offset"] and forwards["lazy"] < forwards["offset"]


def test_an_lm_without_special_tokens_cannot_end_a_string():
    vocab = Vocabulary.from_tokens(["a", "b", "ab"])
    lm = history_lm(2, vocab, bos_id=None)
    nb = initial(lm, "ab", config=WIDE).next_byte_log_probs()
    assert not nb.has_end and nb.log_probs[256] == -math.inf
    assert float(nb.log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(EndUnavailableError, match="end is unavailable|ends is unavailable"):
        nb.end


def test_bytes_no_token_covers_are_a_clear_error():
    lm = history_lm(3)
    with pytest.raises(DeadEndError, match=r"no token spells byte 0x63 at offset 2"):
        initial(lm, "abc")
    with pytest.raises(ValueError, match="0..255"):
        initial(lm).extend(300)


def test_a_string_longer_than_the_context_window_is_a_clear_error():
    """A toy LM with a 6-position window (BOS included): the beam refuses to run a longer token prefix."""
    from types import SimpleNamespace

    lm = history_lm(5)
    short = initial(lm, "abab", config=WIDE).prefix_log_prob()
    lm.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=6))
    assert initial(lm, "abab", config=WIDE).prefix_log_prob() == short  # 4 bytes: at most BOS + 4 tokens + 1
    with pytest.raises(ContextLengthError, match="needs 7 token positions .* context window of 6"):
        initial(lm, "abababab", config=WIDE)
    with pytest.raises(ContextLengthError, match="context window of 6"):
        string_conditional(lm, "abab", "abab", config=WIDE)
    with pytest.raises(ContextLengthError, match="context window of 6"):
        string_marginal(lm, "abababab", config=WIDE)
    with pytest.raises(ContextLengthError, match="needs 8 token positions"):
        initial(lm, "", context=[1] * 7)  # the context alone does not fit


def test_empty_prompt_is_the_unconditional_case():
    lm = history_lm(4)
    cond = string_conditional(lm, "", "ab", config=WIDE, event="prefix")
    assert cond.prompt_prefix.estimate == 0.0 and cond.prompt_prefix.lower == -cond.prompt_prefix.tolerance
    assert cond.estimate == pytest.approx(brute_prefix(lm, b"ab"), abs=1e-9)


def test_smollm2_prefix_and_conditional_match_enumeration(smollm2):
    prompt, text = " wo", "rld"
    exact_x, exact_xy = brute_prefix(smollm2, prompt.encode()), brute_prefix(smollm2, (prompt + text).encode())
    wide = string_conditional(smollm2, prompt, text, config=StringSearchConfig(beam=1000, prune=math.inf),
                              event="prefix")
    assert wide.prompt_prefix.estimate == pytest.approx(exact_x, abs=1e-5)
    assert wide.prompt_prefix.lower <= exact_x <= wide.prompt_prefix.upper
    assert wide.estimate == pytest.approx(exact_xy - exact_x, abs=1e-5)
    narrow = string_conditional(smollm2, prompt, text, config=StringSearchConfig(beam=2), event="prefix")
    assert narrow.lower <= exact_xy - exact_x <= narrow.upper  # no slack: the tolerance is in the interval
    nb = initial(smollm2, prompt, config=StringSearchConfig(beam=4)).next_byte_log_probs()
    assert float(nb.log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-9)
    assert nb.top(1)[0][0] == b"r"  # " wo" -> " world", " work", " word", ...


@pytest.mark.slow
def test_gemma_prefix_counts_byte_pieces_everywhere():
    """Gemma's byte-fallback pieces are tokens like any other for the LM over strings (docs/strings.md)."""
    import dataclasses

    from ppl_tok import load_lm

    gemma = load_lm("gemma3-270m")
    everywhere = dataclasses.replace(gemma.vocab, fallback="always")
    assert len(tokenizations(b" wo", everywhere)) > len(tokenizations(b" wo", gemma.vocab))
    terms = []
    x = b" wo"
    for i in range(len(x)):
        cover = [t for t, s in enumerate(gemma.vocab.surfaces) if s is not None and s.startswith(x[i:])]
        for v in tokenizations(x[:i], everywhere):
            row, head = gemma.state(gemma.prefix_ids() + v).log_probs.tolist(), gemma.log_prob(v)
            terms += [head + row[t] for t in cover]
    exact = logsumexp(terms)
    state = initial(gemma, x, config=StringSearchConfig(beam=1000, prune=math.inf))
    got = state.prefix_log_prob()  # float32 rows: the bracket is the found mass widened by its rounding tolerance
    assert got.estimate == pytest.approx(exact, abs=1e-5) and got.lower <= exact <= got.upper
    nb = state.next_byte_log_probs()
    assert float(torch.logsumexp(nb.unnormalised, 0)) == pytest.approx(exact, abs=1e-5)
    assert nb.has_end and float(nb.log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_at_synchronisation_points_the_conditional_is_the_marginal_given_the_prompt_tokens(seed):
    """If the prompt x has one tokenization v and no token spans the end of x or of xy ("c" is only ever a
    token by itself), every covering of xy is v then a tokenization of y: log p(y | x) = log p(y | v)."""
    from ppl_tok.infer.exact import exact_marginal

    vocab = Vocabulary.from_tokens([None, "a", "b", "ab", "c", "ba", "bab"])
    lm = history_lm(seed, vocab)
    prompt, text = "ac", "abbac"
    (v,) = tokenizations(prompt.encode(), vocab)  # one tokenization: a, c
    cond = string_conditional(lm, prompt, text, config=WIDE, event="prefix")
    marginal = exact_marginal(text, lm, context=v).log_marginal
    assert cond.estimate == pytest.approx(marginal, abs=1e-9) and cond.width == pytest.approx(0.0, abs=1e-9)


def test_a_prompt_past_the_window_is_refused_before_any_walk():
    """Issue 37: a prompt whose tokens cannot fit walked for hours before ContextLengthError; its shortest covering
    is known up front (fewest_tokens), so the refusal comes before any forward."""
    from types import SimpleNamespace

    from ppl_tok.strings.prefill import check_window, fewest_tokens

    assert [fewest_tokens(VOCAB, x) for x in (b"", b"a", b"abab", b"abababab")] == [0, 1, 2, 3]
    assert fewest_tokens(VOCAB, b"ab", covering=False) == 1 and fewest_tokens(VOCAB, b"c") == 3  # none: past any
    lm = history_lm(5)
    lm.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=4))
    before = lm.stats.forwards
    with pytest.raises(ContextLengthError, match="the prompt needs 7 token positions at least .*window of 4"):
        initial(lm, "abababab" * 2, config=WIDE)  # 16 bytes, tokens of at most 3: 6 covering tokens, and BOS
    with pytest.raises(ContextLengthError, match="shorten the text or the context"):
        check_window(lm, b"abababab" * 2, "", "the text")
    assert lm.stats.forwards == before
    check_window(lm, b"ababab", "")  # "aba" "bab" fits: BOS + 2 tokens
