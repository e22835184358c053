"""Next-character distributions (UTF-8) over strings, against brute-force prefix probabilities."""

import math

import pytest

from ppl_tok import Vocabulary
from ppl_tok.strings import StringSearchConfig, initial
from ppl_tok.strings.chars import next_char_log_probs, utf8_length
from tests.strings.test_state import WIDE, brute_prefix, history_lm

# "é" = C3 A9, "ü" = C3 BC, "€" = E2 82 AC; byte tokens split them, and 0xFF is no UTF-8 at all
PIECES = [None, "a", "é", "ü", "€", "aé", b"\xc3", b"\xa9", b"\xbc", b"\xe2\x82", b"\xac", b"\xff", "é€"]
VOCAB = Vocabulary.from_tokens(PIECES)


@pytest.mark.parametrize("prompt", ["", "a", "é", "aé"])
def test_characters_equal_brute_force_and_sum_to_one(prompt):
    lm = history_lm(3, VOCAB)
    x = prompt.encode()
    state = initial(lm, prompt, config=WIDE)
    data = bytes(state.data)
    dist = next_char_log_probs(state, min_log_prob=-math.inf)
    assert bytes(state.data) == data  # the state is left as it was
    base = brute_prefix(lm, x)
    assert {"a", "é", "ü", "€", "₩"} <= set(dist.chars)  # byte tokens spell characters no token holds (E2 82 A9)
    for c, (lp, lo, hi) in dist.chars.items():
        exact = brute_prefix(lm, x + c.encode()) - base
        assert lp == pytest.approx(exact, abs=1e-9) and lo == pytest.approx(exact, abs=1e-9)
        assert hi == pytest.approx(exact, abs=1e-9)
    total = [lp for lp, _, _ in dist.chars.values()] + [dist.end[0], dist.other]
    assert math.fsum(math.exp(v) for v in total) == pytest.approx(1.0, abs=1e-9)
    # "other" is exactly the byte 0xFF and the strings that stop inside a character
    invalid = brute_prefix(lm, x + b"\xff") - base
    assert dist.other >= invalid - 1e-9 and math.isfinite(dist.other)


def test_a_pruning_beam_brackets_every_character_and_the_threshold_names_the_rest():
    lm = history_lm(2, VOCAB)
    x = "aé".encode()
    base = brute_prefix(lm, x)
    narrow = next_char_log_probs(initial(lm, "aé", config=StringSearchConfig(beam=1, prune=0.5)), -math.inf)
    for c, (lp, lo, hi) in narrow.chars.items():
        exact = brute_prefix(lm, x + c.encode()) - base
        assert lo <= exact + 1e-9 <= hi + 2e-9
    cut = next_char_log_probs(initial(lm, "aé", config=WIDE), min_log_prob=-1.5)
    assert cut.unexplored and all(len(u) < utf8_length(u[0]) for u in cut.unexplored)
    whole = next_char_log_probs(initial(lm, "aé", config=WIDE), -math.inf)
    assert set(cut.chars) < set(whole.chars)
    assert math.exp(cut.other) == pytest.approx(math.exp(whole.other) + sum(
        math.exp(whole.chars[c][0]) for c in set(whole.chars) - set(cut.chars)), abs=1e-9)
    with pytest.raises(ValueError, match="min_log_prob"):
        next_char_log_probs(initial(lm, "a", config=WIDE), math.nan)


def test_utf8_lengths():
    assert [utf8_length(b) for b in (0x41, 0x80, 0xC1, 0xC3, 0xE2, 0xF0, 0xF5)] == [1, 0, 0, 2, 3, 4, 0]


@pytest.mark.parametrize("prompt", [b"\xc3", "a".encode() + b"\xe2", b"a\xe2\x82"])
def test_a_state_inside_a_character_names_its_completions(prompt):
    """Issue 37: after the first bytes of a character its completion went to "other"; it is now the character,
    with p(rest of it | x) equal to brute force."""
    lm = history_lm(3, VOCAB)
    state = initial(lm, prompt, config=WIDE)
    dist = next_char_log_probs(state, min_log_prob=-math.inf)
    base = brute_prefix(lm, prompt)
    assert dist.partial == prompt[prompt.index(max(prompt)):] and dist.chars
    for c, (lp, lo, hi) in dist.chars.items():
        encoded = c.encode()
        assert encoded.startswith(dist.partial)
        exact = brute_prefix(lm, prompt + encoded[len(dist.partial):]) - base
        assert lp == pytest.approx(exact, abs=1e-9) and lo <= exact <= hi
    total = [lp for lp, _, _ in dist.chars.values()] + [dist.end[0], dist.other]
    assert math.fsum(math.exp(v) for v in total) == pytest.approx(1.0, abs=1e-9)
    assert dist.to_dict()["partial"] == dist.partial.hex()


def test_smollm2_completes_the_character_it_ends_inside(smollm2):
    dist = next_char_log_probs(initial(smollm2, "caf\xe9".encode()[:-1]))  # "caf" and the lead byte of "é"
    assert dist.partial == b"\xc3" and next(iter(dist.chars)) == "é"
    lp, lo, hi = dist.chars["é"]
    assert lo <= lp <= hi and math.exp(lp) > 0.9 and math.exp(dist.other) < 0.05  # was "other", p = 0.98


def test_visible_characters():
    from ppl_tok.strings.chars import visible, visible_byte

    assert [visible(c) for c in " \n\t\r\x07\x7f\u00a0\u200ba\u00e9"] == [
        "\u2420", "\\n", "\\t", "\\r", "U+0007", "U+007F", "U+00A0", "U+200B", "a", "\u00e9"]
    assert [visible_byte(b) for b in (0x20, 0x0A, 0x41, 0xC3)] == ["\u2420", "\\n", "A", "\\xC3"]


def test_infinite_bounds_are_written_as_every_command_writes_them():
    """One JSON convention: -inf is "-Infinity" (ppl_tok.common.jsonout), where NextChars wrote null."""
    import json

    from ppl_tok.common.jsonout import to_json
    from ppl_tok.strings.chars import NextChars

    out = json.loads(to_json(NextChars({"a": (-1.0, -math.inf, 0.0)}, (-2.0, -math.inf, -1.0), -math.inf).to_dict()))
    assert out["chars"]["a"] == [-1.0, "-Infinity", 0.0] and out["end"][1] == "-Infinity"
    assert out["other"] == "-Infinity" and out["partial"] == ""
