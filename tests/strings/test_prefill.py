"""Prefill modes: canonical-head against exact and against brute force over the tail's coverings."""

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import Vocabulary
from ppl_tok.strings import DeadEndError, StringSearchConfig, StringState, initial, initial_many, string_conditional
from ppl_tok.strings.ensemble import Ensemble
from ppl_tok.strings.generate import generate
from ppl_tok.strings.cover import cover_index
from ppl_tok.strings.prefill import AUTO_HEAD_TOKENS, Head, head_tokens, prefill_heads, reach
from tests.strings.test_state import VOCAB, WIDE, brute_prefix, history_lm

HEAD = replace(WIDE, prefill="canonical-head")
ab = st.text("ab", min_size=7, max_size=11)


def brute_head(lm, prompt: bytes, config: StringSearchConfig, extra: bytes = b"") -> tuple[float, Head]:
    """``log P_H(prompt extra) = log p(h* | BOS) + log P(tail extra | BOS h*)``, by enumeration over the tail."""
    ids, n = head_tokens(lm.vocab, prompt, config)
    head_lp = lm.log_prob(ids) if ids else 0.0
    return head_lp + brute_prefix(lm, prompt[n:] + extra, ids), Head(ids, n, head_lp)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), ab)
def test_a_tail_that_is_the_whole_prompt_is_exact(seed, prompt):
    lm = history_lm(seed)
    whole = replace(HEAD, prefill_tail=len(prompt))  # no canonical token ends a whole prompt before the end
    exact = replace(WIDE, prefill="exact")  # (auto would prefill a head of 8 one-byte tokens here)
    ch, ex = initial(lm, prompt, config=whole), initial(lm, prompt, config=exact)
    assert ch.base == 0 and ch.prefill == "exact"
    assert ch.prefix_log_prob() == ex.prefix_log_prob()
    assert torch.equal(ch.next_byte_log_probs().log_probs, ex.next_byte_log_probs().log_probs)
    a, b = string_conditional(lm, prompt, "ab", config=whole), string_conditional(lm, prompt, "ab", config=exact)
    assert (a.lower, a.estimate, a.upper) == (b.lower, b.estimate, b.upper)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), ab, st.sampled_from([None, 4]))
def test_canonical_head_equals_brute_force_over_the_tails_coverings(seed, prompt, tail):
    lm = history_lm(seed)
    config = replace(HEAD, prefill_tail=tail)
    x = prompt.encode()
    exact_h, head = brute_head(lm, x, config)
    state = initial(lm, prompt, config=config)
    assert state.prefill == "canonical-head" and state.head.ids == head.ids and state.base == head.n_bytes
    assert state.base <= reach(cover_index(VOCAB), x) and len(x) - state.base >= (tail or 1)
    got = state.prefix_log_prob()
    assert got.lower == pytest.approx(exact_h, abs=1e-9) and got.upper == pytest.approx(exact_h, abs=1e-9)
    nb = state.next_byte_log_probs()
    for b in (97, 98):
        want = brute_head(lm, x, config, bytes([b]))[0] - exact_h
        assert float(nb.log_probs[b]) == pytest.approx(want, abs=1e-9)
    cond = string_conditional(lm, prompt, "ba", config=config, event="prefix")
    assert cond.estimate == pytest.approx(brute_head(lm, x, config, b"ba")[0] - exact_h, abs=1e-9)
    assert cond.prefill == "canonical-head" and cond.head_bytes == head.n_bytes
    assert cond.forwards >= len(head.ids)  # the head's token positions are counted
    # a subset of the coverings: never above exact's prefix probability
    assert exact_h <= brute_prefix(lm, x) + 1e-9


def crossing_starts(vocab, prompt: bytes) -> list[int]:
    """Brute force: every offset where some token starts that runs past the end of ``prompt``."""
    return [s for s in range(len(prompt)) for t in vocab.surfaces
            if t is not None and len(t) > len(prompt) - s and t.startswith(prompt[s:])]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 9), st.text("ab", min_size=1, max_size=14), st.sampled_from([None, 1, 3]))
