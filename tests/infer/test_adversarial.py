"""Adversarial tokenization: the certified optimum, bound and radius against brute force on toy LMs."""

import hashlib
import math

import pytest
import torch

from ppl_tok import BigramLM, Vocabulary
from ppl_tok.lm.toy import FunctionLM
from ppl_tok.infer.adversarial import adversarial_sample, adversarial_search, brute_force

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb", " ", "x"])
PROMPT = "abababb"


def whole_prefix_lm(seed: int) -> FunctionLM:
    """Each prefix (the whole of it) gets its own seeded random next-token distribution."""
    def fn(prefix):
        digest = hashlib.sha256(repr((seed, prefix)).encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
        return torch.rand(len(VOCAB), generator=g, dtype=torch.float64) ** 3 + 1e-3
    return FunctionLM(VOCAB, fn, bos_id=0)


LMS = [whole_prefix_lm(1), whole_prefix_lm(2), BigramLM.random(VOCAB, seed=3, bos_id=0)]
SETS = [dict(), dict(distance=2), dict(distance=4), dict(extra=1), dict(extra=0), dict(distance=3, extra=1)]


def ball(rows, distance):
    return [f for _, d, f in rows if d <= distance]


@pytest.mark.parametrize("lm", LMS, ids=["whole-prefix-1", "whole-prefix-2", "bigram"])
@pytest.mark.parametrize("kw", SETS, ids=[repr(k) for k in SETS])
@pytest.mark.parametrize("minimize", [False, True])
def test_certified_optimum_equals_brute_force(lm, kw, minimize):
    rows = brute_force(lm, PROMPT, "ab x", prefix="x ", suffix=" ", **kw)
    r = adversarial_search(lm, PROMPT, "ab x", prefix="x ", suffix=" ", minimize=minimize, batch=5, **kw)
    scores = [f for _, _, f in rows]
    assert r.closed and r.size == len(rows) and r.examined == len(rows)
    truth = min(scores) if minimize else max(scores)
    assert r.best_log_prob == pytest.approx(truth, abs=1e-9)
    assert r.bound == pytest.approx(truth, abs=1e-9)
    assert dict((v, f) for v, _, f in rows)[r.best] == pytest.approx(r.best_log_prob, abs=1e-9)
    if minimize:
        assert all(r.bound <= f + 1e-9 for f in scores) and r.pruned == 0
    else:
        assert all(r.bound >= f - 1e-9 for f in scores)  # the bound is never below any tokenization's score
    canon = [f for v, d, f in rows if d == 0]
    assert r.canonical_log_prob == pytest.approx(canon[0], abs=1e-9)


@pytest.mark.parametrize("lm", LMS[:2], ids=["whole-prefix-1", "whole-prefix-2"])
def test_anytime_bracket_holds_at_every_budget(lm):
    rows = brute_force(lm, PROMPT, "abab")
    truth = max(f for _, _, f in rows)
    full = adversarial_search(lm, PROMPT, "abab", batch=4)
    lm.clear_cache()
    for budget in (12, 30, 60, 120, 10 ** 6):
        r = adversarial_search(lm, PROMPT, "abab", batch=4, budget=budget)
        lm.clear_cache()
        assert r.forwards <= budget
        assert r.best_log_prob <= truth + 1e-9 <= r.bound + 2e-9
        if r.closed:
            assert r.best_log_prob == pytest.approx(truth, abs=1e-9) and r.stopped == "closed"
        else:
            assert r.bound == 0.0 and r.stopped == "budget"
        # every member within complete_within is below the best found
        assert all(f <= r.best_log_prob + 1e-9 for f in ball(rows, r.complete_within))
    assert full.closed and full.pruned > 0  # the target-prefix bound cut some members


@pytest.mark.parametrize("lm", LMS, ids=["whole-prefix-1", "whole-prefix-2", "bigram"])
def test_radius_equals_brute_force(lm):
    rows = brute_force(lm, PROMPT, "ab", distance=6)
    canon = [f for _, d, f in rows if d == 0][0]
    for margin in (0.05, 0.5, 1.5, 3.0):
        t = canon + margin
        flips = [d for _, d, f in rows if f > t]
        truth = min(flips) - 1 if flips else None
        r = adversarial_search(lm, PROMPT, "ab", distance=6, threshold=t, stop_above=True, batch=3)
        if truth is None:
            assert r.closed and not r.radius_exact and r.radius == 6 and r.above is None
            assert r.bound <= max(t, r.best_log_prob) + 1e-12
        else:
            assert r.radius_exact and r.radius == truth
            assert r.above_log_prob > t and dict((v, f) for v, _, f in rows)[r.above] == pytest.approx(r.above_log_prob)


def test_sampled_mode_estimates_the_fraction_above():
    lm = LMS[0]
    rows = brute_force(lm, PROMPT, "ab", distance=4)
    t = sorted(f for _, _, f in rows)[len(rows) // 2]
    truth = sum(f > t for _, _, f in rows) / len(rows)
    s = adversarial_sample(lm, PROMPT, "ab", distance=4, samples=2000, threshold=t, seed=0)
    se = math.sqrt(truth * (1 - truth) / 2000)
    assert abs(s.fraction_above - truth) < 4 * se
    assert s.covered and s.best_log_prob == pytest.approx(max(f for _, _, f in rows), abs=1e-9)
    small = adversarial_sample(lm, PROMPT, "ab", samples=3, seed=1)
    assert not small.covered and small.best_log_prob <= max(f for _, _, f in brute_force(lm, PROMPT, "ab")) + 1e-9


@pytest.mark.parametrize("kw, message", [
    (dict(prompt=""), "the prompt is empty"),
    (dict(target="abz"), "target: .*z"),
    (dict(prompt="abzz"), "prompt: .*z"),
    (dict(distance=8), "distance 8 is outside 0..7"),
    (dict(budget=0), "the forward budget must be a positive number"),
    (dict(budget=3), "cannot score even the canonical tokenization"),
    (dict(threshold=-1.0, minimize=True), "maximise, not minimize"),
])
def test_bad_input_is_one_clear_error(kw, message):
    args = dict(prompt=PROMPT, target="ab") | kw
    with pytest.raises(ValueError, match=message):
        adversarial_search(LMS[0], args.pop("prompt"), args.pop("target"), **args)


# ------------------------------------------------------------ every certificate sentence against brute force
def _tokenizations(text: bytes, pieces: dict[bytes, int]) -> list[tuple[int, ...]]:
    """Every tokenization of ``text`` by plain recursion over the vocabulary's byte strings (not the MDD)."""
    if not text:
        return [()]
    return [(pieces[p],) + rest for p in pieces if text.startswith(p) for rest in _tokenizations(text[len(p):], pieces)]


def _edit_distance(a, b) -> int:
    d = {(i, j): i + j if i == 0 or j == 0 else None for i in range(len(a) + 1) for j in range(len(b) + 1)}
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a), len(b)]


