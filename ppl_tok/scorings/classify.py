"""Classifiers over stored scores (no LM calls), tuning, and paired bootstrap intervals.

Every classifier gives each answer ``a_j`` of a question a score ``s_j`` and
predicts ``argmax_j s_j`` (ties: the first). ``acc`` counts correct
predictions; ``acc_norm`` (lm-eval's length normalisation) uses
``s_j / bytes(a_j)`` instead, ``bytes`` being the UTF-8 length of the answer
without the leading space (lm-eval divides by the character count, equal for
ASCII).

* canonical: ``s_j = log p(v*_j | c)``.
* marginal with k samples: ``s_j = log (1/k) sum_{i<=k} w_ij``, ``w = p / q``.
  Choose-k (Fig. 5): for each run, a random permutation of the N samples of
  every answer; its first k are a uniform k-subset drawn without replacement,
  for every k at once. Mean and standard deviation of the accuracy over runs.
  The test classifier uses the first k stored samples: one draw of k particles.
* mixture (Fig. 6): ``s_j = alpha P_can(j) + (1 - alpha) P_non(j)`` with
  ``P_can(j) = p(v*_j) / sum_l p(v*_l)`` and ``P_non(j) = m_j / sum_l m_l``,
  ``m_j = (1/N) sum_i w_ij 1[v_ij != v*_j]`` (unbiased for the non-canonical
  mass). If no answer has a non-canonical sample, ``P_non = 0``, and for
  ``alpha > 0`` the mixture is the canonical classifier. ``acc_norm``: both parts are
  normalised from per-byte log-scores.
* canonical+rest (new; Rao-Blackwellised, one stratum): ``s_j = log (p(v*_j) + m_j)``,
  the canonical probability computed exactly plus the unbiased non-canonical
  estimate ``m_j`` above. It is unbiased for ``p(a_j | c)`` like the marginal, and
  never below the canonical probability, as the marginal never is: it tells what the
  non-canonical mass the samples found does to the decision once the canonical
  term is not left to chance (where the look-ahead rarely draws ``v*``, the plain
  IS estimate falls below ``p(v*)``). All N samples, nothing tuned.
* exact: the certified bracket ``[l_j, u_j]`` of ``log p(a_j | c)``; the score
  is the bracket midpoint ``(l_j + u_j) / 2`` (``u_j`` if ``l_j = -inf``).
  The decision is certified when ``l_pred > u_j`` for every other answer;
  otherwise the question counts as not certified.
* stratified, most-likely: the stored score.

Tuning: k maximises the mean choose-k accuracy on the tuning split (ties: the
smallest k); alpha maximises the mixture accuracy on a grid (ties: the largest
alpha, the closest to canonical). Both are applied once to the test split.
Differences against canonical get a paired bootstrap interval: questions are
resampled with replacement ``B`` times (seeded) and the 2.5% and 97.5%
quantiles of the mean difference are reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ppl_tok.common.bootstrap import paired_difference
from ppl_tok.infer.importance import canonical_plus_rest
from ppl_tok.common.jsonl_store import decode_log, decode_logs
from ppl_tok.scorings.records import CORE

NEG_INF = -math.inf
DEFAULT_ALPHAS = np.round(np.linspace(0.0, 1.0, 101), 4)


@dataclass
class SplitScores:
    """The stored scores of one split as arrays: Q questions, C answers (padded), N samples.

    Padded answers have score ``-inf`` and ``valid`` False. ``optional`` maps a
    record kind beside the core one to its ``[Q, C]`` arrays, the fields its scoring reads
    (:attr:`ppl_tok.scorings.Scoring.record_arrays`: ``"exact"``: ``lower``, ``upper``,
    ``closed``; ``"stratified"``: ``log_marginal``; ``"most-likely"``: ``log_prob``).
    """

    ids: list[str]
    labels: np.ndarray
    valid: np.ndarray
    nbytes: np.ndarray
    canonical: np.ndarray
    log_w: np.ndarray
    is_canonical: np.ndarray
    optional: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def num_samples(self) -> int:
        return self.log_w.shape[-1]

    def per_byte(self, scores: np.ndarray, norm: bool = True) -> np.ndarray:
        """:func:`per_byte` of ``scores`` over these answers."""
        return per_byte(scores, self, norm)


def _pad(rows: Sequence[Sequence[Any]], width: int, fill: Any, dtype: Any) -> np.ndarray:
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def split_scores(records: Iterable[dict[str, Any]], split: str, size: int,
                 arrays: Mapping[str, Mapping[str, type]]) -> SplitScores:
    """Gather the records of ``split`` (indices ``0..size-1``, all needed) into arrays: the core record's, and
    each other kind's of ``arrays`` (``{kind: {field: float or bool}}``, the fields its scoring reads:
    :func:`~ppl_tok.scorings.registry.record_arrays`) where every question has one.

    :raises ValueError: a question of the split has no ``"is"`` record (the run is unfinished).
    """
    by_kind: dict[str, dict[int, dict[str, Any]]] = {}
    for r in records:
        if r["split"] == split and r["index"] < size:
            by_kind.setdefault(r["kind"], {})[r["index"]] = r
    scored = by_kind.get(CORE, {})
    missing = [i for i in range(size) if i not in scored]
    if missing:
        raise ValueError(f"split {split!r}: {len(missing)} of {size} questions have no scores yet "
                         f"(first missing index {missing[0]}); finish the run with `ppl-tok qa run`")
    rows = [scored[i] for i in range(size)]
    width = max(len(r["choices"]) for r in rows)
    n = len(rows[0]["choices"][0]["log_p"])
    log_w = np.full((size, width, n), NEG_INF)
    is_canon = np.zeros((size, width, n), dtype=bool)
    for i, r in enumerate(rows):
        for j, c in enumerate(r["choices"]):
            log_w[i, j] = np.array(decode_logs(c["log_p"])) - np.array(decode_logs(c["log_q"]))
            is_canon[i, j] = np.array(c["is_canonical"], dtype=bool)
    optional: dict[str, dict[str, np.ndarray]] = {}
    for kind, fields in arrays.items():  # each kind's fields, as its scoring reads them
        got = by_kind.get(kind, {})
        if len(got) == size:
            optional[kind] = {
                name: _pad([[decode_log(c[name]) if dtype is float else c[name] for c in got[i]["choices"]]
                            for i in range(size)], width, NEG_INF if dtype is float else False, dtype)
                for name, dtype in fields.items()}
    return SplitScores(
        ids=[r["id"] for r in rows], labels=np.array([r["label"] for r in rows]),
        valid=_pad([[True] * len(r["choices"]) for r in rows], width, False, bool),
        nbytes=_pad([[max(c["bytes"], 1) for c in r["choices"]] for r in rows], width, 1, float),
        canonical=_pad([decode_logs(c["canonical_log_prob"] for c in r["choices"]) for r in rows], width,
                       NEG_INF, float),
        log_w=log_w, is_canonical=is_canon, optional=optional)


# ------------------------------------------------------------------ scores
def normalise(log_scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``exp(s_j) / sum_l exp(s_l)`` over the valid answers of each row (``[Q, C]``); all-zero rows stay zero."""
    s = np.where(valid, log_scores, -np.inf)
    top = np.max(s, axis=1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - safe)
    total = e.sum(axis=1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def mixture(canonical: np.ndarray, noncanonical: np.ndarray, valid: np.ndarray,
            alphas: Sequence[float] | np.ndarray) -> np.ndarray:
    """``alpha P_can + (1 - alpha) P_non`` for every alpha, from ``[Q, C]`` log-scores: shape ``[Q, C, len(alphas)]``."""
    p_can = normalise(canonical, valid)
    p_non = normalise(noncanonical, valid)
    a = np.asarray(alphas, dtype=float)
    return a * p_can[..., None] + (1 - a) * p_non[..., None]


def per_byte(scores: np.ndarray, t: SplitScores, norm: bool = True) -> np.ndarray:
    """``scores`` (``[Q, C, ...]``), divided by the answers' byte lengths if ``norm``."""
    if not norm:
        return scores
    return scores / t.nbytes.reshape(t.nbytes.shape + (1,) * (scores.ndim - 2))


def _log_mean_exp(log_w: np.ndarray) -> np.ndarray:
    """``log (1/k) sum_i exp(log_w[..., i])`` over the last axis (``-inf`` if all are)."""
    k = log_w.shape[-1]
    top = np.max(log_w, axis=-1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(log_w - safe).sum(-1)) + safe[..., 0]) - math.log(k)


