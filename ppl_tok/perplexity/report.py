"""Corpus figures from document scores: perplexities, certified bounds, the marginal's gain, bootstrap intervals.

For documents with canonical log-likelihoods ``c_d``, the scoring's estimates
``e_d``, certified floors ``l_d <= log p(x_d)`` and ``B_d`` bytes:

* ``bits_per_byte`` (and the two perplexities) of the estimate, and of the
  canonical tokens (:mod:`ppl_tok.perplexity.metrics`);
* ``bits_per_byte_ceiling = -sum(l_d) / (ln 2 sum(B_d))``: certified, the
  marginal's bits per byte are at most this (and at least
  ``bits_per_byte_floor`` from the upper bounds, where every one is finite);
* ``gain = sum(e_d - c_d) / (ln 2 sum(B_d))``: bits per byte the marginal saves
  over canonical scoring; ``certified_gain`` uses ``l_d`` for ``e_d``: the
  marginal saves at least this (a certified statement);
* a bootstrap interval of the gain over documents (resampled with replacement,
  ratio of sums recomputed; ``resamples``, ``seed``, 95 %).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metrics import LN2, figures
from .score import DocumentScore


def bootstrap_ratio(numerators: Sequence[float], denominators: Sequence[float], *, resamples: int = 10_000,
                    seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """``sum(num) / sum(den)`` with a bootstrap interval over the items (resampled with replacement)."""
    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if num.shape != den.shape or num.ndim != 1 or len(num) == 0:
        raise ValueError("the bootstrap needs two equal-length, non-empty lists")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(resamples, len(num)))
    ratios = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return {"value": float(num.sum() / den.sum()), "low": float(low), "high": float(high)}


def corpus_summary(scores: Sequence[DocumentScore], scoring: str, *, resamples: int = 2_000,
                   seed: int = 0) -> dict[str, Any]:
    """The corpus figures of ``scores`` (see the module docstring)."""
    if not scores:
        raise ValueError("no documents scored yet")
    nb = [s.n_bytes for s in scores]
    nw = [s.n_words for s in scores]
    out: dict[str, Any] = {"scoring": scoring, "documents": len(scores), "bytes": sum(nb), "words": sum(nw),
                           "tokens": sum(s.n_tokens for s in scores),
                           "canonical": figures([s.canonical for s in scores], nb, nw),
                           "forwards_per_byte": sum(s.forwards for s in scores) / sum(nb),
                           "canonical_forwards_per_byte": sum(s.canonical_forwards for s in scores) / sum(nb)}
    if scoring == "canonical":
        out.update(figures([s.log_likelihood for s in scores], nb, nw))
        return out
    out.update(figures([s.log_likelihood for s in scores], nb, nw))
    lowers = [s.lower for s in scores]
    ceiling = figures(lowers, nb, nw)
    out["certified"] = {"bits_per_byte_ceiling": ceiling["bits_per_byte"],
                        "byte_perplexity_ceiling": ceiling["byte_perplexity"],
                        "word_perplexity_ceiling": ceiling["word_perplexity"],
                        "log_likelihood_floor": ceiling["log_likelihood"]}
    uppers = [s.upper for s in scores]
    if all(u is not None and math.isfinite(u) for u in uppers):
        out["certified"]["bits_per_byte_floor"] = figures(uppers, nb, nw)["bits_per_byte"]
    den = [b * LN2 for b in nb]
    out["gain_bits_per_byte"] = bootstrap_ratio([s.log_likelihood - s.canonical for s in scores], den,
                                                resamples=resamples, seed=seed)
    out["certified_gain_bits_per_byte"] = bootstrap_ratio([lo - s.canonical for lo, s in zip(lowers, scores)], den,
                                                          resamples=resamples, seed=seed)
    out["floor_to_estimate_gap_bits_per_byte"] = (math.fsum(s.log_likelihood for s in scores)
                                                  - math.fsum(lowers)) / (LN2 * sum(nb))
    return out


def document_row(s: DocumentScore) -> dict[str, Any]:
    """One document's figures (JSON-ready apart from infinities)."""
    row: dict[str, Any] = {"index": s.index, "bytes": s.n_bytes, "words": s.n_words, "tokens": s.n_tokens,
                           "windows": s.windows, "log_likelihood": s.log_likelihood,
                           "bits_per_byte": -s.log_likelihood / (LN2 * s.n_bytes),
                           "canonical_bits_per_byte": -s.canonical / (LN2 * s.n_bytes),
                           "forwards": s.forwards}
    if s.lower is not None:
        row["bits_per_byte_ceiling"] = -s.lower / (LN2 * s.n_bytes)
        row["lower"] = s.lower
    if s.upper is not None:
        row["upper"] = s.upper
    return row
