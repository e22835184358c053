"""Surprisal per unit over strings: brute force over all token sequences, the chain rule, bad input, SmolLM2."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import Vocabulary
from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings import DeadEndError, StringSearchConfig
from ppl_tok.strings.surprisal import (FINALS, WordRules, canonical_surprisals, canonical_surprisals_many, region_spans,
                                      surprisal_batch, surprisals, surprisals_many, word_spans)
from tests.strings.test_state import WIDE, brute_exact, brute_prefix, history_lm

PIECES = [None, "a", "b", " ", ".", "ab", " a", " b", "ba", " ab", "a.", "b ", ". ", "é", b"\xc3", b"\xa9", " é"]
VOCAB = Vocabulary.from_tokens(PIECES)
LN2 = math.log(2)


def brute_events(lm, text: str, spans, rules: WordRules, word_end: bool = True, final: str = "boundary"
                 ) -> list[float]:
    """log P(E_k), k = 0..n, by enumerating token sequences (the definition of ppl_tok.strings.surprisal)."""
    data = text.encode()
    boundary = rules.boundary_chars
    events = [0.0]
    for k, (_, b) in enumerate(spans):
        x = data[:b]
        if k == len(spans) - 1 and final != "boundary":
            events.append(brute_exact(lm, x) if final == "end" else brute_prefix(lm, x))
        elif k == len(spans) - 1 or word_end and data[b:].decode()[:1] in boundary:
            events.append(logsumexp([brute_prefix(lm, x + c.encode()) for c in boundary] + [brute_exact(lm, x)]))
        else:
            events.append(brute_prefix(lm, x))
    return events


def byte_spans(text, spans):
    off = [len(text[:i].encode()) for i in range(len(text) + 1)]
    return [(off[a], off[b]) for a, b in spans]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=7), st.booleans(), st.sampled_from(FINALS))
def test_word_surprisal_equals_brute_force_and_sums_to_the_last_event(seed, text, split, final):
    lm = history_lm(seed, VOCAB)
    rules = WordRules(split_punctuation=split)
    rows = surprisals(lm, text, config=WIDE, rules=rules, final=final)
    spans = word_spans(text, rules)
    assert [(r.start, r.end) for r in rows] == spans and "".join(r.text for r in rows) == text
    assert rows[-1].followed_by == {"none": "any"}.get(final, final)
    events = brute_events(lm, text, byte_spans(text, spans), rules, final=final)
    for r, (e0, e1) in zip(rows, zip(events, events[1:])):
        assert r.surprisal == pytest.approx(-(e1 - e0) / LN2, abs=1e-9)
        assert r.lower == pytest.approx(r.surprisal, abs=1e-9) and r.upper == pytest.approx(r.surprisal, abs=1e-9)
        assert r.informative and r.hint is None
    assert sum(r.surprisal for r in rows) == pytest.approx(-events[-1] / LN2, abs=1e-9)
    if final == "end":
        assert events[-1] == pytest.approx(brute_exact(lm, text.encode()), abs=1e-12)
    assert sum(r.canonical for r in rows) == pytest.approx(-lm.canonical_log_prob(text) / LN2, abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=6).filter(lambda t: t.strip() and t[-1] != " "),
       st.sampled_from([" b", " .", "  a"]))
def test_final_boundary_is_the_interior_rule_as_if_a_space_followed(seed, text, after):
    """--final boundary on the last unit = the same unit scored inside ``text + after`` (brute force: above)."""
    lm = history_lm(seed, VOCAB)
    rows = surprisals(lm, text, config=WIDE, final="boundary")
    longer = surprisals(lm, text + after, config=WIDE)
    assert longer[len(rows) - 1].followed_by == "boundary" and longer[len(rows) - 1].text == rows[-1].text
    assert [r.surprisal for r in rows] == pytest.approx([r.surprisal for r in longer[:len(rows)]], abs=1e-9)


@pytest.mark.parametrize("units", ["char", "byte", [(0, 2), (2, 5), (5, 7)], [3, 4]])
def test_every_unit_kind_sums_to_the_text_with_end(units):
    lm = history_lm(4, VOCAB)
    text = "ab é.a "
    rows = surprisals(lm, text, units=units, config=WIDE, final=None if isinstance(units, str) else "end")
    assert sum(r.surprisal for r in rows) == pytest.approx(-brute_exact(lm, text.encode()) / LN2, abs=1e-9)
    assert sum(r.canonical for r in rows) == pytest.approx(-lm.canonical_log_prob(text) / LN2, abs=1e-9)
    assert sum(r.tokens for r in rows) == len(lm.canonical(text))
    if units == "byte":
        assert len(rows) == len(text.encode()) and rows[3].text == "\\xc3" and (rows[3].start, rows[3].end) == (3, 4)
    if units == "char":  # uncorrected: each character's surprisal is -log2 p(c | the text before it)
        assert [r.followed_by for r in rows] == ["any"] * 6 + ["end"]
        assert rows[0].surprisal == pytest.approx(-brute_prefix(lm, b"a") / LN2, abs=1e-9)


def test_regions_are_corrected_where_the_text_goes_on_with_a_boundary():
    lm = history_lm(2, VOCAB)
    text = "ab ba.b"
    spans = [(0, 1), (1, 3), (3, 6), (6, 7)]  # "a" | "b " | "ba." | "b": cuts before "b", "b", "b": none corrected
    rows = surprisals(lm, text, units=spans, config=WIDE)
    assert [r.followed_by for r in rows] == ["any", "any", "any", "boundary"]  # final: boundary (the default)
    spans = [(0, 2), (2, 5), (5, 7)]  # "ab" | " ba" | ".b": cuts before " " and "."
    rows = surprisals(lm, text, units=spans, config=WIDE)
    assert [r.followed_by for r in rows] == ["boundary", "boundary", "boundary"]
    events = brute_events(lm, text, byte_spans(text, spans), WordRules())
    assert [r.surprisal for r in rows] == pytest.approx([-(b - a) / LN2 for a, b in zip(events, events[1:])],
                                                        abs=1e-9)


def test_a_non_ascii_boundary_character_is_explored_on_a_copy():
    lm = history_lm(5, VOCAB)
    rules = WordRules(boundary=" .é")
    text = "ab éa"
    rows = surprisals(lm, text, config=WIDE, rules=rules)
    events = brute_events(lm, text, byte_spans(text, word_spans(text, rules)), rules)
    assert events[1] > logsumexp([brute_prefix(lm, b"ab "), brute_prefix(lm, b"ab."), brute_exact(lm, b"ab")])
    assert [r.surprisal for r in rows] == pytest.approx([-(b - a) / LN2 for a, b in zip(events, events[1:])],
                                                        abs=1e-9)


@pytest.mark.parametrize("beam,prune", [(1, 0.5), (2, 2.0), (3, math.inf)])
def test_narrow_beams_bracket_the_exact_surprisal(beam, prune):
    lm = history_lm(7, VOCAB)
    text = "ab ba. ab"
    rows = surprisals(lm, text, config=StringSearchConfig(beam=beam, prune=prune), wide=0.01)
    spans = byte_spans(text, word_spans(text))
    events = brute_events(lm, text, spans, WordRules())
    for r, (e0, e1) in zip(rows, zip(events, events[1:])):
        exact = -(e1 - e0) / LN2
        assert r.lower - 1e-9 <= exact <= r.upper + 1e-9
        assert r.informative == (r.upper - r.lower <= 0.01)
        assert r.informative or "a wider beam" in r.hint


@pytest.mark.parametrize("beam,prune", [(2, 2.0), (8, 12.0)])
def test_texts_walked_in_lockstep_equal_each_walked_alone(beam, prune):
    """Byte j of every text in one LM call: each text's rows are those of its own walk (the toy LM rounds
    nothing in a batch), its units and context its own; the calls are the longest text's, not their sum."""
    lm = history_lm(5, VOCAB)
    config = StringSearchConfig(beam=beam, prune=prune)
    texts = ["ab ba. ab", "a", "b ab", "ab. é ab"]
    units = ["word", "char", [1, 3], "byte"]
    contexts = ["", "ab", "", "b"]
    alone, calls_alone = [], 0
    for t, u, c in zip(texts, units, contexts):
        lm.clear_cache()
        lm.stats.reset()
        alone.append(surprisals(lm, t, units=u, context=c, config=config))
        calls_alone += lm.stats.calls
    lm.clear_cache()
    lm.stats.reset()
    many = surprisals_many(lm, texts, units=units, contexts=contexts, config=config)
    assert [[r.to_dict() for r in rows] for rows in many] == [[r.to_dict() for r in rows] for rows in alone]
    assert lm.stats.calls <= len(texts[3].encode()) + 4  # the longest walk's bytes, the contexts, the canonical
    assert canonical_surprisals_many(lm, texts, units=units, contexts=contexts) == \
        [[r.canonical for r in rows] for rows in alone]
    assert canonical_surprisals(lm, texts[0]) == [r.canonical for r in alone[0]]
    assert calls_alone > lm.stats.calls


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=7), st.sampled_from([0.01, 0.3, 0.9]))
def test_lazy_extension_keeps_the_canonical_path_and_brackets_the_exact_surprisal(seed, text, share):
    """A prefix holding less than ``share`` of the text's mass at its offset is not run, but the canonical
    path always is: every event keeps at least the canonical tokens' mass (a finite estimate, never the
    "no mass" of a word end that no run prefix reaches), and the brackets still hold the exact figure."""
    lm = history_lm(seed, VOCAB)
    config = StringSearchConfig(beam=2, prune=3.0, extend_threshold=share)
    rows = surprisals(lm, text, config=config, wide=0.01)
    events = brute_events(lm, text, byte_spans(text, word_spans(text)), WordRules())
    for r, (e0, e1) in zip(rows, zip(events, events[1:])):
        exact = -(e1 - e0) / LN2
        assert math.isfinite(r.surprisal) and r.lower - 1e-9 <= exact <= r.upper + 1e-9
    # the estimates telescope to -log2 of the mass found of (text, end), at least the canonical tokens' mass
    row = lm.state(lm.prefix_ids() + tuple(lm.canonical(text))).log_probs.double()
    end = torch.logsumexp(row[[t for t, surface in enumerate(VOCAB.surfaces) if surface is None]], 0)
    assert sum(r.surprisal for r in rows) <= sum(r.canonical for r in rows) - float(end) / LN2 + 1e-6