def _truth(lm, prompt, target, prefix, suffix, distance):
    """``(v, dist, f)`` of every tokenization within ``distance``, enumerated and scored independently."""
    pieces = {lm.vocab[i]: i for i in range(len(lm.vocab)) if lm.vocab[i]}
    canonical = tuple(lm.vocab.encode(prompt))
    pre, suf, tgt = (tuple(lm.vocab.encode(s)) if s else () for s in (prefix, suffix, target))
    out = []
    for v in _tokenizations(prompt.encode(), pieces):
        dist = _edit_distance(v, canonical)
        if distance is None or dist <= distance:
            f = lm.log_prob(suf + tgt, pre + v) - lm.log_prob(suf, pre + v)
            out.append((v, dist, f))
    return out


_NUMBER = r"(-?\d+\.\d{4})"


def _check_sentence(r, rows) -> None:
    """The sentence ``r`` prints is true of ``rows``: its set, its numbers, 'exact' only when it is."""
    sentence = r.certified_sentence()
    if r.certificate == "none":
        assert sentence.startswith("nothing") and not r.closed
        return
    import re

    within = [f for _, d, f in rows if d <= r.complete_within]
    truth = min(within) if r.minimize else max(within)
    if r.closed:
        assert f"over all {len(rows)} tokenizations in the set" in sentence
    else:
        assert f"the {len(within)} tokenizations within distance {r.complete_within} " in sentence
    assert r.certified_size == len(within)
    if r.certificate == "exact":
        m = re.search(rf"is {_NUMBER}$", sentence)
        assert m and float(m[1]) == pytest.approx(truth, abs=6e-5)
        assert r.certified_low == pytest.approx(truth, abs=1e-9) == r.certified_high
    else:
        assert r.certificate == "at-most" and not r.minimize
        m = re.search(rf"is at most {_NUMBER} .*; the best scored is {_NUMBER}$", sentence)
        assert m and float(m[2]) == pytest.approx(r.certified_low, abs=6e-5)
        assert r.certified_low <= truth + 1e-9 <= r.certified_high + 2e-9  # the interval holds the max
        assert r.certified_high == r.threshold  # only the threshold's pruning leaves an interval
        assert any(f == pytest.approx(r.certified_low, abs=1e-9) for f in within)  # the best scored was scored


@pytest.mark.parametrize("lm", LMS, ids=["whole-prefix-1", "whole-prefix-2", "bigram"])
@pytest.mark.parametrize("distance", [2, 4, None])
def test_every_certificate_sentence_is_true_of_the_brute_force_set(lm, distance):
    """Issue 56: under a threshold, members between the incumbent and it are pruned unscored, so a closed
    search said 'the max is B' of a set whose max was above B. Every sentence, every budget, both directions."""
    kw = dict(prefix="x ", suffix=" ")
    rows = _truth(lm, PROMPT, "ab x", kw["prefix"], kw["suffix"], distance)
    assert len(rows) == len(brute_force(lm, PROMPT, "ab x", distance=distance, **kw))
    best = max(f for _, _, f in rows)
    canon = [f for _, d, f in rows if d == 0][0]
    thresholds = [None, canon - 0.5, (canon + best) / 2, best + 0.01, best + 2.0]
    seen = set()
    for minimize in (False, True):
        for threshold in ([None] if minimize else thresholds):
            for budget in (40, 150, 400, None):
                r = adversarial_search(lm, PROMPT, "ab x", distance=distance, minimize=minimize,
                                       threshold=threshold, budget=budget, batch=3, **kw)
                lm.clear_cache()
                _check_sentence(r, rows)
                seen.add((r.certificate, r.closed))
    assert ("exact", True) in seen and ("at-most", True) in seen  # the threshold's interval was met, and checked
