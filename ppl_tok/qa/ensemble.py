"""A QA classifier from several models with different tokenizers, combined at the string level.

Token scores of SmolLM2 and Gemma-3 cannot be added (different vocabularies), but
each run stores, per answer ``y_j`` of question ``x``, a score of the *string*
``y_j`` given the string ``x`` under its model ``m``:

* ``canonical``: ``log s_m(y_j | x) = log p_m(v*(y_j) | v*(x))``, context and answer each
  canonically tokenized (apart, lm-eval's convention: ``y_j = " " + answer``). This is
  "canonical-style" scoring: model ``m``'s string distribution is replaced by the
  probability of the one tokenization a tokenizer outputs. It is a lower bound on the
  string probability ``p_m(y_j | x)`` summed over tokenizations, and the gap differs
  between models and answers;
* ``exact``: the midpoint of the certified bracket on ``log p_m(y_j | v*(x))``, summed over
  every tokenization of the answer (the context still canonical), where the run stored
  ``--scores exact``.

Combined, for ``M`` runs with weights ``pi_m`` (default ``1/M``):

* the **mixture** (Bayesian model averaging over strings)

      log s_mix(y_j | x) = logsumexp_m (log w_m(x) + log s_m(y_j | x)),
      w_m(x) = pi_m P_m(x) / sum_l pi_l P_l(x),

  where ``P_m(x)`` is model ``m``'s probability of the question
  (:mod:`ppl_tok.qa.contexts`). With the ``canonical`` evidence
  ``P_m(x) = p_m(v*(x))`` this is exactly the posterior predictive of the mixture of the
  joint models ``q_m(x, y) = p_m(v*(x)) s_m(y | x)``. The posterior usually puts almost
  all weight on one model per question (the models' ``log P_m(x)`` differ by nats);
* the **product of experts** over the answer set

      log s_poe(y_j | x) = sum_m pi_m log s_m(y_j | x) - log Z(x),
      Z(x) = sum_l prod_m s_m(y_l | x)^pi_m,

  normalised over the question's answers (a normalisation over all strings is out of
  reach; the argmax does not depend on ``Z``).

``acc`` takes the argmax of the combined score; ``acc_norm`` divides the combined log-score
by the answer's UTF-8 length first (for the product: the unnormalised ``sum_m pi_m log s_m``),
as :mod:`ppl_tok.scorings.classify` does for a single model. A mixture of a model with itself is
the model, and so is a product of a model with itself with weights summing to 1
(``tests/qa/test_ensemble.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ppl_tok.scorings import classify as C
from ppl_tok.qa.contexts import read_context_log_probs
from ppl_tok.qa.report import format_difference, split_scores
from ppl_tok.qa.run import check_settings, optional_scores
from ppl_tok.scorings import classifier_scoring
from ppl_tok.scorings.registry import ensemble_sources
from ppl_tok.qa.store import SCORES_FILE, SETTINGS_FILE, StoreError, read_records, read_settings, run_num_samples

NEG_INF = -math.inf


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    """``log sum exp`` over ``axis`` (``-inf`` where every entry is)."""
    top = np.max(x, axis=axis, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(np.log(np.exp(x - safe).sum(axis=axis, keepdims=True)) + safe, axis=axis)


def _weights(weights: Sequence[float] | None, m: int) -> np.ndarray:
    w = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (m,) or not np.all(np.isfinite(w) & (w > 0)):
        raise ValueError(f"weights must be {m} finite numbers > 0 (one per model), got {list(np.atleast_1d(w))}")
    return w


def member_scores(t: C.SplitScores, source: str) -> np.ndarray:
    """``log s_m(y_j | x)`` of one run, ``[Q, C]``: the scores of the classifier ``source`` (one of
    :func:`~ppl_tok.scorings.registry.ensemble_sources`: its scoring is deterministic,
    untuned, not per byte; :meth:`ppl_tok.scorings.Scoring.classify`): its canonical scores or its exact brackets'
    midpoints."""
    if source not in ensemble_sources():
        raise ValueError(f"source must be one of {', '.join(ensemble_sources())}, got {source!r}")
    found = classifier_scoring(source)
    if found.stored_kind in optional_scores() and found.stored_kind not in t.optional:
        raise ValueError(f"the run has no {found.stored_kind} scores for this split (score it with `qa run --scores "
                         f"{found.stored_kind}`)")
    return found.classify(source, t, False, {})


def posterior_weights(context_log_probs: Sequence[np.ndarray], weights: Sequence[float] | None = None) -> np.ndarray:
    """``w_m(x) = pi_m P_m(x) / sum_l pi_l P_l(x)`` per question: ``[M, Q]``."""
    log_post = np.log(_weights(weights, len(context_log_probs)))[:, None] + np.stack(context_log_probs)
    norm = _logsumexp(log_post, 0)
    if not np.all(np.isfinite(norm)):
        q = int(np.flatnonzero(~np.isfinite(norm))[0])
        raise ValueError(f"question {q} has probability zero under every model: no posterior weights")
    return np.exp(log_post - norm)


def mixture_scores(scores: Sequence[np.ndarray], context_log_probs: Sequence[np.ndarray],
                   weights: Sequence[float] | None = None) -> np.ndarray:
    """``logsumexp_m (log w_m(x) + log s_m(y_j | x))``, ``[Q, C]``."""
    with np.errstate(divide="ignore"):
        log_w = np.log(posterior_weights(context_log_probs, weights))
    return _logsumexp(np.stack(scores) + log_w[:, :, None], 0)


def product_scores(scores: Sequence[np.ndarray], valid: np.ndarray, weights: Sequence[float] | None = None,
                   normalise: bool = True) -> np.ndarray:
    """``sum_m pi_m log s_m(y_j | x)``, minus ``log Z(x)`` over the valid answers if ``normalise``; ``[Q, C]``."""
    w = _weights(weights, len(scores))
    s = np.where(valid, np.tensordot(w, np.stack(scores), axes=1), NEG_INF)
    if not normalise:
        return s
    z = _logsumexp(s, 1)[:, None]
    return np.where(np.isfinite(z), s - np.where(np.isfinite(z), z, 0.0), NEG_INF)


def load_split(folder: str | Path, split: str) -> tuple[dict[str, Any], C.SplitScores]:
    """A run's settings and the stored scores of ``split`` (every question of it must be scored)."""
    folder = Path(folder)
    settings = check_settings(read_settings(folder), str(folder / SETTINGS_FILE))
    size = settings["splits"].get(split)
    if not size:
        raise ValueError(f"{folder}: the run has no {split!r} split (it has {', '.join(settings['splits'])})")
    records = read_records(folder / SCORES_FILE, samples=run_num_samples(settings))
    return settings, split_scores(records, split, size)


