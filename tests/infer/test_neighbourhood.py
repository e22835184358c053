"""The sets of tokenizations around canonical: exact counts, rings and uniform draws against brute force."""

from collections import Counter

import pytest

from ppl_tok import Vocabulary, compile_mdd
from ppl_tok.infer.neighbourhood import TokenizationSet, levenshtein

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb"])
LIMITS = [(None, None), (0, None), (1, None), (2, None), (4, None), (None, 0), (None, 1), (2, 1), (3, 0)]


def members(mdd, distance, extra):
    c = mdd.canonical()
    return {v for v in mdd.enumerate()
            if (distance is None or levenshtein(v, c) <= distance) and (extra is None or len(v) <= len(c) + extra)}


def test_levenshtein():
    assert levenshtein((1, 2, 3), (1, 2, 3)) == 0
    assert levenshtein((1, 2), (3,)) == 2  # a split: one substitution and one insertion
    assert levenshtein((), (1, 2)) == 2
    assert levenshtein((1, 2, 3, 4), (2, 3, 5)) == 2


@pytest.mark.parametrize("text", ["ababba", "abababbab", "b"])
@pytest.mark.parametrize("distance, extra", LIMITS)
def test_counts_and_rings_equal_brute_force(text, distance, extra):
    mdd = compile_mdd(text, VOCAB)
    if distance is not None and distance > len(text):
        distance = len(text)  # the largest allowed
    truth = members(mdd, distance, extra)
    space = TokenizationSet(mdd, distance=distance, extra=extra)
    assert space.count() == len(truth)
    walked = list(space.by_distance())
    got = [v for _, v in walked if v is not None]
    assert len(got) == len(set(got)) and set(got) == truth
    c = mdd.canonical()
    assert all(levenshtein(v, c) == r for r, v in walked if v is not None)
    assert [levenshtein(v, c) for v in got] == sorted(levenshtein(v, c) for v in got)  # ring by ring
    for r in range(6):
        assert space.count(ring=r) == sum(levenshtein(v, c) == r for v in truth)
    assert all(space.contains(v) == (v in truth) for v in mdd.enumerate())


def test_uniform_draws():
    mdd = compile_mdd("abababbab", VOCAB)
    space = TokenizationSet(mdd, distance=3)
    truth = members(mdd, 3, None)
    draws = Counter(space.sample(6000, seed=0))
    assert set(draws) == truth
    expected = 6000 / len(truth)
    chi2 = sum((draws[v] - expected) ** 2 / expected for v in truth)
    assert chi2 < len(truth) + 6 * (2 * len(truth)) ** 0.5  # mean df, sd sqrt(2 df)


def test_distance_larger_than_the_text_is_an_error():
    mdd = compile_mdd("abab", VOCAB)
    with pytest.raises(ValueError, match="distance 5 is outside 0..4"):
        TokenizationSet(mdd, distance=5)
    with pytest.raises(ValueError, match="extra tokens must be >= 0"):
        TokenizationSet(mdd, extra=-1)
