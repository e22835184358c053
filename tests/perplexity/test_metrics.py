"""Corpus figures (``ppl_tok/perplexity/metrics.py``): exact values, and lists that do not pair up refused."""

import math

import pytest

from ppl_tok.perplexity.metrics import bits_per_byte, byte_perplexity, word_perplexity


def test_figures_are_the_ratios_of_the_sums():
    lls, n = [-math.log(2) * 3, -math.log(2) * 5], [2, 6]
    assert bits_per_byte(lls, n) == pytest.approx(1.0)
    assert byte_perplexity(lls, n) == pytest.approx(2.0)
    assert word_perplexity(lls, [1, 1]) == pytest.approx(2.0 ** 4)
    assert bits_per_byte([-math.inf, -1.0], [1, 1]) == math.inf


@pytest.mark.parametrize("figure", [bits_per_byte, byte_perplexity, word_perplexity])
def test_lists_of_different_lengths_are_an_error(figure):
    """Issue 37: bits_per_byte took [ll1, ll2] against [n1] and divided by the wrong total."""
    with pytest.raises(ValueError, match="2 log-likelihoods against 1 counts"):
        figure([-1.0, -2.0], [3])
