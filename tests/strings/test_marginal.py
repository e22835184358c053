"""The LM over strings: the byte-synchronous beam's certified bracket against exact enumeration."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import BigramLM, FunctionLM, NoTokenizationError, Vocabulary
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.strings import StringSearchConfig, string_marginal, string_marginals

PIECES = [None, "a", "b", "ab", "ba", "aba", "bb", "abb", "bab"]
VOCAB = Vocabulary.from_tokens(PIECES)
WIDE = StringSearchConfig(beam=10_000, prune=math.inf)


def _history_lm(seed: int) -> FunctionLM:
    """A non-Markov toy LM: the next token depends on the whole prefix."""
    return FunctionLM(VOCAB, lambda p: [0.0] + [float((7 * len(p) + 3 * sum(p) + t * seed) % 5) for t in range(8)],
                      bos_id=0, log=True)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=10), st.integers(1, 4),
       st.sampled_from([0.5, 2.0, math.inf]), st.sampled_from([None, 1, 5]), st.sampled_from(["", "b", "ab"]),
       st.booleans())
def test_bracket_contains_the_exact_value_and_canonical_is_a_floor(seed, text, beam, prune, budget, context, markov):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0) if markov else _history_lm(seed % 7 + 1)
    exact = exact_marginal(text, lm, context=context)
    result = string_marginal(lm, text, context, StringSearchConfig(beam=beam, prune=prune, budget=budget))
    assert result.lower <= exact.log_marginal + 1e-9 <= result.upper + 2e-9
    assert result.lower <= result.estimate <= result.upper
    assert result.canonical == pytest.approx(exact.canonical_log_prob, abs=1e-12)
    assert result.canonical <= result.lower + 1e-12
    assert result.n_bytes == len(text.encode())
    # cost per byte is flat: at most beam + 1 forwards per byte offset (the +1: the canonical hypothesis)
    assert result.forwards <= (beam + 1) * result.n_bytes


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=10), st.sampled_from(["", "a", "bab"]))
def test_a_wide_beam_is_exact(seed, text, context):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0)
    exact = exact_marginal(text, lm, context=context)
    result = string_marginal(lm, text, context, WIDE)
    assert result.lower == pytest.approx(exact.log_marginal, abs=1e-9)
    assert result.upper == pytest.approx(exact.log_marginal, abs=1e-9)
    assert result.found == exact.count
    assert result.best_log_prob == pytest.approx(float(exact.log_probs[0]), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=9))
def test_departures_split_the_off_canonical_mass_by_span_as_brute_force_does(seed, text):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0)
    exact = exact_marginal(text, lm)
    result = string_marginal(lm, text, config=WIDE)
    # brute force: every non-canonical tokenization's probability, split equally over the spans where it departs
    cuts = lambda toks: {sum(len(VOCAB[t]) for t in toks[:k]) for k in range(len(toks) + 1)}  # noqa: E731
    want: dict[tuple[int, int], float] = {}
    single = 0.0
    for toks, lp in zip(exact.tokenizations, exact.log_probs.tolist()):
        if toks == exact.canonical:
            continue
        a, b = cuts(toks), cuts(exact.canonical)
        shared = sorted(a & b)
        spans = [(lo, hi) for lo, hi in zip(shared, shared[1:]) if any(lo < x < hi for x in a ^ b)]
        for span in spans:
            want[span] = want.get(span, 0.0) + math.exp(lp) / len(spans)
        single += math.exp(lp) if len(spans) == 1 else 0.0
    got = {(a, b): math.exp(m) for a, b, m in result.departures}
    assert got.keys() == want.keys()
    for span, mass in want.items():
        assert got[span] == pytest.approx(mass, rel=1e-9)
    assert math.exp(result.single_span_mass) == pytest.approx(single, rel=1e-9, abs=1e-300)
    off = math.exp(result.lower) - math.exp(result.canonical)
    assert sum(got.values()) == pytest.approx(off, rel=1e-6, abs=1e-12)


def test_a_narrow_beam_is_cheaper_than_enumeration_and_still_certified():
    lm = _history_lm(3)
    text = "abababbabbabab"
    exact = exact_marginal(text, lm)
    narrow = string_marginal(lm, text, config=StringSearchConfig(beam=2, prune=math.inf))
    assert narrow.forwards < exact.forwards
    assert narrow.lower <= exact.log_marginal <= narrow.upper
    assert narrow.width > 0  # something was pruned, and it is accounted for


def test_zero_probability_tokens_carry_no_mass():
    lm = FunctionLM(VOCAB, lambda p: {1: 0.5, 2: 0.5}, bos_id=0)  # only single characters
    result = string_marginal(lm, "abba", config=StringSearchConfig(beam=1))
    assert result.lower == pytest.approx(4 * math.log(0.5), abs=1e-12)
    assert result.upper == pytest.approx(result.lower, abs=1e-12)  # the pruned prefixes all had probability zero


def test_config_is_validated():
    for bad in (dict(beam=0), dict(beam=1.5), dict(beam=True), dict(prune=0), dict(prune=-1.0), dict(prune="1"),
                dict(budget=0), dict(budget=2.5), dict(prune_against="best"), dict(extend_threshold=1.0),
                dict(extend_threshold=-0.1), dict(extend_threshold=True), dict(extend_threshold="0.1"),
                dict(boundary_threshold=1.0), dict(boundary_threshold=-1e-3), dict(boundary_threshold=False),
                dict(rejoin_threshold=1.5), dict(rejoin_threshold="1e-6")):
        with pytest.raises(ValueError, match=next(iter(bad))):
            StringSearchConfig(**bad)
    with pytest.raises(ValueError, match="next-byte walks"):
        string_marginal(BigramLM.random(VOCAB, seed=0, bos_id=0), "ab",
                        config=StringSearchConfig(prune_against="text"))


def test_bad_text_is_a_clear_error():
    lm = BigramLM.random(VOCAB, seed=0, bos_id=0)
    with pytest.raises(ValueError, match="empty string"):
        string_marginal(lm, "")
    with pytest.raises(NoTokenizationError, match="no token covers 'c'"):
        string_marginal(lm, "abc")


@pytest.mark.slow  # SmolLM2, the exact marginal: 97 s in the loaded profile (issue 45)
def test_smollm2_bracket_contains_the_exact_marginal(smollm2):
    exact = exact_marginal(" tongueless", smollm2)  # -24.683 over 597 tokenizations (tests/infer/test_exact.py)
    for beam in (1, 4):
        result = string_marginal(smollm2, " tongueless", config=StringSearchConfig(beam=beam))
        assert result.lower <= exact.log_marginal <= result.upper  # no slack: the tolerance is in the interval
        assert 0 < result.tolerance < 1e-3 and result.estimate - result.lower == pytest.approx(result.tolerance)
        assert result.canonical == pytest.approx(exact.canonical_log_prob, abs=1e-6)
        assert result.canonical <= result.estimate
    wide = string_marginal(smollm2, " tongueless", config=StringSearchConfig(beam=1000, prune=math.inf))
    assert wide.estimate == pytest.approx(exact.log_marginal, abs=1e-6)


def test_the_benchmark_texts():
    from conftest import SHARED
    from benchmarks.strings import SHORT, mid_word_prompts, running_text

    assert [len(t.encode()) for t in SHORT] == [58, 101]
    text = running_text(SHARED / "data", 500)
    assert 496 <= len(text.encode()) <= 500 and text.startswith(" ")
    with pytest.raises(ValueError, match="no hellaswag"):
        running_text(SHARED, 100)
    pairs = mid_word_prompts(SHARED / "data", 20)
    assert len(pairs) == 20 and pairs == mid_word_prompts(SHARED / "data", 20)
    assert all(p[-1].isalpha() and c[0].isalpha() and len(c) == 12 for p, c in pairs)


def test_prompt_boundary_records_resume(tmp_path):
    """The prompt-boundary part appends one line per prompt and resumes from them; other records are refused."""
    import json

    from benchmarks.strings import prompt_boundary
    from ppl_tok.strings.conditional import string_conditional

    lm = BigramLM.random(VOCAB, seed=3, bos_id=0)
    pairs = [("ab", "ba"), ("ba", "bab"), ("a", "bba"), ("bb", "ab")]
    records = tmp_path / "prompts.jsonl"
    fresh = prompt_boundary(lm, pairs, WIDE, progress=False)
    prompt_boundary(lm, pairs[:2], WIDE, records, progress=False)
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["prompt"], r["continuation"]) for r in rows] == pairs[:2]
    r = string_conditional(lm, "ab", "ba", config=WIDE, event="prefix")  # the benchmark's records' event
    assert rows[0]["estimate"] == r.estimate and rows[0]["canonical"] == lm.canonical_log_prob("ba", "ab")
    resumed = prompt_boundary(lm, pairs, WIDE, records, progress=False)
    assert len(records.read_text().splitlines()) == 4 and resumed == fresh
    with pytest.raises(ValueError, match=r"prompts.jsonl:1: holds the prompt 'ab'"):
        prompt_boundary(lm, [("a", "b")], WIDE, records, progress=False)


def test_on_offset_reports_the_sweep_in_byte_order():
    lm = BigramLM.random(VOCAB, seed=3, bos_id=0)
    seen: list[int] = []
    result = string_marginal(lm, "abbab", on_offset=seen.append)
    assert seen[0] == 0 and seen == sorted(set(seen)) and seen[-1] < result.n_bytes
    assert result.lower == string_marginal(lm, "abbab").lower  # watching changes nothing


def test_on_bytes_reports_progress_inside_the_texts_of_a_lockstep_sweep():
    """Each text's bytes up to its last offset before the end, in positive steps as the sweeps go; the results
    are those of an unwatched sweep."""
    lm = BigramLM.random(VOCAB, seed=3, bos_id=0)
    texts, config = ["abbab", "ba", "abbaabab"], StringSearchConfig(beam=2)
    steps: list[int] = []
    watched = string_marginals(lm, texts, config=config, on_bytes=steps.append)
    assert len(steps) > len(texts) and all(n > 0 for n in steps)
    assert sum(steps) == sum(len(t) - 1 for t in texts)  # every offset of these texts is an MDD node
    plain = string_marginals(lm, texts, config=config)
    assert [(r.lower, r.upper, r.found) for r in watched] == [(r.lower, r.upper, r.found) for r in plain]


@pytest.mark.parametrize("beam, prune", [(2, 1.0), (10_000, math.inf)])
def test_marginals_in_lockstep_equal_one_at_a_time_in_fewer_calls(beam, prune):
    """Several strings swept together: each result equals its sweep alone (and the exact value when nothing is
    pruned), and the LM runs one call per step for all of them."""
    texts, contexts = ["abab", "ba", "abbaab", "b"], ["", "ab", "", "a"]
    config = StringSearchConfig(beam=beam, prune=prune)
    lm = _history_lm(3)
    alone = []
    calls = 0
    for t, c in zip(texts, contexts):
        lm.clear_cache()
        lm.stats.reset()
        alone.append(string_marginal(lm, t, c, config))
        calls += lm.stats.calls
    lm.clear_cache()
    lm.stats.reset()
    together = string_marginals(lm, texts, contexts, config)
    assert lm.stats.calls < calls
    for a, b, t, c in zip(alone, together, texts, contexts):
        assert (b.lower, b.upper, b.canonical) == pytest.approx((a.lower, a.upper, a.canonical), abs=1e-12)
        assert (b.found, b.forwards, b.best, b.departures) == (a.found, a.forwards, a.best, a.departures)
        if prune == math.inf:
            assert b.lower == pytest.approx(exact_marginal(t, lm, context=c).log_marginal, abs=1e-9)
    with pytest.raises(ValueError, match="2 texts but 1 contexts"):
        string_marginals(lm, ["a", "b"], [""])



@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=10), st.integers(1, 4),
       st.sampled_from([1e-3, 0.05, 0.3, 0.9]), st.sampled_from(["", "b"]), st.booleans())
def test_lazy_extension_stays_certified_and_costs_no_more(seed, text, beam, share, context, markov):
    """A prefix not extended is pruned: the bracket still holds the exact marginal, the canonical floor
    still holds, and no more prefixes are run than with every kept prefix extended (threshold 0)."""
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0) if markov else _history_lm(seed % 7 + 1)
    exact = exact_marginal(text, lm, context=context)
    lazy = string_marginal(lm, text, context, StringSearchConfig(beam=beam, extend_threshold=share))
    full = string_marginal(lm, text, context, StringSearchConfig(beam=beam))
    assert lazy.lower <= exact.log_marginal + 1e-9 <= lazy.upper + 2e-9
    assert lazy.canonical == pytest.approx(exact.canonical_log_prob, abs=1e-12) and lazy.canonical <= lazy.lower + 1e-12
    assert lazy.forwards <= full.forwards


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=10), st.integers(1, 4), st.booleans())
def test_lazy_extension_at_zero_is_the_beam(seed, text, beam, markov):
    """Threshold 0 is today's beam; a threshold so small that it drops nothing runs the lazy path to the same
    figures and forwards."""
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0) if markov else _history_lm(seed % 7 + 1)
    base = string_marginal(lm, text, "", StringSearchConfig(beam=beam, prune=2.0))
    for share in (0.0, 1e-200):
        r = string_marginal(lm, text, "", StringSearchConfig(beam=beam, prune=2.0, extend_threshold=share))
        assert (r.lower, r.upper, r.forwards, r.found) == (base.lower, base.upper, base.forwards, base.found)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=10), st.integers(1, 4),
       st.sampled_from([0.0, 0.05, 0.3, 0.9]), st.sampled_from([0.0, 1e-3, 0.3]), st.booleans(),
       st.sampled_from([None, 0.0, 1e-6]))
def test_boundary_threshold_stays_certified_and_splits_the_share(seed, text, beam, inside, boundary, markov, rejoin):
    """A share of its own at the canonical boundaries: the bracket still holds the exact marginal and the canonical
    floor; the same share at both is plain lazy extension, figure for figure; zero at both is the beam itself.
    (Running more prefixes need not find more mass: children compete for the beam's places, so nothing
    monotone is asserted between settings.)"""
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0) if markov else _history_lm(seed % 7 + 1)
    exact = exact_marginal(text, lm)
    split = string_marginal(lm, text, "", StringSearchConfig(beam=beam, extend_threshold=inside,
                                                             boundary_threshold=boundary))
    assert split.lower <= exact.log_marginal + 1e-9 <= split.upper + 2e-9
    assert split.canonical == pytest.approx(exact.canonical_log_prob, abs=1e-12)
    same = string_marginal(lm, text, "", StringSearchConfig(beam=beam, extend_threshold=inside,
                                                            boundary_threshold=inside))
    plain = string_marginal(lm, text, "", StringSearchConfig(beam=beam, extend_threshold=inside))
    assert (same.lower, same.upper, same.forwards) == (plain.lower, plain.upper, plain.forwards)
    full = string_marginal(lm, text, "", StringSearchConfig(beam=beam))
    if inside == boundary == 0.0:
        assert (split.lower, split.upper, split.forwards) == (full.lower, full.upper, full.forwards)
    graced = string_marginal(lm, text, "", StringSearchConfig(beam=beam, extend_threshold=inside,
                                                              boundary_threshold=boundary, rejoin_threshold=rejoin))
    assert graced.lower <= exact.log_marginal + 1e-9 <= graced.upper + 2e-9
    assert graced.canonical == pytest.approx(exact.canonical_log_prob, abs=1e-12)
    if rejoin is None:
        assert (graced.lower, graced.upper, graced.forwards) == (split.lower, split.upper, split.forwards)


def test_boundary_threshold_is_the_share_at_the_canonical_boundaries_only():
    config = StringSearchConfig(extend_threshold=0.1, boundary_threshold=3e-5)
    assert config.lazy and config.share(True) == 3e-5 and config.share(False) == 0.1
    assert config.lazy_settings() == {"extend_threshold": 0.1, "boundary_threshold": 3e-5}
    assert StringSearchConfig().lazy_settings() == {"extend_threshold": 0.0} and not StringSearchConfig().lazy
    assert StringSearchConfig(boundary_threshold=0.01).lazy and StringSearchConfig(boundary_threshold=0.0).share(True) == 0
    graced = StringSearchConfig(extend_threshold=0.2, boundary_threshold=1e-3, rejoin_threshold=1e-6)
    assert graced.share(True, rejoining=True) == 1e-6 and graced.share(True) == 1e-3 and graced.share(False, True) == 0.2
    assert graced.lazy_settings()["rejoin_threshold"] == 1e-6 and StringSearchConfig(rejoin_threshold=1e-6).lazy


def test_a_rejoining_prefix_is_one_whose_previous_token_ends_inside_a_canonical_token():
    from ppl_tok.strings.beam import ByteBeam, Hypothesis

    lm = _history_lm(2)
    vocab = lm.vocab
    ids = {vocab[t]: t for t in range(len(vocab)) if vocab[t]}
    beam = ByteBeam(lm, lm.initial(""), StringSearchConfig(), {0: ids[b"ab"], 2: ids[b"a"]})
    root = beam.open[0][0]
    split = root.child(ids[b"a"], -1.0, False)  # "a" ends at 1, inside the canonical "ab"
    back = split.child(ids[b"b"], -2.0, False)  # "b" ends at 2, a canonical boundary: rejoining
    on = root.child(ids[b"ab"], -0.5, True).child(ids[b"a"], -1.0, False)  # from the boundary 2 to 3
    assert beam.rejoins(back, 2) and not beam.rejoins(on, 3) and not beam.rejoins(Hypothesis(0.0, canonical=True), 0)


def test_smollm2_lazy_extension_brackets_the_exact_marginal_in_fewer_forwards(smollm2):
    exact = exact_marginal(" tongueless", smollm2)  # -24.683 over 597 tokenizations
    # today's beam 8 on this string (before lazy extension): 47 forwards, [-24.68316, -22.21484]
    base = string_marginal(smollm2, " tongueless", config=StringSearchConfig(extend_threshold=0.0))
    assert base.forwards == 47
    tol = base.estimate - base.lower  # the rows' rounding tolerance (strings/certified.py) widens both sides
    assert 0 < tol < 1e-3 and base.estimate == pytest.approx(-24.68316, abs=1e-4)
    assert base.upper == pytest.approx(-22.21484 + tol, abs=1e-4)
    forwards = []
    for share in (1e-3, 1e-2, 1e-1):
        r = string_marginal(smollm2, " tongueless", config=StringSearchConfig(extend_threshold=share))
        assert r.lower <= exact.log_marginal + 1e-6 <= r.upper + 2e-6
        assert r.canonical <= r.estimate
        forwards.append(r.forwards)
    assert forwards == sorted(forwards, reverse=True) and forwards[-1] < base.forwards / 4
    split = string_marginal(smollm2, " tongueless", config=StringSearchConfig(extend_threshold=0.1,
                                                                              boundary_threshold=3e-5))
    assert split.lower <= exact.log_marginal + 1e-6 <= split.upper + 2e-6 and split.canonical <= split.estimate
    assert forwards[-1] <= split.forwards < base.forwards
