"""The reading benchmarks' own arithmetic on a toy LM: the peer comparison (benchmarks/reading_peer.py) scores a peer
equal to the exact figures as agreeing and inside the bracket, and a peer off by a bit on one character as that
bit, outside; the texts are cut at a space (benchmarks/reading_cost.py)."""

import math

from benchmarks.reading_cost import cut_at_word
from benchmarks.reading_peer import compare
from ppl_tok.reading.focal_surprisal import walk_events
from tests.strings.test_state import WIDE, brute_prefix, history_lm
from tests.strings.test_surprisal import VOCAB

TEXT = "ab ba. ab"


def exact_char_nats(lm, text):
    """-log p(x_o | x_{<o}) by enumeration, per character."""
    pre = [brute_prefix(lm, text[:o].encode()) for o in range(len(text) + 1)]
    return [pre[o] - pre[o + 1] for o in range(len(text))]


def test_a_peer_equal_to_the_exact_figures_agrees_and_lies_in_the_bracket():
    lm = history_lm(7, VOCAB)
    ev = walk_events(lm, [TEXT], config=WIDE)[0]
    peer = exact_char_nats(lm, TEXT)
    got = compare(ev, peer)
    assert got["chars"] == len(TEXT) and got["max_abs_diff_bits"] < 1e-9
    assert got["peer_in_char_bracket"] == got["peer_prefix_in_bracket"] == 1.0
    assert math.isclose(got["total_peer_bits"], got["total_ours_bits"], abs_tol=1e-9)
    assert [r[0] for r in got["per_char"]] == list(TEXT)


def test_a_peer_off_by_a_bit_on_one_character_is_that_bit_and_outside():
    lm = history_lm(7, VOCAB)
    ev = walk_events(lm, [TEXT], config=WIDE)[0]
    peer = exact_char_nats(lm, TEXT)
    peer[4] += math.log(2.0)  # one bit more surprised at 'a' of "ba."
    got = compare(ev, peer)
    assert math.isclose(got["max_abs_diff_bits"], 1.0, abs_tol=1e-9)
    assert math.isclose(got["mean_diff_bits"], 1 / len(TEXT), abs_tol=1e-9)
    assert got["peer_in_char_bracket"] == 1 - 1 / len(TEXT)
    assert got["peer_prefix_in_bracket"] == 4 / len(TEXT)  # every prefix from that character on is a bit off


def test_texts_are_cut_at_a_space():
    assert cut_at_word("ab cd ef", 5) == "ab cd"
    assert cut_at_word("ab cd ef", 6) == "ab cd"
    assert cut_at_word("ab cd ef", 0) == cut_at_word("ab cd ef", 8) == "ab cd ef"
