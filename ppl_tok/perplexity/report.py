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
  ratio of sums recomputed; ``resamples``, ``seed``, 95 %:
  :func:`ppl_tok.common.bootstrap.bootstrap_ratio`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ppl_tok.common.bootstrap import bootstrap_ratio
from ppl_tok.perplexity.metrics import LN2, figures
from ppl_tok.scorings import ALIASES, DOCUMENT, SCORINGS, names, scoring as find_scoring
from ppl_tok.strings.marginal import token_cuts
from ppl_tok.scorings.beam import SPAN_GAIN_VERSION
from ppl_tok.scorings.results import DocumentScore


def corpus_summary(scores: Sequence[DocumentScore], scoring: str, *, resamples: int = 2_000,
                   seed: int = 0) -> dict[str, Any]:
    """The corpus figures of ``scores`` (see the module docstring).

    The certified figures (``certified``, ``certified_gain_bits_per_byte``,
    ``floor_to_estimate_gap_bits_per_byte``) are reported only for a scoring that
    gives a certified floor (:attr:`ppl_tok.scorings.Scoring.floor`) and only when
    every document holds one; ``bits_per_byte_floor`` only for a scoring with a
    certified ceiling, every one finite.

    :raises ValueError: ``scoring`` is not a document-level scoring (:mod:`ppl_tok.scorings`).
    """
    entry = find_scoring(scoring, DOCUMENT)
    if not scores:
        raise ValueError("no documents scored yet")
    nb = [s.n_bytes for s in scores]
    nw = [s.n_words for s in scores]
    out: dict[str, Any] = {"scoring": entry.name, "documents": len(scores), "bytes": sum(nb), "words": sum(nw),
                           "tokens": sum(s.n_tokens for s in scores),
                           "canonical": figures([s.canonical for s in scores], nb, nw),
                           "forwards_per_byte": sum(s.forwards for s in scores) / sum(nb),
                           "canonical_forwards_per_byte": sum(s.canonical_forwards for s in scores) / sum(nb)}
    out.update(figures([s.log_likelihood for s in scores], nb, nw))
    if entry.baseline:  # its figure is the canonical one: no gain
        return out
    lowers = [s.lower for s in scores]
    certified = entry.floor and all(lo is not None for lo in lowers)
    if certified:
        ceiling = figures(lowers, nb, nw)
        out["certified"] = {"bits_per_byte_ceiling": ceiling["bits_per_byte"],
                            "byte_perplexity_ceiling": ceiling["byte_perplexity"],
                            "word_perplexity_ceiling": ceiling["word_perplexity"],
                            "log_likelihood_floor": ceiling["log_likelihood"]}
        uppers = [s.upper for s in scores]
        if entry.ceiling and all(u is not None and math.isfinite(u) for u in uppers):
            out["certified"]["bits_per_byte_floor"] = figures([min(u, 0.0) for u in uppers], nb, nw)["bits_per_byte"]
    den = [b * LN2 for b in nb]
    out["bootstrap"] = {"resamples": resamples, "seed": seed}  # the intervals below repeat with these
    out["gain_bits_per_byte"] = bootstrap_ratio([s.log_likelihood - s.canonical for s in scores], den,
                                                resamples=resamples, seed=seed)._asdict()
    if certified:
        out["certified_gain_bits_per_byte"] = bootstrap_ratio([lo - s.canonical for lo, s in zip(lowers, scores)],
                                                              den, resamples=resamples, seed=seed)._asdict()
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


def read_scores(folder: str | Path) -> tuple[dict[str, Any], list[DocumentScore]]:
    """The settings and document scores of a run folder, read without its lock (a run may be appending)."""
    from ppl_tok.perplexity.store import PerplexityStore

    folder = Path(folder)
    settings = PerplexityStore.read_settings(folder)
    records = PerplexityStore.read_records(folder / PerplexityStore.records_file)
    return settings, sorted((DocumentScore.from_record(r) for r in records), key=lambda s: s.index)


SPAN_KINDS = ("non-ASCII", "digits", "whitespace", "punctuation", "first word", "rare word", "word")


