"""Perplexity figures from log-likelihoods, as lm-eval defines them.

For documents ``d`` with log-likelihood ``ll_d`` (nats), ``B_d`` UTF-8 bytes and
``W_d`` words, the corpus figures are ratios of sums (lm-eval's
``weighted_perplexity`` and ``bits_per_byte`` aggregations)::

    bits_per_byte   = -sum(ll_d) / (ln 2 * sum(B_d))
    byte_perplexity = exp(-sum(ll_d) / sum(B_d))       = 2 ** bits_per_byte
    word_perplexity = exp(-sum(ll_d) / sum(W_d))

and a document's figures are the same with one term. Words are counted as
lm-eval counts them (``Task.count_words``): ``len(re.split(r"\\s+", text))``,
the pieces between runs of whitespace, *including* the empty pieces before
leading and after trailing whitespace (``" a b\\n"`` has 4). That is what
makes ``word_perplexity`` comparable with lm-eval's.

A log-likelihood that is a lower bound (a certified floor) gives an *upper*
bound on bits per byte and on both perplexities, since all three decrease in
``ll``; an upper bound on ``ll`` gives lower bounds.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from ppl_tok.common.counts import count_bytes, count_words  # noqa: F401 (this module's figures' units)

LN2 = math.log(2)


def _ratio(log_likelihoods: Sequence[float], units: Sequence[int]) -> float:
    """``-sum(ll) / sum(units)``, the inputs checked: each ``ll`` a real number ``<= 0`` (``-inf`` allowed: a
    document of probability zero), each count an integer ``>= 0``, their sum positive."""
    for name, value in (("log_likelihoods", log_likelihoods), ("counts", units)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{name} must be a sequence (one entry per document), got {type(value).__name__}")
    if len(log_likelihoods) != len(units):
        raise ValueError(f"{len(log_likelihoods)} log-likelihoods against {len(units)} counts: give one count per "
                         "document, in the same order")
    for i, ll in enumerate(log_likelihoods):
        if isinstance(ll, bool) or not isinstance(ll, numbers.Real):
            raise TypeError(f"log_likelihoods[{i}] must be a real number, got {ll!r}")
        if math.isnan(ll) or ll > 0:
            raise ValueError(f"log_likelihoods[{i}] is {ll}: a log-likelihood is a number <= 0 (the log of a "
                             "probability, in nats); a positive one is a log-loss or a sign error")
    for i, n in enumerate(units):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"counts[{i}] must be an integer (bytes or words of a document), got {n!r}")
        if n < 0:
            raise ValueError(f"counts[{i}] is {n}: a document's bytes or words cannot be negative")
    total = sum(units)
    if total <= 0:
        raise ValueError("no bytes or words to divide by (every count is 0)")
    return -math.fsum(log_likelihoods) / total


def bits_per_byte(log_likelihoods: Sequence[float], n_bytes: Sequence[int]) -> float:
    """``-sum(ll) / (ln 2 * sum(bytes))`` (``inf`` if some ``ll`` is ``-inf``)."""
    return _ratio(log_likelihoods, n_bytes) / LN2


def byte_perplexity(log_likelihoods: Sequence[float], n_bytes: Sequence[int]) -> float:
    """``exp(-sum(ll) / sum(bytes))``."""
    return _exp(_ratio(log_likelihoods, n_bytes))


def word_perplexity(log_likelihoods: Sequence[float], n_words: Sequence[int]) -> float:
    """``exp(-sum(ll) / sum(words))``."""
    return _exp(_ratio(log_likelihoods, n_words))


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def figures(log_likelihoods: Sequence[float], n_bytes: Sequence[int], n_words: Sequence[int]) -> dict[str, float]:
    """The three figures of one document or a corpus, and the summed log-likelihood."""
    return {"log_likelihood": math.fsum(log_likelihoods),
            "bits_per_byte": bits_per_byte(log_likelihoods, n_bytes),
            "byte_perplexity": byte_perplexity(log_likelihoods, n_bytes),
            "word_perplexity": word_perplexity(log_likelihoods, n_words)}
