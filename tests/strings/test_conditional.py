"""The conditional over strings under each event, and its greedy flag, against brute force over all token sequences
and next characters (ppl_tok.strings.conditional)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import Vocabulary
from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings import StringSearchConfig
from ppl_tok.strings.conditional import EVENTS, conditionals_many, string_conditional
from ppl_tok.strings.units import WordRules
from tests.strings.test_state import WIDE, brute_exact, brute_prefix, history_lm

PIECES = [None, "a", "b", " ", ".", "ab", " a", " b", "ba", " ab", "a.", "b ", ". "]
VOCAB = Vocabulary.from_tokens(PIECES)
BOUNDARY = WordRules().boundary_chars


def brute_event(lm, x: bytes, event: str) -> float:
    """log P(event of x): ``prefix``, the output begins with x; ``boundary``, x then a character of B or the end."""
    if event == "prefix":
        return brute_prefix(lm, x)
    return logsumexp([brute_prefix(lm, x + c.encode()) for c in BOUNDARY] + [brute_exact(lm, x)])


class Tie(Exception):
    """Two next bytes within rounding of each other: greedy is not defined by the masses alone."""


def brute_greedy(lm, prompt: bytes, text: bytes, event: str) -> bool:
    """Greedy byte decoding after ``prompt``: the most probable of the bytes and the end is ``text``'s byte at each
    step, and (``boundary``) after it a byte of B or the end; :class:`Tie` where the top two are within 1e-9."""
    surfaces = sorted({b for s in VOCAB.surfaces if s for b in s})

    def best(x: bytes):
        options = sorted([(brute_prefix(lm, x + bytes([b])), b) for b in surfaces] + [(brute_exact(lm, x), 256)])
        if options[-1][0] - options[-2][0] < 1e-9:
            raise Tie
        return options[-1][1]

    for i in range(len(text)):
        if best(prompt + text[:i]) != text[i]:
            return False
    if event == "boundary":
        b = best(prompt + text)
        return b == 256 or chr(b) in BOUNDARY
    return True


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=6), st.integers(0, 6), st.sampled_from(EVENTS))
def test_each_event_equals_brute_force_at_a_cut(seed, text, cut, event):
    """log p(y | x) = log P(event of x y) - log P(x), over all token sequences and next characters (1e-9); the
    interval holds it, and greedy equals greedy decoding by brute force."""
    lm = history_lm(seed, VOCAB)
    cut = min(cut, len(text) - 1)
    prompt, cont = text[:cut], text[cut:]
    want = brute_event(lm, text.encode(), event) - brute_prefix(lm, prompt.encode())
    (r,) = conditionals_many(lm, [prompt], [cont], config=WIDE, event=event, greedy=True)
    assert r.estimate == pytest.approx(min(0.0, want), abs=1e-9) and r.event == event
    assert r.lower - 1e-9 <= want <= r.upper + 1e-9
    try:
        assert r.greedy == brute_greedy(lm, prompt.encode(), cont.encode(), event)
    except Tie:
        pass
    alone = string_conditional(lm, prompt, cont, config=WIDE, event=event)
    assert alone.estimate == pytest.approx(r.estimate, abs=1e-12) and alone.greedy is None


def test_boundary_is_below_prefix_and_does_not_credit_longer_words():
    """" ab" then a boundary excludes " aba...", " abb...": at most the prefix event, strictly below where the
    beam finds a longer word; each interval certified under lazy extension."""
    lm = history_lm(3, VOCAB)
    lazy = StringSearchConfig(extend_threshold=0.05)
    for config in (WIDE, lazy):
        pre, bnd = (conditionals_many(lm, ["b a", "b a"], [" ab", " a"], config=config, event=e) for e in EVENTS)
        for p, b in zip(pre, bnd):
            assert b.estimate < p.estimate and b.upper <= p.upper + 1e-12
        for b, x in zip(bnd, ["b a ab", "b a a"]):
            want = brute_event(lm, x.encode(), "boundary") - brute_prefix(lm, b"b a")
            assert b.lower - 1e-9 <= want <= b.upper + 1e-9


def test_a_bad_event_is_named():
    lm = history_lm(1, VOCAB)
    with pytest.raises(ValueError, match="event must be one of prefix, boundary"):
        conditionals_many(lm, ["a"], ["b"], event="word")
    with pytest.raises(ValueError, match="event must be one of"):
        string_conditional(lm, "a", "b", event="end")


def test_whitespace_placement_and_public_shapes_are_finite():
    """'Ans'+'wer'-like cuts (mid-word) and the delimiter space on either side: finite under both events."""
    lm = history_lm(5, VOCAB)
    got = conditionals_many(lm, ["ab", "ab ", "a", "b"], [" ba", "ba", "b ab", "a. b"], config=WIDE, event="boundary")
    assert all(math.isfinite(r.estimate) and r.estimate <= 0 for r in got)


def test_lazy_boundary_keeps_the_canonical_path_and_equals_one_by_one():
    """Under lazy extension the boundary event keeps each text's canonical path (its mass found is at least the
    canonical tokens', so never -inf), batched or alone, and its interval holds the exact figure."""
    lm = history_lm(4, VOCAB)
    lazy = StringSearchConfig(extend_threshold=0.3)
    pairs = [("", " ab"), ("b a", " ab."), ("b a", " b"), ("ab", ". b")]
    many = conditionals_many(lm, [p for p, _ in pairs], [t for _, t in pairs], config=lazy, event="boundary")
    for (p, t), r in zip(pairs, many):
        alone = string_conditional(lm, p, t, config=lazy, event="boundary")
        assert alone.estimate == pytest.approx(r.estimate, abs=1e-12)
        ids = lm.canonical(p + t)  # the canonical path then the end (token 0): one term of the boundary event
        path_end = lm.canonical_log_prob(p + t) + float(lm.state(list(lm.prefix_ids()) + list(ids)).log_probs[0])
        assert math.isfinite(r.estimate) and r.joint_prefix.found >= path_end - 1e-9
        want = brute_event(lm, (p + t).encode(), "boundary") - brute_prefix(lm, p.encode())
        assert r.lower - 1e-9 <= want <= r.upper + 1e-9
