"""The events of a string (``ppl_tok/strings/events.py``): prefix and with-end brackets against brute force."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import Vocabulary
from ppl_tok.strings import StringSearchConfig, StringState, string_marginal
from ppl_tok.strings.events import EndUnavailableError, require_end, string_events
from ppl_tok.strings.state import extend_many
from tests.strings.test_state import WIDE, brute_exact, brute_prefix, history_lm


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.lists(st.text("ab", min_size=1, max_size=6), min_size=1, max_size=4))
def test_events_equal_brute_force_and_nest(seed, texts):
    lm = history_lm(seed)
    for t, ev in zip(texts, string_events(lm, texts, config=WIDE)):
        x = t.encode()
        assert ev.prefix.lower == pytest.approx(brute_prefix(lm, x), abs=1e-9)
        assert ev.prefix.upper == pytest.approx(ev.prefix.lower, abs=1e-9)
        assert ev.end.lower == pytest.approx(brute_exact(lm, x), abs=1e-9)
        text = string_marginal(lm, t, config=WIDE).lower
        assert ev.end.lower <= text + 1e-9 <= ev.prefix.lower + 2e-9
        assert ev.canonical == pytest.approx(lm.canonical_log_prob(t), abs=1e-9)
        assert ev.canonical_end <= ev.end.lower + 1e-12


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.lists(st.text("ab", min_size=1, max_size=7), min_size=1, max_size=4),
       st.integers(1, 2), st.floats(0.5, 3.0))
def test_narrow_beams_bracket_the_events_and_keep_the_canonical_path(seed, texts, beam, prune):
    lm = history_lm(seed)
    narrow = StringSearchConfig(beam=beam, prune=prune)
    for t, ev in zip(texts, string_events(lm, texts, config=narrow)):
        x = t.encode()
        assert ev.prefix.lower - 1e-9 <= brute_prefix(lm, x) <= ev.prefix.upper + 1e-9
        assert ev.end.lower - 1e-9 <= brute_exact(lm, x) <= ev.end.upper + 1e-9
        assert ev.canonical == pytest.approx(lm.canonical_log_prob(t), abs=1e-9)
        assert ev.canonical <= ev.prefix.lower + 1e-12 and ev.canonical_end <= ev.end.lower + 1e-12


def test_lockstep_walks_equal_lone_walks():
    lm = history_lm(3)
    texts = ["ab", "babba", "a", "abab"]
    config = StringSearchConfig(beam=2, prune=2.0)
    together = extend_many([StringState(lm, "", config) for _ in texts], texts)
    for t, s in zip(texts, together):
        alone = StringState(lm, "", config).extend(t)
        assert s.prefix_log_prob() == alone.prefix_log_prob()
        assert s.forwards == alone.forwards


def test_a_vocabulary_without_a_surfaceless_token_has_no_end():
    from ppl_tok import FunctionLM

    vocab = Vocabulary.from_tokens(["a", "b", "ab"])
    lm = FunctionLM(vocab, lambda p: [0.0, 0.0, 0.0], bos_id=None, log=True)
    with pytest.raises(EndUnavailableError, match="no EOS .*--scoring beam"):
        require_end(lm)
    (ev,) = string_events(lm, ["ab"], config=WIDE)
    assert ev.end is None and ev.prefix.lower > -math.inf