def _check_same_questions(runs: Sequence[Path], settings: Sequence[dict[str, Any]],
                          tables: Sequence[C.SplitScores]) -> None:
    """The runs scored the same data files (sha256), question ids, labels and answer counts."""
    for run, st in zip(runs[1:], settings[1:]):
        for key in ("dataset", "data_files", "shuffle_seed"):
            if st.get(key) != settings[0].get(key):
                raise StoreError(f"{run} and {runs[0]} scored other questions ({key}: {st.get(key)!r} against "
                                 f"{settings[0].get(key)!r}); an ensemble needs runs on the same questions")
    first = tables[0]
    for run, t in zip(runs[1:], tables[1:]):
        if t.ids != first.ids:
            where = next((i for i, (a, b) in enumerate(zip(first.ids, t.ids)) if a != b), min(len(t), len(first)))
            raise StoreError(f"{run} and {runs[0]} scored other questions (they differ at question {where}); "
                             "an ensemble needs runs on the same questions")
        if not (np.array_equal(t.labels, first.labels) and np.array_equal(t.valid, first.valid)):
            raise StoreError(f"{run} and {runs[0]} disagree on the labels or answer counts of the same questions")


def evaluate_ensemble(runs: Sequence[str | Path], *, weights: Sequence[float] | None = None,
                      sources: Sequence[str] | None = None, context: str = "canonical", split: str = "test",
                      resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Each run alone, the mixture and the product of experts on ``split``, with paired bootstrap intervals.

    :param runs: two or more run folders that scored the same questions (different models).
    :param weights: the mixture's prior ``pi_m`` and the product's exponents (default ``1/M``).
    :param sources: per run, ``"canonical"`` or ``"exact"`` (default: canonical for all).
    :param context: the mixture's evidence: ``"canonical"`` or ``"prefix"`` (:mod:`ppl_tok.qa.contexts`).
    :returns: ``accuracy`` and ``acc_norm`` per classifier; ``differences`` of the mixture and the
        product against each run alone (``acc`` and ``acc_norm``; :func:`classify.paired_bootstrap`);
        ``mixture_weights`` (the mean posterior weight of each model, and how many questions
        each one dominates, weight > 0.5).
    """
    runs = [Path(r) for r in runs]
    if len(runs) < 2:
        raise ValueError("an ensemble needs at least two run folders")
    sources = list(sources) if sources else ["canonical"] * len(runs)
    if len(sources) != len(runs):
        raise ValueError(f"give one source per run: {len(runs)} runs, {len(sources)} sources")
    weights_arr = _weights(weights, len(runs))
    loaded = [load_split(r, split) for r in runs]
    tables = [t for _, t in loaded]
    _check_same_questions(runs, [st for st, _ in loaded], tables)
    names = [f"{st['model']} ({src})" for (st, _), src in zip(loaded, sources)]
    if len(set(names)) != len(names):
        names = [f"{n} [{r}]" for n, r in zip(names, runs)]
    scores = []
    for run, t, src in zip(runs, tables, sources):
        try:
            scores.append(member_scores(t, src))
        except ValueError as err:
            raise ValueError(f"{run}: {err}") from None
    contexts = [read_context_log_probs(r, context, split, t.ids) for r, t in zip(runs, tables)]
    t0 = tables[0]
    combined = {
        "mixture": (mixture_scores(scores, contexts, weights_arr),) * 2,
        "product": (product_scores(scores, t0.valid, weights_arr),
                    product_scores(scores, t0.valid, weights_arr, normalise=False)),
    }
    classifiers = {name: (s, s) for name, s in zip(names, scores)} | combined
    accuracy, acc_norm, hits = {}, {}, {}
    for name, (s, s_unnormalised) in classifiers.items():
        for norm, out, base in ((False, accuracy, s), (True, acc_norm, s_unnormalised)):
            ok = C.correct(C.per_byte(base, t0, norm), t0)
            out[name] = float(ok.mean())
            hits[name, norm] = ok
    differences = {metric: {f"{c} - {m}": C.paired_bootstrap(hits[c, norm], hits[m, norm], resamples=resamples,
                                                             seed=seed)
                            for c in combined for m in names}
                   for metric, norm in (("acc", False), ("acc_norm", True))}
    post = posterior_weights(contexts, weights_arr)
    return {
        "runs": [str(r) for r in runs], "models": names, "sources": sources, "split": split,
        "questions": len(t0), "weights": weights_arr.tolist(), "context": context,
        "accuracy": accuracy, "acc_norm": acc_norm, "differences": differences,
        "mixture_weights": {n: {"mean": float(post[i].mean()), "dominant": int((post[i] > 0.5).sum())}
                            for i, n in enumerate(names)},
        "resamples": resamples, "seed": seed,
    }


def ensemble_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: one table of accuracies, one of differences with 95% intervals."""
    lines = [f"# String-level ensemble: {' + '.join(report['models'])}", "",
             f"{report['split']} split, {report['questions']} questions; weights {report['weights']}; mixture "
             f"evidence log P_m(question): {report['context']}. Accuracy in percent.", "",
             "| classifier | acc | acc_norm |", "|---|---|---|"]
    lines += [f"| {c} | {100 * a:.1f} | {100 * report['acc_norm'][c]:.1f} |" for c, a in report["accuracy"].items()]
    lines += ["", "| difference | acc [95% CI] | acc_norm [95% CI] |", "|---|---|---|"]
    for d, v in report["differences"]["acc"].items():
        lines.append(f"| {d} | {format_difference(v)} | {format_difference(report['differences']['acc_norm'][d])} |")
    mw = "; ".join(f"{n}: mean {v['mean']:.3f}, dominant on {v['dominant']}" for n, v in report["mixture_weights"].items())
    lines += ["", f"Mixture posterior weights: {mw}.", ""]
    return "\n".join(lines)


__all__ = ["ensemble_markdown", "evaluate_ensemble", "member_scores", "mixture_scores",
           "posterior_weights", "product_scores"]