def test_a_failing_item_leaves_the_others_rows():
    lm = history_lm(3, VOCAB)
    texts = ["ab ba", "ab c", "b a"]
    out = surprisal_batch(lm, texts, config=WIDE)
    assert isinstance(out[1], DeadEndError) and "unit 1 (' c'" in str(out[1])
    for i in (0, 2):
        assert [r.to_dict() for r in out[i]] == [r.to_dict() for r in surprisals(lm, texts[i], config=WIDE)]
    with pytest.raises(DeadEndError, match=r"item 1: unit 1 \(' c'.*no token spells byte 0x63"):
        surprisals_many(lm, texts, config=WIDE)
    with pytest.raises(ValueError, match="item 2: the text is empty"):
        surprisals_many(lm, ["ab", "b", ""])
    with pytest.raises(ValueError, match="3 texts but 2 contexts"):
        surprisals_many(lm, texts, contexts=["", ""])
    with pytest.raises(ValueError, match="3 texts but 2 unit specifications"):
        surprisals_many(lm, texts, units=["word", "char"])
    assert surprisals_many(lm, []) == []


def test_word_rules():
    assert word_spans("The old man the boat.") == [(0, 3), (3, 7), (7, 11), (11, 15), (15, 20), (20, 21)]
    assert word_spans("  Hi, you!  ") == [(0, 4), (4, 5), (5, 9), (9, 12)]
    assert word_spans("don't man-eating") == [(0, 5), (5, 16)]
    assert word_spans("a boat.", WordRules(split_punctuation=False)) == [(0, 1), (1, 7)]
    assert word_spans("   ") == [(0, 3)]
    with pytest.raises(ValueError, match="both space and punctuation"):
        WordRules(punctuation=" .")