def span_kind(text: bytes, start: int, end: int, canonical_cuts: Collection[int] | None = None) -> str:
    """The kind of a span of ``text``: the first of SPAN_KINDS that applies.

    non-ASCII (a byte >= 0x80), digits, whitespace (a run of two or more whitespace
    bytes, or whitespace alone), punctuation, the document's first word (the span
    starts at byte 0, right after BOS), a rare word (the canonical tokenization cuts
    the span: it is not one token of the vocabulary; needs ``canonical_cuts``, the
    offsets where canonical tokens start), else a word (one canonical token).
    """
    piece = text[start:end]
    if any(b >= 0x80 for b in piece):
        return "non-ASCII"
    if any(chr(b).isdigit() for b in piece):
        return "digits"
    if b"  " in piece or b"\n\n" in piece or not piece.strip():
        return "whitespace"
    if any(not chr(b).isalnum() and not chr(b).isspace() for b in piece):
        return "punctuation"
    if start == 0:
        return "first word"
    if canonical_cuts is not None and any(start < c < end for c in canonical_cuts):
        return "rare word"
    return "word"


def span_shares(scores: Sequence[DocumentScore], texts: dict[int, str]) -> dict[str, Any]:
    """Where the best non-canonical tokenization departs from the canonical one, by kind of span.

    For each document with ``best_spans`` (records of ``beam`` runs): its best
    tokenization's gain over canonical (nats) is split equally over the spans where
    the two differ, and summed by :func:`span_kind`. A proxy for where the
    off-canonical mass sits: it counts the single best alternative, not all of them.
    """
    gain = dict.fromkeys(SPAN_KINDS, 0.0)
    docs = dict.fromkeys(SPAN_KINDS, 0)
    counted = 0
    for s in scores:
        spans = s.extra.get("best_spans")
        if spans is None or s.index not in texts:
            continue
        counted += 1
        data = texts[s.index].encode("utf-8")
        kinds = [span_kind(data, a, b) for a, b in spans]
        for k in set(kinds):
            docs[k] += 1
        for k in kinds:
            gain[k] += s.extra.get("best_gain", 0.0) / len(kinds)
    total = sum(gain.values())
    departing = sum(1 for s in scores if s.extra.get("best_spans"))
    return {"documents": counted, "documents_departing": departing, "documents_with_kind": docs,
            "gain_nats": gain, "gain_share": {k: (v / total if total > 0 else 0.0) for k, v in gain.items()}}


def span_gain_shares(scores: Sequence[DocumentScore], texts: dict[int, str], vocab: Any = None) -> dict[str, Any]:
    """Where the gain over canonical sits, by kind of span, from the records' ``span_gain`` (all found mass).

    Each document's gain (nats) is split over the byte spans where its found
    tokenizations depart from the canonical one, in proportion to the
    off-canonical mass on each span (:func:`ppl_tok.scorings.beam.marginal_scores`);
    the spans are classified by :func:`span_kind` (rare words only with ``vocab``,
    the model's vocabulary, whose canonical tokenization says which words are one
    token) and summed over documents.
    ``rest`` is the gain on spans too small to record; ``single_span_share`` the
    share of the gain in tokenizations that depart on one span only (the rest is
    split equally over the spans of multi-span tokenizations).
    """
    gain = dict.fromkeys(SPAN_KINDS, 0.0)
    docs = dict.fromkeys(SPAN_KINDS, 0)
    counted, rest, single = 0, 0.0, 0.0
    for s in scores:
        record = s.extra.get("span_gain")
        if record is None or s.index not in texts:
            continue
        if record.get("version") != SPAN_GAIN_VERSION:
            raise ValueError(f"document {s.index}: span_gain version {record.get('version')!r}, this build reads "
                             f"{SPAN_GAIN_VERSION}")
        counted += 1
        data = texts[s.index].encode("utf-8")
        cuts = None if vocab is None else set(token_cuts(vocab, vocab.encode(texts[s.index])))
        seen = set()
        for a, b, nats in record["spans"]:
            kind = span_kind(data, a, b, cuts)
            gain[kind] += nats
            seen.add(kind)
        for k in seen:
            docs[k] += 1
        rest += record["rest"]
        single += record["single_span"]
    total = sum(gain.values()) + rest
    return {"documents": counted, "documents_with_kind": docs, "gain_nats": gain, "rest_nats": rest,
            "gain_share": {k: (v / total if total > 0 else 0.0) for k, v in gain.items()},
            "rest_share": rest / total if total > 0 else 0.0,
            "single_span_share": single / total if total > 0 else 0.0}


