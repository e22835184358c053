"""Log-space sums (ppl_tok.common.logspace)."""

import math

import pytest

from ppl_tok.common.logspace import logsumexp


def test_logsumexp_known_values():
    assert logsumexp([math.log(1.0), math.log(2.0), math.log(3.0)]) == pytest.approx(math.log(6.0), rel=1e-15)
    assert logsumexp([0.0, 0.0]) == pytest.approx(math.log(2.0), rel=1e-15)
    assert logsumexp([-1000.0, -1000.0]) == pytest.approx(-1000.0 + math.log(2.0), rel=1e-15)  # no underflow
    assert logsumexp(iter([5.0])) == 5.0  # any iterable


def test_no_mass_is_minus_infinity_and_nan_is_refused():
    assert logsumexp([]) == -math.inf and logsumexp([-math.inf, -math.inf]) == -math.inf
    assert logsumexp([-math.inf, 2.0]) == 2.0
    with pytest.raises(FloatingPointError, match="NaN"):
        logsumexp([0.0, math.nan])