def test_bad_input_is_a_clear_error():
    lm = history_lm(3, VOCAB)
    with pytest.raises(ValueError, match="the text is empty"):
        surprisals(lm, "")
    with pytest.raises(ValueError, match="units must be one of"):
        surprisals(lm, "ab", units="sentence")
    with pytest.raises(ValueError, match="no regions"):
        surprisals(lm, "ab", units=[])
    with pytest.raises(ValueError, match=r"characters 2..3 \(' '\) are in no region \(a gap before region 1\)"):
        region_spans("ab ba", [(0, 2), (3, 5)])
    with pytest.raises(ValueError, match="region 1 .* overlaps the one before"):
        region_spans("ab ba", [(0, 3), (2, 5)])
    with pytest.raises(ValueError, match=r"characters 4..5 \('a'\) are in no region"):
        region_spans("ab ba", [(0, 2), (2, 4)])
    with pytest.raises(ValueError, match="past the text"):
        region_spans("ab ba", [(0, 2), (2, 6)])
    with pytest.raises(ValueError, match="empty or reversed"):
        region_spans("ab ba", [(0, 0), (0, 5)])
    with pytest.raises(ValueError, match="cuts must increase"):
        region_spans("ab ba", [3, 2])
    with pytest.raises(ValueError, match="outside the text"):
        region_spans("ab ba", [9])
    assert region_spans("ab ba", [0, 2, 5]) == region_spans("ab ba", [2]) == [(0, 2), (2, 5)]
    with pytest.raises(DeadEndError, match=r"unit 1 \(' c'.*no token spells byte 0x63"):
        surprisals(lm, "ab c", config=WIDE)


