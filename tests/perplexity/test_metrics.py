"""Corpus figures (``ppl_tok/perplexity/metrics.py``): exact values, and lists that do not pair up refused."""

import math

import pytest

from ppl_tok.perplexity.metrics import bits_per_byte, byte_perplexity, word_perplexity
from ppl_tok.perplexity import (
    count_words,
)
from ppl_tok.perplexity.metrics import figures


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


def test_words_are_counted_as_lm_eval_counts_them():
    assert count_words("a b") == 2
    assert count_words(" a  b\n") == 4  # re.split(r"\s+"): empty pieces at both ends count
    assert count_words("a\tb\nc") == 3


def test_figures_are_ratios_of_sums():
    f = figures([-10.0, -30.0], [10, 30], [2, 6])
    assert f["bits_per_byte"] == pytest.approx(1 / math.log(2))
    assert f["byte_perplexity"] == pytest.approx(math.e)
    assert f["word_perplexity"] == pytest.approx(math.exp(5))


@pytest.mark.parametrize("figure", [bits_per_byte, byte_perplexity, word_perplexity])
@pytest.mark.parametrize("lls, counts, error, message", [
    ([math.nan], [3], ValueError, r"log_likelihoods\[0\] is nan"),
    ([-1.0, 2.0], [3, 4], ValueError, r"log_likelihoods\[1\] is 2.0: a log-likelihood is a number <= 0"),
    ([-1.0, -2.0], [5, -3], ValueError, r"counts\[1\] is -3"),
    ([-1.0], [2.5], TypeError, r"counts\[0\] must be an integer"),
    ([-1.0], [True], TypeError, r"counts\[0\] must be an integer"),
    (["-1"], [3], TypeError, r"log_likelihoods\[0\] must be a real number"),
    ([-1.0], [0], ValueError, "every count is 0"),
    ("-1", [1], TypeError, "log_likelihoods must be a sequence"),
])
def test_inputs_that_are_not_log_likelihoods_and_counts_are_refused(figure, lls, counts, error, message):
    """Issue 50: NaN, positive log-likelihoods and negative byte counts gave a figure."""
    with pytest.raises(error, match=message):
        figure(lls, counts)