def predictions(scores: np.ndarray, t: SplitScores) -> np.ndarray:
    """Per question: ``argmax_j scores[q, j]`` over valid answers (ties: the first)."""
    return np.argmax(np.where(t.valid, scores, NEG_INF), axis=1)


def correct(scores: np.ndarray, t: SplitScores) -> np.ndarray:
    """Per question: is the prediction (:func:`predictions`) the gold answer?"""
    return predictions(scores, t) == t.labels


def canonical_scores(t: SplitScores, norm: bool = False) -> np.ndarray:
    """``log p(v*_j | c)`` (per byte if ``norm``)."""
    return per_byte(t.canonical, t, norm)


def marginal_scores(t: SplitScores, k: int | None = None, norm: bool = False) -> np.ndarray:
    """``log (1/k) sum_{i<=k} w_ij``: the IS estimate from the first ``k`` samples (default all N)."""
    k = t.num_samples if k is None else k
    if not 1 <= k <= t.num_samples:
        raise ValueError(f"k must be in 1..{t.num_samples}, got {k}")
    return per_byte(_log_mean_exp(t.log_w[..., :k]), t, norm)


def noncanonical_scores(t: SplitScores, norm: bool = False) -> np.ndarray:
    """``log (1/N) sum_i w_ij 1[v_ij != v*_j]``: the unbiased non-canonical mass estimate."""
    return per_byte(_log_mean_exp(np.where(t.is_canonical, NEG_INF, t.log_w)), t, norm)


