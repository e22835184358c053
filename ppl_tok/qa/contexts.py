"""The probability of each question's context under a QA run's model: the evidence of the Bayesian mixture.

A string-level mixture of models (:mod:`ppl_tok.qa.ensemble`) weighs model ``m`` by
its posterior after reading the question ``x``, ``w_m(x) ∝ pi_m P_m(x)``. This module
computes ``log P_m(x)`` for every question of a run, one of two ways:

* ``"canonical"``: ``log p_m(v*(x) | BOS)``, the canonical tokens of the context (one
  forward per question). This is the evidence that matches the run's stored answer
  scores, which condition on those same tokens: with it the mixture is exactly the
  Bayesian mixture of the joint models ``q_m(x, y) = p_m(v*(x)) p_m(y | v*(x))``.
* ``"prefix"``: the prefix probability ``log P_m(x ⪯ output)`` summed over every
  covering of ``x`` (:class:`ppl_tok.strings.StringState`, the byte-synchronous beam;
  its estimate, with the certified bracket stored beside it). The string's own
  probability, free of the tokenization of ``x``; about ``beam`` forwards per byte.

The values are stored in ``RUN/contexts-<method>/`` (a :class:`ppl_tok.common.jsonl_store.JsonlStore`:
``run.json`` with the run's model, data checksums and the method's settings; one line per
question, appended as computed, so a killed computation resumes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ppl_tok.common.version import __version__
from ppl_tok.common.jsonl_store import JsonlStore, StoreError, decode_log, encode_log
from ppl_tok.lm.base import LanguageModel
from ppl_tok.qa.data import Study
from ppl_tok.qa.run import check_settings
from ppl_tok.qa.store import SETTINGS_FILE, read_settings
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.prefill import BACKOFF, EXACT_PREFILL

#: The ways to compute ``log P_m(context)`` (the module docstring); named here, as the context store's folders and
#: ``qa contexts --method`` name them (no scoring's name: a context method).
CANONICAL_CONTEXT, PREFIX_CONTEXT = METHODS = ("canonical", "prefix")


class ContextStore(JsonlStore):
    """``log P_m(context)`` per question of a QA run: one line ``{split, index, id, log_prob, ...}`` each."""

    records_file = "contexts.jsonl"
    informational = ("ppl_tok_version",)
    what = "context-probability folder"
    record_name = "context record"

    @staticmethod
    def key(record: dict[str, Any]) -> tuple[str, int]:
        return record["split"], record["index"]


def context_folder(run: str | Path, method: str) -> Path:
    """Where the context log-probabilities of ``method`` for the run in ``run`` are stored."""
    if method not in METHODS:
        raise ValueError(f"context method must be one of {', '.join(METHODS)}, got {method!r}")
    return Path(run) / f"contexts-{method}"


def context_settings(run: str | Path, method: str, search: StringSearchConfig = StringSearchConfig()
                     ) -> dict[str, Any]:
    """The store's settings: the run's model and data, the method and (prefix) the beam's settings."""
    run = Path(run)
    st = check_settings(read_settings(run), str(run / SETTINGS_FILE))
    out = {"model": st["model"], "dtype": st.get("dtype"), "dataset": st["dataset"],
           "data_files": st.get("data_files", {}), "method": method, "ppl_tok_version": __version__}
    if method == PREFIX_CONTEXT:
        out.update(beam=search.beam, prune=search.prune)
        out.update({k: v for k, v in (("budget", search.budget), ("prune_against", search.prune_against),
                                      ("prefill_tail", search.prefill_tail),
                                      *search.lazy_settings().items())
                    if v != getattr(StringSearchConfig, k)})  # recorded when they are not the default
        if search.prefill != EXACT_PREFILL:  # stores from before the prefill modes were computed exactly
            out["prefill"] = search.prefill
            out["prefill_backoff"] = BACKOFF  # a store of 0.2.0's longest-token back-off is refused on resume
    return out


def check_study_matches(study: Study, settings: dict[str, Any], where: str) -> None:
    """The study's files are the ones the run scored (same names and sha256), else an error naming them."""
    files = {Path(p).name: sha for p, sha in study.files.items()}
    recorded = settings.get("data_files", {})
    if files != recorded:
        raise StoreError(f"{where}: the run scored data files {recorded}, but --data-dir gives {files}: "
                         "point --data-dir at the data the run was scored on")


#: ``prefix``: the contexts whose canonical heads are prefilled together, in one batched call
HEAD_BATCH = 16


