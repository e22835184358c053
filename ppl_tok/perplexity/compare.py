"""Comparisons across LMs: runs of several models on one corpus, per scoring, with paired bootstrap intervals.

:mod:`ppl_tok.perplexity.report` reports one LM's runs (and compares runs of
one LM, ``--compare``); this module compares runs of *different* LMs, where
only figures per byte mean the same thing: bits per byte share a denominator
(the document's UTF-8 bytes) whatever the tokenizer, but not the event scored
(docs/perplexity.md, "Fair comparison across tokenizers").

For runs ``r`` of the same corpus and documents ``d`` (``B_d`` bytes) with
log-likelihoods ``l_{r,d}`` (nats) under a scoring:

* each run's ``bits_per_byte = -sum_d l_{r,d} / (ln 2 sum_d B_d)`` (and its
  certified ceiling from the floors, its floor from the ceilings, where the
  scoring records them);
* per pair of models ``(a, b)`` of one scoring, the difference
  ``bpb_a - bpb_b = sum_d (l_{b,d} - l_{a,d}) / (ln 2 sum_d B_d)`` with a paired
  percentile bootstrap interval (:func:`ppl_tok.common.bootstrap.bootstrap_ratio`):
  documents are resampled with their bytes and every run's figure together, with
  the same resamples for every pair and scoring (same seed, same documents).

The runs must be of one corpus: the same source bytes (SHA-256), ``field``,
``split`` and documents (the same indices, each with the same bytes; with the
source at hand, the same texts), and windows that cut no compared document
differently (the same ``window``, or every document in one window in every
run). Anything else is refused with one line naming the setting and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ppl_tok.common.bootstrap import bootstrap_ratio
from ppl_tok.perplexity.metrics import LN2
from ppl_tok.perplexity.report import folder_texts, read_scores
from ppl_tok.scorings import DOCUMENT, scoring as find_scoring

#: What the runs of a comparison share (the corpus and how it was read), besides the documents.
SAME_CORPUS = ("corpus_sha256", "field", "split")


def _load(folders: Sequence[str | Path]) -> list[tuple[str, dict[str, Any], dict[int, Any]]]:
    from ppl_tok.perplexity.store import PerplexityStore

    runs = []
    for folder in folders:
        settings, scores = read_scores(folder)
        if not scores:
            raise ValueError(f"{folder} holds no scored document yet: let its run score some first")
        runs.append((str(folder), PerplexityStore.complete(settings), {s.index: s for s in scores}))
    return runs


def _describe(indices: set[int]) -> str:
    return f"{len(indices)} documents ({min(indices)}..{max(indices)})"


def check_same_corpus(runs: Sequence[tuple[str, dict[str, Any], dict[int, Any]]]) -> None:
    """A one-line ``ValueError`` naming the first way a run differs from the first one (module docstring)."""
    first, s0, docs0 = runs[0]
    seen: dict[tuple[str, str], str] = {}
    for folder, settings, docs in runs:
        key = (settings.get("model"), settings.get("scoring"))
        if key in seen:
            raise ValueError(f"{seen[key]} and {folder} are both {key[1]} runs of {key[0]}: give one run per model "
                             "and scoring (ppl-tok perplexity-report --compare compares runs of one LM)")
        seen[key] = folder
        if folder == first:
            continue
        for name in SAME_CORPUS:
            if settings.get(name) != s0.get(name):
                raise ValueError(f"{folder} cannot be compared with {first}: {name} differs ({first} has "
                                 f"{s0.get(name)!r}, {folder} has {settings.get(name)!r}); compare runs of one corpus, "
                                 "read the same way")
        if set(docs) != set(docs0):
            raise ValueError(f"{folder} cannot be compared with {first}: the documents differ ({first} scored "
                             f"{_describe(set(docs0))}, {folder} {_describe(set(docs))}); run both with the same "
                             "--limit, and let both runs finish")
        for i in sorted(docs):
            if docs[i].n_bytes != docs0[i].n_bytes:
                raise ValueError(f"{folder} cannot be compared with {first}: document {i} has {docs[i].n_bytes} bytes "
                                 f"there, {docs0[i].n_bytes} in {first}: not the same text")
        if settings.get("window") != s0.get("window"):
            split = sorted(i for i in docs if docs[i].windows > 1 or docs0[i].windows > 1)
            if split:
                raise ValueError(f"{folder} cannot be compared with {first}: window differs ({first} has "
                                 f"{s0.get('window')!r}, {folder} has {settings.get('window')!r}) and document "
                                 f"{split[0]} was scored in several windows; give both runs one --window, or shorter "
                                 "documents")


def _check_texts(runs: Sequence[tuple[str, dict[str, Any], dict[int, Any]]]) -> bool:
    """Whether the texts were compared: each run's documents read from its source (checked against its SHA-256)
    are the first run's, where every source is at hand."""
    sources = [settings.get("source", "") for _, settings, _ in runs]
    if not all(s != "<stdin>" and Path(s).is_file() for s in sources):
        return False
    first, s0, docs0 = runs[0]
    texts0 = folder_texts(s0)
    for folder, settings, docs in runs[1:]:
        texts = folder_texts(settings)
        for i in sorted(docs):
            if texts.get(i) != texts0.get(i):
                raise ValueError(f"{folder} cannot be compared with {first}: document {i}'s text differs")
    return True


