"""QA classifiers on hand-made scores: choose-k, mixture, exact certification, tuning, bootstrap."""

import math

import numpy as np
import pytest

from ppl_tok.scorings import classify as C

L = math.log


def _table(canonical, log_w, is_canon, labels, nbytes=None, exact=None):
    canonical = np.array(canonical, dtype=float)
    q, c = canonical.shape
    t = C.SplitScores(ids=[str(i) for i in range(q)], labels=np.array(labels), valid=np.ones((q, c), bool),
                      nbytes=np.ones((q, c)) if nbytes is None else np.array(nbytes, float), canonical=canonical,
                      log_w=np.array(log_w, dtype=float), is_canonical=np.array(is_canon, bool))
    if exact is not None:
        lower, upper = (np.array(x, dtype=float) for x in exact)
        t.optional["exact"] = {"lower": lower, "upper": upper, "closed": np.ones((q, c), bool)}
    return t


# One question, two answers; answer 1 is gold. Answer 0's sample weights are (0.1, 0.1, 0.1, 0.7), answer 1's
# (0.2, 0.2, 0.2, 0.2): the full marginal (0.25 against 0.2) picks answer 0, a wrong answer.
W0 = [0.1, 0.1, 0.1, 0.7]
W1 = [0.2, 0.2, 0.2, 0.2]


def _one_question():
    return _table(canonical=[[L(0.1), L(0.2)]], log_w=[[[L(w) for w in W0], [L(w) for w in W1]]],
                  is_canon=[[[1, 1, 1, 0], [1, 1, 1, 1]]], labels=[1])


def test_marginal_uses_the_first_k_samples():
    t = _one_question()
    assert C.marginal_scores(t, 1)[0].tolist() == pytest.approx([L(0.1), L(0.2)])
    assert C.marginal_scores(t)[0].tolist() == pytest.approx([L(0.25), L(0.2)])
    assert C.correct(C.marginal_scores(t, 3), t).tolist() == [True]
    assert C.correct(C.marginal_scores(t), t).tolist() == [False]
    with pytest.raises(ValueError):
        C.marginal_scores(t, 5)


def test_choose_k_matches_the_exact_subset_average():
    t = _one_question()
    curve = C.choose_k(t, [1, 2, 3, 4], runs=4000, seed=0)
    # Answer 0 wins iff its k-subset mean exceeds 0.2, i.e. iff the subset holds the 0.7 sample when k >= 2:
    # probability k / 4; with k = 1, the sample 0.7 (0.25). So accuracy = 1 - k/4 for k = 1..4.
    expected = np.array([0.75, 0.5, 0.25, 0.0])
    assert curve["mean"] == pytest.approx(expected, abs=0.03)
    assert curve["std"][-1] == 0.0
    again = C.choose_k(t, [1, 2, 3, 4], runs=50, seed=1)
    assert np.array_equal(again["mean"], C.choose_k(t, [1, 2, 3, 4], runs=50, seed=1)["mean"])


def test_mixture_ends_are_canonical_and_noncanonical():
    t = _one_question()
    s = C.mixture_scores(t, [1.0, 0.0])
    p_can = np.array([0.1, 0.2]) / 0.3
    assert s[0, :, 0] == pytest.approx(p_can)
    # non-canonical mass: answer 0 has 0.7/4, answer 1 none -> P_non = (1, 0)
    assert s[0, :, 1] == pytest.approx([1.0, 0.0])
    assert C.mixture_curve(t, [1.0, 0.5, 0.0]).tolist() == [1.0, 0.0, 0.0]
    assert C.best_alpha([0.0, 0.5, 1.0], np.array([0.3, 0.3, 0.1])) == 0.5
    assert C.best_k([1, 2, 3], np.array([0.2, 0.4, 0.4])) == 2


def test_canonical_plus_rest_keeps_the_canonical_term_exact():
    t = _one_question()
    # answer 0: 0.1 + 0.7 / 4 (its one non-canonical sample); answer 1: 0.2 + nothing
    assert np.exp(C.canonical_plus_rest_scores(t)[0]).tolist() == pytest.approx([0.275, 0.2])
    assert C.correct(C.canonical_plus_rest_scores(t), t).tolist() == [False]
    assert C.canonical_plus_rest_scores(t, norm=True).tolist() == C.canonical_plus_rest_scores(t).tolist()


def test_canonical_plus_rest_is_unbiased_and_never_below_canonical():
    # three tokenizations of one answer, p = (0.3 canonical, 0.1, 0.05), proposal q = (0.1, 0.6, 0.3): the
    # canonical one is rarely drawn, so the plain IS estimate is often below p(canonical); both are unbiased
    p, q = np.array([0.3, 0.1, 0.05]), np.array([0.1, 0.6, 0.3])
    rng = np.random.default_rng(7)
    reps, n = 4000, 8
    draws = rng.choice(3, size=(reps, 1, n), p=q)
    log_w = np.log(p[draws] / q[draws])
    t = _table(canonical=[[math.log(0.3)]] * reps, log_w=log_w, is_canon=draws == 0, labels=[0] * reps)
    plus, plain = np.exp(C.canonical_plus_rest_scores(t)[:, 0]), np.exp(C.marginal_scores(t)[:, 0])
    for est in (plus, plain):
        assert abs(est.mean() - 0.45) < 4 * est.std() / math.sqrt(reps)
    assert (plus >= 0.3 - 1e-12).all() and (plain < 0.3).mean() > 0.3
    assert plus.std() < plain.std()


def test_acc_norm_divides_by_bytes():
    t = _table(canonical=[[-10.0, -6.0]], log_w=[[[-10.0], [-6.0]]], is_canon=[[[1], [1]]], labels=[0],
               nbytes=[[10, 3]])
    assert C.correct(C.canonical_scores(t), t).tolist() == [False]
    assert C.correct(C.canonical_scores(t, norm=True), t).tolist() == [True]


def test_exact_counts_overlapping_brackets_as_not_certified():
    t = _table(canonical=[[-1.0, -2.0]] * 2, log_w=[[[-1.0], [-2.0]]] * 2, is_canon=[[[1], [1]]] * 2, labels=[0, 0],
               exact=([[-1.0, -3.0], [-1.2, -1.5]], [[-0.9, -2.0], [-1.0, -0.8]]))
    mid, certified = C.exact_scores(t)
    assert mid[0].tolist() == pytest.approx([-0.95, -2.5])
    assert certified.tolist() == [True, False]
    assert mid[1].tolist() == pytest.approx([-1.1, -1.15])  # overlapping: [-1.2, -1.0] and [-1.5, -0.8]
    assert C.correct(mid, t).tolist() == [True, True]


def test_padded_answers_are_never_chosen():
    t = _table(canonical=[[-5.0, -4.0, -math.inf]], log_w=[[[-5.0], [-4.0], [-math.inf]]],
               is_canon=[[[1], [1], [0]]], labels=[1])
    t.valid[0, 2] = False
    assert C.correct(C.canonical_scores(t), t).tolist() == [True]
    assert C.mixture_scores(t, [0.5])[0, 2, 0] == 0.0


def test_paired_bootstrap():
    rng = np.random.default_rng(0)
    a = rng.random(400) < 0.5
    same = C.paired_bootstrap(a, a, resamples=500, seed=0)
    assert same["diff"] == 0 and same["within_noise"]
    better = a | (rng.random(400) < 0.5)
    res = C.paired_bootstrap(better, a, resamples=2000, seed=1)
    assert res["low"] > 0 and not res["within_noise"]
    assert res == C.paired_bootstrap(better, a, resamples=2000, seed=1)