def canonical_plus_rest_scores(t: SplitScores, norm: bool = False) -> np.ndarray:
    """``log (p(v*_j | c) + (1/N) sum_i w_ij 1[v_ij != v*_j])``: the canonical term exact, the rest sampled
    (:func:`ppl_tok.infer.importance.canonical_plus_rest`, the one formula of the ``canonical+rest`` scoring)."""
    return per_byte(canonical_plus_rest(t.canonical, noncanonical_scores(t)), t, norm)


def mixture_scores(t: SplitScores, alphas: Sequence[float] | np.ndarray, norm: bool = False) -> np.ndarray:
    """``alpha P_can + (1 - alpha) P_non`` for every alpha: shape ``[Q, C, len(alphas)]``
    (:func:`mixture`, the ``mixture`` scoring's formula)."""
    return mixture(canonical_scores(t, norm), noncanonical_scores(t, norm), t.valid, alphas)


def exact_scores(t: SplitScores, norm: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Bracket-midpoint scores and, per question, whether the argmax is certified by the brackets."""
    lower, upper = t.optional["exact"]["lower"], t.optional["exact"]["upper"]
    with np.errstate(invalid="ignore"):
        mid = np.where(np.isfinite(lower), (lower + upper) / 2, upper)
    lo, hi, mid = per_byte(lower, t, norm), per_byte(upper, t, norm), per_byte(mid, t, norm)
    pred = np.argmax(np.where(t.valid, mid, NEG_INF), axis=1)
    rows = np.arange(len(t))
    others = np.where(t.valid, hi, NEG_INF)
    others[rows, pred] = NEG_INF
    certified = lo[rows, pred] > others.max(axis=1)
    return mid, certified


# -------------------------------------------------------------- curves
def choose_k(t: SplitScores, ks: Sequence[int], runs: int, seed: int) -> dict[str, np.ndarray]:
    """Mean and standard deviation over ``runs`` of the k-sample marginal's accuracy, for each k.

    Each run permutes every answer's N samples at random; the first k of a
    permutation are a uniform k-subset without replacement, for every k.
    Returns ``mean``, ``std`` (acc) and ``mean_norm``, ``std_norm`` (acc_norm), each ``[len(ks)]``.
    """
    ks = np.asarray(ks)
    rng = np.random.default_rng(seed)
    acc = np.empty((2, runs, len(ks)))
    counts = np.log(np.arange(1, t.num_samples + 1))
    for r in range(runs):
        order = np.argsort(rng.random(t.log_w.shape), axis=-1)
        lw = np.take_along_axis(t.log_w, order, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            cum = (np.logaddexp.accumulate(lw, axis=-1) - counts)[..., ks - 1]
        for m, norm in enumerate((False, True)):
            s = np.where(t.valid[..., None], per_byte(cum, t, norm), NEG_INF)
            acc[m, r] = (np.argmax(s, axis=1) == t.labels[:, None]).mean(0)
    return {"mean": acc[0].mean(0), "std": acc[0].std(0), "mean_norm": acc[1].mean(0), "std_norm": acc[1].std(0)}


def mixture_curve(t: SplitScores, alphas: Sequence[float] | np.ndarray, norm: bool = False) -> np.ndarray:
    """Accuracy of the mixture classifier for each alpha."""
    s = mixture_scores(t, alphas, norm)
    return (np.argmax(np.where(t.valid[..., None], s, -1.0), axis=1) == t.labels[:, None]).mean(0)


def best_k(ks: Sequence[int], means: np.ndarray) -> int:
    """The smallest k with the highest mean accuracy."""
    return int(np.asarray(ks)[int(np.argmax(means))])


def best_alpha(alphas: Sequence[float] | np.ndarray, accuracy: np.ndarray) -> float:
    """The largest alpha with the highest accuracy."""
    a = np.asarray(alphas)
    top = accuracy.max()
    return float(a[np.flatnonzero(accuracy == top)].max())


def paired_bootstrap(correct_a: np.ndarray, correct_b: np.ndarray, *, resamples: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> dict[str, float]:
    """``mean(a) - mean(b)`` with a paired bootstrap interval at ``level`` over questions
    (:func:`ppl_tok.common.bootstrap.paired_difference`)."""
    diff, low, high = paired_difference(correct_a, correct_b, resamples=resamples, seed=seed, level=level)
    return {"diff": diff, "low": low, "high": high, "within_noise": bool(low <= 0 <= high)}