def test_the_back_off_is_the_canonical_boundary_before_the_reach_and_maximal(seed, text, tail):
    lm = history_lm(seed % 3)
    prompt = text.encode()
    config = replace(HEAD, prefill_tail=tail)
    ids, n = head_tokens(lm.vocab, prompt, config)
    crossing = crossing_starts(VOCAB, prompt)
    assert reach(cover_index(VOCAB), prompt) == min(crossing, default=len(prompt))
    canon = lm.vocab.encode(text)
    assert tuple(canon[:len(ids)]) == ids and sum(len(VOCAB[t]) for t in ids) == n
    assert all(s >= n for s in crossing)  # every token that can run past the end starts in the tail
    assert n < len(prompt) and (n == 0 or len(prompt) - n >= (tail or 1))
    limit = min(min(crossing, default=len(prompt)), len(prompt) - 1, len(prompt) - (tail or 0))
    if len(ids) < len(canon):  # one more canonical token would end past the limit
        assert n + len(VOCAB[canon[len(ids)]]) > limit


def test_on_prose_the_tail_is_the_last_word_not_the_longest_token(smollm2):
    index = cover_index(smollm2.vocab)
    assert index.longest >= 64  # runs of "=", "#" or spaces
    prose = b"The committee met on Tuesday to discuss the budget for the next fiscal year and the"
    ids, n = head_tokens(smollm2.vocab, prose, HEAD)
    assert 0 < len(prose) - n <= 12 and prose[n:].startswith(b" ")
    cut = len(prose) - index.longest  # no token starts earlier than a longest token before the end
    assert all(cut + s >= n for s in crossing_starts(smollm2.vocab, prose[cut:]))
    ruled = prose + b"\n" + b"=" * 40  # tokens of 64 "=" could run past this end: the tail reaches back
    ids, n = head_tokens(smollm2.vocab, ruled, HEAD)
    assert len(ruled) - n >= 40


def test_the_back_off_never_cuts_a_character():
    # byte tokens split "é" (C3 A9): the canonical tokens end inside characters at 2, 5, 8, 11
    vocab = Vocabulary.from_tokens([None, "a", b"\xc3", b"\xa9", b"a\xc3"])
    lm = history_lm(3, vocab)
    prompt = "aé" * 4
    data = prompt.encode()
    ids, n = head_tokens(vocab, data, replace(HEAD, prefill_tail=4))
    assert n == 6 and data[n] & 0xC0 != 0x80  # 8 would be inside the third "é"
    config = replace(HEAD, prefill_tail=4)
    exact_h, _ = brute_head(lm, data, config)
    assert initial(lm, prompt, config=config).prefix_log_prob().lower == pytest.approx(exact_h, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), ab, st.text("ab", min_size=1, max_size=3), st.integers(1, 3),
       st.sampled_from([0.5, 3.0]), st.sampled_from(["offset", "text"]))
def test_narrow_beams_bracket_the_canonical_head_quantity(seed, prompt, text, beam, prune, against):
    lm = history_lm(seed)
    config = StringSearchConfig(beam=beam, prune=prune, prune_against=against, prefill="canonical-head")
    x = prompt.encode()
    p_x, _ = brute_head(lm, x, config)
    p_xy, _ = brute_head(lm, x, config, text.encode())
    try:
        state = initial(lm, prompt, config=config)
        px = state.prefix_log_prob()
        assert px.lower <= p_x + 1e-9 <= px.upper + 2e-9
        nb = state.next_byte_log_probs()
        for b in (97, 98):
            want = brute_head(lm, x, config, bytes([b]))[0] - p_x
            assert float(nb.lower[b]) <= want + 1e-9 <= float(nb.upper[b]) + 2e-9
        cond = string_conditional(lm, prompt, text, config=config, event="prefix")
        assert cond.lower <= p_xy - p_x + 1e-9 <= cond.upper + 2e-9
    except DeadEndError:
        assert against == "text"