def _heads(lm: LanguageModel, method: str, texts: list[str], search: StringSearchConfig) -> list[Any]:
    """``prefix``: the contexts' canonical heads (:func:`~ppl_tok.strings.prefill.prefill_heads`, one call)."""
    if method != PREFIX_CONTEXT or not texts:
        return [None] * len(texts)
    from ppl_tok.strings.prefill import prefill_heads

    return prefill_heads(lm, [t.encode("utf-8") for t in texts], [""] * len(texts), search)


def _log_prob(lm: LanguageModel, method: str, text: str, search: StringSearchConfig, head: Any = None
              ) -> dict[str, Any]:
    if method == CANONICAL_CONTEXT:
        before = lm.stats.forwards
        return {"log_prob": encode_log(lm.canonical_log_prob(text)), "forwards": lm.stats.forwards - before}
    from ppl_tok.strings import StringState

    state = StringState(lm, "", search, prompt=text, head=head)
    p = state.prefix_log_prob()
    return {"log_prob": encode_log(p.estimate), "lower": encode_log(p.lower), "upper": encode_log(p.upper),
            "forwards": state.forwards, "head_bytes": state.base}


def compute_context_log_probs(run: str | Path, study: Study, lm: LanguageModel, method: str = "canonical", *,
                              splits: Sequence[str] = ("test",), search: StringSearchConfig = StringSearchConfig(),
                              progress: Callable[[int, int], None] | None = None) -> ContextStore:
    """Compute (or resume) ``log P_m(context)`` of every question of ``splits``; returns the closed store.

    :param study: the run's questions (:func:`ppl_tok.qa.data.load_study` with the run's settings).
    :param lm: the run's model.
    :param search: ``prefix``: the byte-synchronous beam and its prefill mode (``canonical-head``:
        ``log P_H(context) = log p(h* | BOS) + log P(tail | h*)``, the coverings of the context
        that start with its canonical head; :mod:`ppl_tok.strings.prefill`).
    :param progress: called with (questions done, questions in all) after each question.

    ``prefix``: the canonical heads of :data:`HEAD_BATCH` questions at a time are prefilled in one
    batched call (each record's ``seconds`` carries an equal share of it); the tails are walked one
    question at a time.
    """
    run = Path(run)
    settings = context_settings(run, method, search)
    check_study_matches(study, settings, str(run / SETTINGS_FILE))
    unknown = [s for s in splits if s not in study.splits]
    if unknown:
        raise ValueError(f"the run has no split {unknown[0]!r} (it has {', '.join(study.splits)})")
    todo = [(s, i, q) for s in splits for i, q in enumerate(study.splits[s])]
    with ContextStore.open(context_folder(run, method), settings) as store:
        done = 0
        for lo in range(0, len(todo), HEAD_BATCH):
            chunk = todo[lo: lo + HEAD_BATCH]
            new = [k for k, (split, i, _) in enumerate(chunk) if not store.has_key((split, i))]
            start = time.perf_counter()
            heads = dict(zip(new, _heads(lm, method, [chunk[k][2].context for k in new], search)))
            share = (time.perf_counter() - start) / max(1, len(new))
            for k, (split, i, q) in enumerate(chunk):
                if k in heads:
                    start = time.perf_counter()
                    row = _log_prob(lm, method, q.context, search, heads[k])
                    store.append([{"split": split, "index": i, "id": q.id, **row}],
                                 timing={"seconds": time.perf_counter() - start + share,
                                         "bytes": len(q.context.encode())})
                done += 1
                if progress is not None:
                    progress(done, len(todo))
        return store


def read_context_log_probs(run: str | Path, method: str, split: str, ids: Sequence[str]) -> np.ndarray:
    """``log P_m(context)`` of the questions ``ids`` (in order) of ``split``, from the run's stored values.

    :raises StoreError: nothing stored, or a question missing (with the command that computes it).
    """
    folder = context_folder(run, method)
    fix = f"compute them with `ppl-tok qa contexts {run} --method {method} --data-dir DATA`"
    if not (folder / ContextStore.settings_file).is_file():
        raise StoreError(f"{folder}: no context log-probabilities ({method}) for this run; {fix}")
    by_index = {r["index"]: r for r in ContextStore.read_records(folder / ContextStore.records_file)
                if r["split"] == split}
    out = np.empty(len(ids))
    for i, qid in enumerate(ids):
        r = by_index.get(i)
        if r is None:
            raise StoreError(f"{folder}: {split} question {i} ({qid!r}) has no context log-probability yet; {fix}")
        if r["id"] != qid:
            raise StoreError(f"{folder}: {split} question {i} is {r['id']!r} there but {qid!r} in the run")
        out[i] = decode_log(r["log_prob"])
    return out


__all__ = ["METHODS", "ContextStore", "compute_context_log_probs", "context_folder", "context_settings",
           "read_context_log_probs"]