def plot_span_shares(shares: dict[str, Any], title: str, png: str | Path) -> None:
    """A bar chart of :func:`span_gain_shares`' share of the gain by kind of span."""
    from ppl_tok.common.plotting import pyplot

    plt = pyplot()

    kinds = list(SPAN_KINDS) + ["(small spans)"]
    values = [shares["gain_share"][k] for k in SPAN_KINDS] + [shares["rest_share"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.barh(kinds[::-1], [100 * v for v in values[::-1]])
    ax.set_xlabel("share of the marginal's gain over canonical (%)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def study_report(folder: str | Path, *, resamples: int = 10_000, seed: int = 0, png: str | Path | None = None,
                 spans_png: str | Path | None = None, vocab: Any = None) -> dict[str, Any]:
    """:func:`corpus_summary` of a run folder, plus the distribution of per-document gains and the gain by length.

    ``png``: plot the per-document gain (bits per byte) against the document's length;
    ``spans_png``: plot the share of the gain by kind of span (records with ``span_gain``);
    ``vocab``: the model's vocabulary, to tell rare words from words (:func:`span_kind`).
    """
    settings, scores = read_scores(folder)
    out = corpus_summary(scores, settings["scoring"], resamples=resamples, seed=seed)
    out["settings"] = settings
    if find_scoring(settings["scoring"], DOCUMENT).baseline:
        return out
    gains = np.array([(s.log_likelihood - s.canonical) / (LN2 * s.n_bytes) for s in scores])
    nats = np.array([s.log_likelihood - s.canonical for s in scores])
    lengths = np.array([s.n_bytes for s in scores])
    out["per_document_gain_bits_per_byte"] = {q: float(np.quantile(gains, v)) for q, v in
                                              (("min", 0), ("median", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1))}
    out["per_document_gain_nats"] = {q: float(np.quantile(nats, v)) for q, v in
                                     (("median", 0.5), ("p90", 0.9), ("max", 1))}
    out["share_of_gain_in_top_1_percent"] = float(np.sort(nats)[::-1][: max(1, len(nats) // 100)].sum() / nats.sum()) \
        if nats.sum() > 0 else 0.0
    edges = np.quantile(lengths, [0, 1 / 3, 2 / 3, 1])
    by_length = []
    for k, (lo, hi) in enumerate(zip(edges, edges[1:])):
        mask = (lengths >= lo) & ((lengths <= hi) if k == 2 else (lengths < hi))
        if mask.any():
            by_length.append({"bytes": f"{int(lo)}-{int(hi)}", "documents": int(mask.sum()),
                              "gain_bits_per_byte": float(nats[mask].sum() / (LN2 * lengths[mask].sum())),
                              "median_gain_nats": float(np.median(nats[mask]))})
    out["gain_by_length"] = by_length
    if Path(settings.get("source", "")).is_file() and any("best_spans" in s.extra for s in scores):
        texts = folder_texts(settings)
        out["span_kinds"] = span_shares(scores, texts)
        if any("span_gain" in s.extra for s in scores):
            out["span_gain"] = span_gain_shares(scores, texts, vocab)
            if spans_png is not None:
                plot_span_shares(out["span_gain"], f"{settings['model']}: {out['span_gain']['documents']} documents",
                                 spans_png)
    if png is not None:
        from ppl_tok.common.plotting import pyplot

        plt = pyplot()

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter(lengths, np.maximum(gains, 1e-7), s=8)
        ax.set_yscale("log")
        ax.set_xlabel("document length (bytes)")
        ax.set_ylabel("marginal gain over canonical (bits/byte, certified)")
        ax.set_title(f"{settings['model']}: {len(scores)} documents, {settings['scoring']}")
        fig.tight_layout()
        fig.savefig(png, dpi=120)
        plt.close(fig)
    return out


def folder_texts(settings: dict[str, Any]) -> dict[int, str]:
    """The documents of a run folder's corpus, by index (read from the source its ``run.json`` names).

    The source's bytes are checked against the ``corpus_sha256`` the run recorded before any text is
    read: a file changed since the run (a line edited, two lines swapped) is an error, never read.
    """
    import hashlib

    from ppl_tok.perplexity.corpus import read_corpus
    from ppl_tok.perplexity.store import PerplexityStore

    settings = PerplexityStore.complete(settings)  # folders written before ``field`` was recorded
    name = str(settings.get("source", ""))
    if name == "<stdin>":
        raise ValueError("the run read its corpus from standard input, so the report cannot read its texts; "
                         "run it on a file (ppl-tok perplexity FILE) to compare runs or classify spans")
    source = Path(name)
    if not source.is_file():
        raise FileNotFoundError(f"the run's corpus {source} is not there: run the report where the run ran")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    if digest != settings.get("corpus_sha256"):
        raise ValueError(f"the run's corpus {source} has changed since the run (its SHA-256 is {digest[:12]}..., "
                         f"run.json records {str(settings.get('corpus_sha256'))[:12]}...): its documents are not "
                         "those scored; restore the file the run read")
    field = settings["field"]
    corpus = read_corpus(source, field=field, split=settings["split"] if field is None else "none")
    return {d.index: d.text for d in corpus.documents}


def check_comparable(runs: Sequence[tuple[str | Path, dict[str, Any]]]) -> None:
    """A ``ValueError`` naming the first setting of :data:`~ppl_tok.perplexity.store.COMPARABLE` (the LM's
    identity and the window) on which a folder differs from the first, with both values."""
    from ppl_tok.perplexity.store import COMPARABLE, PerplexityStore

    first_folder, first = runs[0][0], PerplexityStore.complete(runs[0][1])
    for folder, settings in runs[1:]:
        settings = PerplexityStore.complete(settings)
        for key in COMPARABLE:
            a, b = first.get(key), settings.get(key)
            if a != b:
                raise ValueError(f"{folder} cannot be compared with {first_folder}: {key} differs ({first_folder} "
                                 f"has {'not recorded' if key not in first else repr(a)}, {folder} has "
                                 f"{'not recorded' if key not in settings else repr(b)}); compare runs of one LM "
                                 "and window (runs of different LMs: ppl-tok perplexity-compare)")


def _scoring_has(settings: dict[str, Any], attribute: str) -> bool:
    """Whether a folder's scoring (``settings["scoring"]``, a registered document-level one) sets ``attribute``
    (:attr:`~ppl_tok.scorings.Scoring.searched_floor`, :attr:`~ppl_tok.scorings.Scoring.estimate_field`)."""
    from ppl_tok.perplexity.store import document_scoring

    found = document_scoring(settings.get("scoring"))
    return found is not None and bool(getattr(found, attribute))


def _names_with(attribute: str) -> str:
    """The document-level scorings that set ``attribute``, for an error line (``beam``; ``a or b``)."""
    return " or ".join(n for n in names(DOCUMENT) if getattr(SCORINGS[n], attribute)) or f"a scoring with {attribute}"


def compare_runs(folders: Sequence[str | Path]) -> dict[str, Any]:
    """Beam runs of one LM on the documents they share (matched by text), against the first folder.

    Every folder must be a run of a scoring whose floor a search found
    (:attr:`~ppl_tok.scorings.Scoring.searched_floor`: ``beam``), and all of one LM (model, backend, dtype, device
    kind, BOS) and window (:func:`check_comparable`); else a ``ValueError`` names the difference. Their corpora
    may differ (a sample of a corpus): documents are matched by text, each source checked against
    its SHA-256 (:func:`folder_texts`).

    For each folder: its model and beam settings, LM token-forwards per byte (and
    against canonical scoring's), the certified gain over its own canonical figure
    in bits per byte (never negative: the beam's floor holds its canonical path),
    the share of the first folder's gain it finds, and the largest shortfall of one
    document's floor below the first folder's (nats; negative: never below).
    The documents are those every folder has scored.
    """
    runs = []
    loaded = [(folder, *read_scores(folder)) for folder in folders]
    for folder, settings, _ in loaded:
        if not _scoring_has(settings, "searched_floor"):
            raise ValueError(f"{folder} is a {settings.get('scoring')} run: --compare compares "
                             f"{_names_with('searched_floor')} runs (use --importance for a "
                             f"{_names_with('estimate_field')} run)")
    check_comparable([(folder, settings) for folder, settings, _ in loaded])
    for folder, settings, scores in loaded:
        texts = folder_texts(settings)
        runs.append((folder, settings, {texts[s.index]: s for s in scores}))
    common = set.intersection(*(set(r[2]) for r in runs))
    if not common:
        raise ValueError("the folders share no scored document")
    texts = sorted(common)
    first = runs[0][2]
    n_bytes = sum(first[t].n_bytes for t in texts)
    canonical_forwards = sum(first[t].canonical_forwards for t in texts)
    base_gain = math.fsum(first[t].lower - first[t].canonical for t in texts)
    rows = []
    for folder, settings, by_text in runs:
        gain = math.fsum(by_text[t].lower - by_text[t].canonical for t in texts)
        forwards = sum(by_text[t].forwards for t in texts)
        rows.append({"folder": str(folder), "model": settings["model"], "beam": settings.get("beam"),
                     "prune": settings.get("prune"), "forwards_per_byte": forwards / n_bytes,
                     "forwards_against_canonical": forwards / canonical_forwards,
                     "certified_gain_bits_per_byte": gain / (LN2 * n_bytes),
                     "share_of_first_gain": gain / base_gain if base_gain > 0 else None,
                     "largest_shortfall_nats": max(first[t].lower - by_text[t].lower for t in texts)})
    return {"documents": len(texts), "bytes": n_bytes, "canonical_forwards_per_byte": canonical_forwards / n_bytes,
            "runs": rows}


def importance_against_floor(importance: str | Path, marginal: str | Path) -> dict[str, Any]:
    """What importance sampling reports (a ``canonical+rest`` folder's ``is_estimate``, its scoring's
    :attr:`~ppl_tok.scorings.Scoring.estimate_field`) next to the beam's floor (a scoring with
    :attr:`~ppl_tok.scorings.Scoring.searched_floor`).

    On the documents both folders scored (matched by text): bits per byte of the
    plain importance estimate, of ``canonical+rest``, of the beam's certified
    floor and of the canonical tokens; and, per document, the importance estimate
    minus the floor (nats): its quantiles and how many documents it puts *below*
    a certified lower bound (where it is demonstrably too low). The two runs must be of one LM and
    window (:func:`check_comparable`): another LM's floor bounds nothing of this one's.
    """
    (is_settings, is_scores), (m_settings, m_scores) = read_scores(importance), read_scores(marginal)
    if not (_scoring_has(is_settings, "estimate_field") and _scoring_has(m_settings, "searched_floor")):
        old = ", ".join(a for a, b in ALIASES[DOCUMENT].items() if SCORINGS[b].searched_floor)
        raise ValueError(f"compare a {_names_with('estimate_field')} folder with a {_names_with('searched_floor')} "
                         f"one{f' (old name: {old})' if old else ''}: {importance} is a {is_settings['scoring']} "
                         f"run, {marginal} a {m_settings['scoring']} run")
    field = find_scoring(is_settings["scoring"], DOCUMENT).estimate_field
    check_comparable([(marginal, m_settings), (importance, is_settings)])
    m_texts, is_texts = folder_texts(m_settings), folder_texts(is_settings)
    by_text = {m_texts[s.index]: s for s in m_scores}
    pairs = [(s, by_text[is_texts[s.index]]) for s in is_scores if is_texts[s.index] in by_text]
    if not pairs:
        raise ValueError("the folders share no scored document")
    n_bytes = sum(m.n_bytes for _, m in pairs)

    def bpb(values: Sequence[float]) -> float:
        return -math.fsum(values) / (LN2 * n_bytes)

    diff = np.array([i.extra[field] - m.lower for i, m in pairs])
    return {"documents": len(pairs), "bytes": n_bytes, "num_samples": is_settings.get("num_samples"),
            "bits_per_byte": {"importance": bpb([i.extra[field] for i, _ in pairs]),
                              "canonical+rest": bpb([i.log_likelihood for i, _ in pairs]),
                              "beam_floor": bpb([m.lower for _, m in pairs]),
                              "canonical": bpb([m.canonical for _, m in pairs])},
            "importance_minus_floor_nats": {q: float(np.quantile(diff, v)) for q, v in
                                            (("min", 0), ("p10", 0.1), ("median", 0.5), ("p90", 0.9), ("max", 1))},
            "documents_below_floor": int((diff < 0).sum()),
            "forwards_per_byte": {"importance": sum(i.forwards for i, _ in pairs) / n_bytes,
                                  "beam": sum(m.forwards for _, m in pairs) / n_bytes}}
