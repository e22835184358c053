"""Focal-area surprisal from one walk: brute force over all token sequences (1e-9), sums over tiling regions,
the canonical column, the bracket of a narrow beam, and the table's shape."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok.common.logspace import logsumexp
from ppl_tok.reading.focal import AREAS, CONVENTIONS, focal_areas, predictor, regions
from ppl_tok.reading.focal_surprisal import TextEvents, focal_surprisals, focal_table, walk_events
from ppl_tok.strings import StringSearchConfig
from ppl_tok.strings.surprisal import canonical_surprisals
from ppl_tok.strings.units import WordRules
from tests.strings.test_state import WIDE, brute_exact, brute_prefix, history_lm
from tests.strings.test_surprisal import VOCAB

LN2 = math.log(2)
#: a small boundary set keeps the brute force short (the default set is every ASCII punctuation character)
RULES = WordRules(boundary=" .")
WORDS = st.lists(st.text("ab.", min_size=1, max_size=3), min_size=1, max_size=3).map(" ".join)


def brute_event(lm, text: str, o: int, corrected: bool) -> float:
    """log P(E_o) by enumeration: the prefix event, or the word-end event where the text goes on with B or ends
    (not at the text's start: ``P(E_0) = 1``, as in ppl_tok.strings.surprisal)."""
    x = text[:o].encode()
    if corrected and o > 0 and (o == len(text) or text[o] in RULES.boundary_chars):
        return logsumexp([brute_prefix(lm, x + c.encode()) for c in RULES.boundary_chars] + [brute_exact(lm, x)])
    return brute_prefix(lm, x)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 9), WORDS)
def test_every_focal_area_equals_brute_force(seed, text):
    lm = history_lm(seed, VOCAB)
    df = focal_surprisals(lm, [text], config=WIDE, rules=RULES)
    events = {c: [brute_event(lm, text, o, c) for o in range(len(text) + 1)] for c in (False, True)}
    canon = canonical_surprisals(lm, text, units="char")
    for conv in CONVENTIONS:
        spans = regions(text, conv)
        for area in AREAS:
            name = predictor(conv, area)
            for k, (s, e) in enumerate(focal_areas(spans, area, len(text))):
                for corrected, column in ((False, name), (True, name + "Corrected")):
                    exact = -(events[corrected][e] - events[corrected][s]) / LN2 if e > s else 0.0
                    assert df[column][k] == pytest.approx(exact, abs=1e-9), (conv, area, k, corrected)
                assert df[name + "Lower"][k] == pytest.approx(df[name][k], abs=1e-9)
                assert df[name + "Upper"][k] == pytest.approx(df[name][k], abs=1e-9)
                assert df[name.replace("Surprisal", "Canonical")][k] == pytest.approx(sum(canon[s:e]), abs=1e-9)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 9), WORDS)
def test_adjacent_regions_sum_to_the_text(seed, text):
    """Leading and Trailing regions tile the text: their surprisals sum to -log2 P(x) (with the correction, to the
    word-end event of the whole text); NoWhitespace regions and the spaces between them do too."""
    lm = history_lm(seed, VOCAB)
    (ev,) = walk_events(lm, [text], config=WIDE, rules=RULES)
    total = -brute_prefix(lm, text.encode()) / LN2
    total_corrected = -brute_event(lm, text, len(text), True) / LN2
    for conv in ("Leading", "Trailing"):
        spans = regions(text, conv)
        assert sum(ev.surprisal(s, e)[0] for s, e in spans) == pytest.approx(total, abs=1e-9)
        assert sum(ev.surprisal(s, e, True)[0] for s, e in spans) == pytest.approx(total_corrected, abs=1e-9)
    spans = regions(text, "NoWhitespace")
    gaps = [(b, a) for (_, b), (a, _) in zip(spans, spans[1:])]
    assert sum(ev.surprisal(s, e)[0] for s, e in spans + gaps) == pytest.approx(total, abs=1e-9)
    assert sum(ev.canonical_surprisal(s, e) for s, e in regions(text, "Leading")) == pytest.approx(
        sum(canonical_surprisals(lm, text, units="char")), abs=1e-9)


def test_canonical_leading_whole_is_canonical_word_surprisal():
    """Leading + Whole with the canonical tokens = the package's canonical word surprisal (the minicons way)."""
    lm = history_lm(4, VOCAB)
    text = "ab b.a ba"
    df = focal_surprisals(lm, [text], rules=RULES)
    assert df["CanonicalLeadingWhole"].tolist() == pytest.approx(
        canonical_surprisals(lm, text, units=regions(text, "Leading")), abs=1e-9)


def test_a_narrow_beam_brackets_the_exact_figure():
    lm = history_lm(7, VOCAB)
    text = "ab ba. ab"
    df = focal_surprisals(lm, [text], config=StringSearchConfig(beam=1, prune=1.0), rules=RULES)
    exact = focal_surprisals(lm, [text], config=WIDE, rules=RULES)
    for conv in CONVENTIONS:
        for area in AREAS:
            name = predictor(conv, area)
            assert (df[name + "Lower"] <= exact[name] + 1e-9).all() and (exact[name] <= df[name + "Upper"] + 1e-9).all()


def test_the_table_and_the_record_round_trip():
    lm = history_lm(2, VOCAB)
    events = walk_events(lm, ["ab a", "b"], config=WIDE, rules=RULES)
    back = [TextEvents.from_record(ev.to_record()) for ev in events]
    assert back == events
    df = focal_table(back, text_ids=["x", "y"])
    assert df[["text_id", "region", "word"]].values.tolist() == [["x", 0, "ab"], ["x", 1, "a"], ["y", 0, "b"]]
    assert len(df.columns) == 3 + 2 * len(CONVENTIONS) + 5 * len(CONVENTIONS) * len(AREAS)
    assert not df.isna().any().any()


def test_bad_input():
    lm = history_lm(2, VOCAB)
    with pytest.raises(ValueError, match="text 1 is empty"):
        walk_events(lm, ["a", ""])
    with pytest.raises(ValueError, match="text 0"):
        focal_surprisals(lm, ["a x"], config=WIDE)  # no token covers "x"