def test_auto_is_exact_on_short_prompts_and_canonical_head_on_long_ones():
    lm = history_lm(4)
    auto = replace(WIDE, prefill="auto")
    assert StringSearchConfig().prefill == "auto"
    short = "abab" * 2  # 8 bytes: a head of fewer than AUTO_HEAD_TOKENS tokens
    assert initial(lm, short, config=auto).prefill == "exact"
    assert initial(lm, short, config=HEAD).prefill == "canonical-head"
    long = "abbab" * 8
    state = initial(lm, long, config=auto)
    assert state.prefill == "canonical-head" and len(state.head.ids) >= AUTO_HEAD_TOKENS
    # the mode asked for and the mode of a walk are labels the beam's width does not choose: a beam of 16 keeps
    # these two 40-byte walks under a second (WIDE's 10,000 hypotheses took 16 minutes of the loaded profile)
    narrow = 16
    assert initial(lm, long, config=replace(WIDE, prefill="exact", beam=narrow)).prefill == "exact"
    # a walk fed byte by byte is exact whatever the mode
    assert StringState(lm, "", replace(HEAD, beam=narrow)).extend(long).prefill == "exact"


def test_the_config_refuses_a_bad_prefill():
    with pytest.raises(ValueError, match="prefill must be one of 'auto', 'exact', 'canonical-head'"):
        StringSearchConfig(prefill="canonical")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="prefill_tail must be a positive number of bytes"):
            StringSearchConfig(prefill_tail=bad)


def test_heads_prefilled_in_one_batch_equal_heads_prefilled_alone():
    lm = history_lm(5)
    prompts = [b"abbabababba", b"ab", b"babbabbabab"]
    contexts = [(), (1,), (3, 4)]
    heads = prefill_heads(lm, prompts, contexts, HEAD)
    assert heads[1] == Head()  # too short for a head
    for p, c, h in zip(prompts, contexts, heads):
        alone = StringState(lm, c, HEAD, prompt=p)
        assert alone.head == h
        given_head = StringState(lm, c, HEAD, prompt=p, head=h)
        assert given_head.prefix_log_prob() == alone.prefix_log_prob()
    many = initial_many(lm, prompts, contexts, HEAD)
    for p, c, state in zip(prompts, contexts, many):
        alone = StringState(lm, c, HEAD, prompt=p)
        assert state.head == alone.head and state.prefix_log_prob() == alone.prefix_log_prob()
        assert torch.equal(state.next_byte_log_probs().log_probs, alone.next_byte_log_probs().log_probs)
    with pytest.raises(ValueError, match="does not spell the start of the prompt"):
        StringState(lm, (), HEAD, prompt=b"babbabbabab", head=heads[0])


def test_generation_and_ensembles_take_the_prefill_mode():
    a, b = history_lm(2), history_lm(7)
    prompt = "abbab" * 3
    ens = Ensemble.of([a, b], prompt, config=HEAD)
    assert all(s.prefill == "canonical-head" for s in ens.states)
    alone = [initial(lm, prompt, config=HEAD) for lm in (a, b)]
    # the mixture weighs each member by its own P_H(x): here the members are alone
    est = ens.next_bytes()
    assert (est.lower <= est.log_probs + 1e-9).all() and (est.log_probs <= est.upper + 1e-9).all()
    w = torch.tensor([s.prefix_log_prob().estimate for s in alone], dtype=torch.float64)
    assert torch.allclose(ens.member_weights(), (w - torch.logsumexp(w, 0)).exp(), atol=1e-12)
    for mode in ("bytes", "tokens"):
        g = generate(a, prompt, 4, config=HEAD, mode=mode, seed=1, progress=False)
        assert g.forwards >= len(initial(a, prompt, config=HEAD).head.ids)
    first = initial(a, prompt, config=HEAD).next_byte_log_probs().log_probs
    assert float(first.exp().sum()) == pytest.approx(1.0, abs=1e-9) and not math.isnan(float(first[97]))


def test_a_head_longer_than_the_context_window_is_refused_before_any_forward():
    from types import SimpleNamespace

    from ppl_tok.strings import ContextLengthError

    lm = history_lm(3)
    lm.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=6))  # BOS + 5 positions
    before = lm.stats.forwards
    with pytest.raises(ContextLengthError, match="the prompt needs 9 token positions at least"):
        initial(lm, "ab" * 12, config=HEAD)
    assert lm.stats.forwards == before
