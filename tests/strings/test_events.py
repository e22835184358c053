"""The events of a string (``ppl_tok/strings/events.py``): prefix and with-end brackets against brute force."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import Vocabulary
from ppl_tok.strings import StringSearchConfig, StringState, string_marginal
from ppl_tok.strings.events import EndUnavailableError, require_end, string_events
from ppl_tok.strings.state import DeadEndError, extend_many
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


def test_walks_share_calls_without_reading_in_step_and_one_failure_leaves_the_others():
    """Each walk reads until it needs a forward and one call serves every waiting walk: the walks end
    where lone walks do, in fewer calls than the lone walks together; ``after`` sees every byte of
    every walk in order; a walk that fails is stored in ``failed`` and the others finish."""
    lm = history_lm(4)
    texts = ["abbaab", "babba", "ab", "ababba", "babcab", "b"]  # "c": no token covers it
    config = StringSearchConfig(beam=3, prune=4.0)
    lone_calls, lone = 0, {}
    for k, t in enumerate(texts):
        if "c" in t:
            continue
        lm.clear_cache()
        lm.stats.reset()
        lone[k] = StringState(lm, "", config).extend(t).prefix_log_prob()
        lone_calls += lm.stats.calls
    lm.clear_cache()
    lm.stats.reset()
    seen: dict[int, list[int]] = {}
    failed: dict[int, Exception] = {}
    states = extend_many([StringState(lm, "", config) for _ in texts], texts,
                         after=lambda k, j: seen.setdefault(k, []).append(j), failed=failed)
    assert set(failed) == {4} and "spell byte 0x63 at offset 3" in str(failed[4])
    assert seen[4] == [0, 1, 2]  # the bytes before the one no token covers
    for k, p in lone.items():
        assert states[k].prefix_log_prob() == p
        assert seen[k] == list(range(len(texts[k])))
    assert lm.stats.calls < lone_calls
    with pytest.raises(DeadEndError, match="0x63"):  # without ``failed`` the error propagates
        extend_many([StringState(lm, "", config) for _ in texts], texts)


def test_a_vocabulary_without_a_surfaceless_token_has_no_end():
    from ppl_tok import FunctionLM

    vocab = Vocabulary.from_tokens(["a", "b", "ab"])
    lm = FunctionLM(vocab, lambda p: [0.0, 0.0, 0.0], bos_id=None, log=True)
    with pytest.raises(EndUnavailableError, match="no EOS .*--scoring beam"):
        require_end(lm)
    (ev,) = string_events(lm, ["ab"], config=WIDE)
    assert ev.end is None and ev.prefix.lower > -math.inf