def _row(folder: str, settings: dict[str, Any], scores: Sequence[Any], n_bytes: int) -> dict[str, Any]:
    entry = find_scoring(settings["scoring"], DOCUMENT)
    row: dict[str, Any] = {"model": settings.get("model"), "scoring": entry.name, "folder": folder,
                           "bits_per_byte": -math.fsum(s.log_likelihood for s in scores) / (LN2 * n_bytes)}
    lowers, uppers = [s.lower for s in scores], [s.upper for s in scores]
    if entry.floor and all(v is not None for v in lowers):
        row["bits_per_byte_ceiling"] = -math.fsum(lowers) / (LN2 * n_bytes)
    if entry.ceiling and all(v is not None and math.isfinite(v) for v in uppers):
        row["bits_per_byte_floor"] = -math.fsum(uppers) / (LN2 * n_bytes)
    row["settings"] = {k: settings.get(k) for k in ("beam", "prune", "budget", "num_samples", "seed", "window",
                                                    "dtype", "device") if k in settings}
    return row


def compare_models(folders: Sequence[str | Path], *, resamples: int = 10_000, seed: int = 0,
                   level: float = 0.95) -> dict[str, Any]:
    """The runs of several LMs on one corpus, per scoring: bits per byte and paired differences (module docstring).

    :param folders: run folders of ``ppl-tok perplexity --out``: one per (model, scoring), at least
        two models among them.
    :raises ValueError: fewer than two models, or runs that are not of one corpus (:func:`check_same_corpus`).
    """
    if resamples < 1:
        raise ValueError(f"resamples must be a positive number, got {resamples}")
    runs = _load(folders)
    models = list(dict.fromkeys(settings.get("model") for _, settings, _ in runs))
    if len(models) < 2:
        raise ValueError(f"every folder is a run of {models[0]}: perplexity-compare compares models; runs of one LM "
                         "compare with ppl-tok perplexity-report DIR --compare DIR2")
    check_same_corpus(runs)
    texts_checked = _check_texts(runs)
    indices = sorted(runs[0][2])
    n_bytes = [runs[0][2][i].n_bytes for i in indices]
    total = sum(n_bytes)
    scorings = list(dict.fromkeys(find_scoring(s["scoring"], DOCUMENT).name for _, s, _ in runs))
    out_scorings = []
    for name in scorings:
        these = [(f, s, d) for f, s, d in runs if find_scoring(s["scoring"], DOCUMENT).name == name]
        rows = [_row(f, s, [d[i] for i in indices], total) for f, s, d in these]
        pairs = []
        for a in range(len(these)):
            for b in range(a + 1, len(these)):
                da, db = these[a][2], these[b][2]
                diff = bootstrap_ratio([db[i].log_likelihood - da[i].log_likelihood for i in indices],
                                       [LN2 * nb for nb in n_bytes], resamples=resamples, seed=seed, level=level)
                pairs.append({"model": rows[a]["model"], "minus": rows[b]["model"],
                              "difference_bits_per_byte": diff.value, "low": diff.low, "high": diff.high})
        out_scorings.append({"scoring": name, "runs": rows, "differences": pairs})
    s0 = runs[0][1]
    return {"documents": len(indices), "bytes": total, "corpus_sha256": s0.get("corpus_sha256"),
            "source": s0.get("source"), "field": s0.get("field"), "split": s0.get("split"),
            "texts_checked": texts_checked, "models": models,
            "bootstrap": {"resamples": resamples, "seed": seed, "level": level,
                          "unit": "documents, resampled jointly across runs"},
            "scorings": out_scorings}


def format_comparison(report: dict[str, Any]) -> list[str]:
    """The text table of :func:`compare_models`: one row per (scoring, model), then the differences."""
    b = report["bootstrap"]
    lines = [f"{report['documents']} documents, {report['bytes']} bytes of {report['source']} "
             f"(sha256 {str(report['corpus_sha256'])[:12]}...); texts "
             f"{'checked' if report['texts_checked'] else 'not checked (source not at hand): bytes per document'}",
             f"{'scoring':<15} {'model':<28} {'bits/byte':>10}  certified"]
    for s in report["scorings"]:
        for r in s["runs"]:
            cert = ""
            if "bits_per_byte_ceiling" in r:
                low = f"{r['bits_per_byte_floor']:.4f}" if "bits_per_byte_floor" in r else "?"
                cert = f"{low} .. {r['bits_per_byte_ceiling']:.4f}"
            lines.append(f"{s['scoring']:<15} {str(r['model']):<28} {r['bits_per_byte']:>10.4f}  {cert}")
    lines.append(f"differences in bits/byte (row model minus the other; {100 * b['level']:g}% paired bootstrap over "
                 f"documents, {b['resamples']} resamples, seed {b['seed']}):")
    for s in report["scorings"]:
        for p in s["differences"]:
            lines.append(f"{s['scoring']:<15} {p['model']} - {p['minus']}: {p['difference_bits_per_byte']:+.4f} "
                         f"({p['low']:+.4f} .. {p['high']:+.4f})")
        if not s["differences"]:
            lines.append(f"{s['scoring']:<15} (one model only: no difference)")
    return lines