@pytest.mark.slow
def test_smollm2_garden_path(smollm2):
    """The issue's example: the word-end correction moves " the" up and " boat" down (" old" no longer counts
    " older"); "The", a single token whose continuations all start with a space or punctuation, is canonical."""
    text = "The old man the boat."
    rows = surprisals(smollm2, text, final="end")
    plain = surprisals(smollm2, text, word_end=False, final="end")
    by = {r.text: r for r in rows}
    assert [r.text for r in rows] == ["The", " old", " man", " the", " boat", "."]
    assert abs(by["The"].surprisal - by["The"].canonical) < 0.05 and by["The"].informative
    assert by[" the"].surprisal > plain[3].surprisal + 1.5  # about 13.7 -> 15.7 bits
    assert by[" boat"].surprisal < plain[4].surprisal - 1.5  # about 16.7 -> 14.4 bits
    assert not by[" boat"].informative and "a wider beam" in by[" boat"].hint
    # the chain rule: both sum to -log2 P(text, end) (the end is scored by the last unit either way)
    assert sum(r.surprisal for r in rows) == pytest.approx(sum(r.surprisal for r in plain), abs=1e-6)
    # in lockstep with other sentences: the same rows up to float32 rounding of a batched forward
    many = surprisals_many(smollm2, [text, "The horse raced past the barn fell.", "Hi."], final="end")
    assert [r.text for r in many[0]] == [r.text for r in rows]
    for one, other in zip(rows, many[0]):
        assert other.surprisal == pytest.approx(one.surprisal, abs=1e-3)
        assert other.canonical == pytest.approx(one.canonical, abs=1e-3)


@pytest.mark.parametrize("units", ["word", "char"])
def test_the_estimates_sum_to_the_estimate_of_the_text_without_the_rounding_tolerance(monkeypatch, units):
    """Issue 50: each estimate carried the rounding tolerance (4e-4 nats per sentence on SmolLM2), so the units
    summed to -log2 of the floor, not of the estimate P^(text, end); the brackets still carry it."""
    import ppl_tok.strings.certified

    monkeypatch.setattr(ppl_tok.strings.certified, "tolerance", lambda *a: 1e-3)  # what the beam's brackets read
    lm = history_lm(4, VOCAB)
    text = "ab é.a b"
    rows = surprisals(lm, text, units=units, config=WIDE, final="end")  # the sum is P(text, end)
    assert sum(r.surprisal for r in rows) == pytest.approx(-brute_exact(lm, text.encode()) / LN2, abs=1e-9)
    assert all(r.lower < r.surprisal < r.upper for r in rows)
