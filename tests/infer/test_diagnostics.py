"""Importance-weight diagnostics (ppl_tok.infer.diagnostics) on weights whose answers are known in closed form."""

import math

import pytest
import torch

from ppl_tok.infer.diagnostics import (
    certified_error,
    ess,
    log_mean_exp,
    log_standard_error,
    normalized_weights,
    psis_khat,
)

W = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64).log()  # weights 1, 2, 3, 4: pi = 0.1, 0.2, 0.3, 0.4


def test_log_mean_exp():
    assert log_mean_exp(W) == pytest.approx(math.log(2.5), rel=1e-12)
    assert log_mean_exp(W, n=10) == pytest.approx(0.0, abs=1e-12)  # sum 10 over n = 10
    assert log_mean_exp(torch.tensor([])) == -math.inf and log_mean_exp(W, n=0) == -math.inf


def test_normalized_weights_and_kongs_ess():
    assert normalized_weights(W).tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4], rel=1e-12)
    assert ess(W) == pytest.approx(1 / 0.3, rel=1e-12)  # 1 / (0.01 + 0.04 + 0.09 + 0.16)
    assert ess(torch.zeros(7)) == pytest.approx(7.0)
    none = torch.full((3,), -math.inf)
    assert normalized_weights(none).tolist() == [0.0, 0.0, 0.0] and ess(none) == 0.0


def test_log_standard_error():
    # N pi - 1 = -0.6, -0.2, 0.2, 0.6: sum of squares 0.8, over N (N - 1) = 12
    assert log_standard_error(W) == pytest.approx(math.sqrt(0.8 / 12), rel=1e-12)
    assert log_standard_error(torch.zeros(5)) == 0.0  # equal weights: no error
    assert log_standard_error(torch.zeros(1)) == math.inf
    assert log_standard_error(torch.full((4,), -math.inf)) == math.inf


def test_psis_khat_edge_cases():
    assert psis_khat(torch.zeros(64)) == -math.inf  # equal weights: no tail
    assert psis_khat(torch.full((4,), -math.inf)) is None
    assert psis_khat(torch.arange(4.0)) is None  # a tail of fewer than MIN_TAIL weights
    u = torch.rand(4000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert psis_khat(-0.5 * u.log()) == pytest.approx(0.5, abs=0.2)  # Pareto weights u^(-1/2): shape k = 0.5


def test_certified_error():
    assert certified_error(-5.0, None) == math.inf
    assert certified_error(-5.0, (-5.5, -4.0)) == pytest.approx(1.0)
    assert certified_error(-5.0, (-5.0, -5.0)) == 0.0
    assert certified_error(-3.0, (-5.5, -4.0)) == math.inf  # outside the bracket


def test_one_tokenization_of_several_is_flagged_whatever_the_ess():
    """Issue 56: all N draws one tokenization (ESS N, k-hat -inf, standard error 0) of a larger support warns."""
    from ppl_tok.infer.diagnostics import estimate_checks

    collapsed = dict(ess=64.0, log_se=0.0, num_nonzero=64, num_samples=64, certified_lower=-24.05)
    codes = [c for c, _ in estimate_checks(-24.0456, distinct=1, support=2, **collapsed)]
    assert codes == ["one-tokenization"]
    sentence = dict(estimate_checks(-24.0456, distinct=1, support=9, **collapsed))["one-tokenization"]
    assert "all 64 draws are one tokenization of the 9" in sentence
    assert estimate_checks(-24.0456, distinct=1, support=1, **collapsed) == []  # the only tokenization: exact
    assert estimate_checks(-24.0456, distinct=2, support=9, **collapsed) == []  # equal weights, distinct draws
    assert estimate_checks(-24.0456, distinct=1, support=None, **collapsed) == []  # support unknown: no claim
    # a certified bracket that bounds the error by a nat already says how far off it can be
    assert estimate_checks(-24.0456, distinct=1, support=9, bracket=(-24.3, -23.8), **collapsed) == []


def test_an_estimate_below_a_certified_lower_bound_warns_at_any_gap():
    """Issue 56: " deflated" was 2.33 nats low at a gap under 0.9 below its own certified lower bound, silent."""
    from ppl_tok.infer.diagnostics import TOLERANCE, estimate_checks

    base = dict(ess=30.0, log_se=0.1, num_nonzero=64, num_samples=64)
    assert [c for c, _ in estimate_checks(-10.2, certified_lower=-10.0, **base)] == ["below-lower"]
    assert estimate_checks(-10.0 - TOLERANCE / 2, certified_lower=-10.0, **base) == []  # rounding: silent
    assert estimate_checks(-9.9, certified_lower=-10.0, **base) == []
