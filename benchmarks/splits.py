"""Where a search's gain sits: its best path's splits against the canonical path, by kind
(``python -m benchmarks perplexity splits PATHS``).

A document's found paths (rows kept with ``bench perplexity --paths``) give its gain over
canonical scoring, ``log sum_{v in F} p(v) - log p(v*)``, and its best path
``argmax_{v in F} p(v)``. Where the best path and the canonical path ``v*`` part and meet
again at a common byte boundary they form a *split*: the byte offset where they part, the
canonical tokens' surfaces and the best path's over the same bytes (``" After"`` against
``" "``, ``"After"``). A split is of kind (the first that holds)

* ``first``: it starts at byte 0, in the first token after BOS;
* ``space``: the best path spells a word's leading space as a token of its own (``" "``,
  ``"After"``);
* ``repeat``: the same canonical tokens are split the same way elsewhere in the path;
* ``single``: any other.

Each document is put in one class, the first that holds of: ``space pattern`` (its best
path has at least two ``space`` splits: one split, learned in context, used again),
``first``, ``repeat``, ``single``, ``none`` (the best path is the canonical one: the gain is
many paths' mass). :func:`split_table` sums the found gain by class and, given another run's
rows on the same documents (a cheaper setting), the gain that run kept in each class: which
kind of gain a rule loses. It also counts the splits that start at a *join* of the
benchmark's documents, the space :func:`~benchmarks.perplexity.bench_documents` puts
between two source items (where a new sentence starts mid-line).

Where the gain of a split is made (:func:`split_costs`, ``--costs``, one forward of each path): with
``d(b) = log p(path[:b]) - log p(v*[:b])`` at a byte boundary ``b`` both paths have, a split from ``s_k``
to its close ``c_k`` has its *own* cost ``d(c_k) - d(s_k)`` (its tokens against the canonical ones over the
same bytes, each after its own history) and an *after* part ``d(s_{k+1}) - d(c_k)`` (the shared tokens up to
the next split, ``s_{K+1}`` the end, scored after the two histories); ``d(s_1) = 0``, so the parts sum to
``log p(path) - log p(v*)``. A local split earns its gain in its own tokens; a split that changes what the
model expects earns it after.

These kinds are observed, not causes: a ``first`` split changes every later row (the first
token after BOS is the one every position attends to), and a ``repeat`` or ``space`` split
of a ``space pattern`` is cheap only after its first use, so the path that wins lies below
the canonical one until then (docs/benchmarks.md, "Which gain the lazy rules lose").
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppl_tok.common.lines import split_lines
from ppl_tok.common.logspace import logsumexp

#: the classes of :func:`document_class`, in the order they are tried
CLASSES = ("space pattern", "first", "repeat", "single", "none")


@dataclass(frozen=True)
class Split:
    """Where a path parts from the canonical one: ``start`` (byte offset) and the surfaces each has there."""

    start: int
    canonical: tuple[bytes, ...]
    path: tuple[bytes, ...]


def splits(canonical: Sequence[int], path: Sequence[int], surfaces: Sequence[bytes | None]) -> list[Split]:
    """The splits of ``path`` against ``canonical`` (two tokenizations of the same bytes), in byte order."""

    def length(t: int) -> int:
        s = surfaces[t]
        if s is None:
            raise ValueError(f"token {t} has no surface: a tokenization of text holds none")
        return len(s)

    out: list[Split] = []
    i = j = 0
    a_end = b_end = 0  # bytes covered by canonical[:i] and path[:j]
    while i < len(canonical) and j < len(path):
        if canonical[i] == path[j] and a_end == b_end:
            a_end += length(canonical[i])
            b_end += length(path[j])
            i, j = i + 1, j + 1
            continue
        start, ai, bj = a_end, i, j
        a_end += length(canonical[i])
        b_end += length(path[j])
        i, j = i + 1, j + 1
        while a_end != b_end:
            if a_end < b_end:
                a_end += length(canonical[i])
                i += 1
            else:
                b_end += length(path[j])
                j += 1
        out.append(Split(start, tuple(surfaces[t] for t in canonical[ai:i]), tuple(surfaces[t] for t in path[bj:j])))
    if i != len(canonical) or j != len(path) or a_end != b_end:
        raise ValueError("the path and the canonical tokenization spell different bytes")
    return out


def split_kinds(found: Sequence[Split]) -> list[str]:
    """Each split's kind (module docstring), in order."""
    seen = Counter((s.canonical, s.path) for s in found)
    return ["first" if s.start == 0 else "space" if s.path[0].isspace() and len(s.path) > 1 else
            "repeat" if seen[s.canonical, s.path] > 1 else "single" for s in found]


def document_class(kinds: Sequence[str]) -> str:
    """The class of a document whose best path has splits of ``kinds`` (:data:`CLASSES`, first that holds)."""
    if sum(k == "space" for k in kinds) >= 2:
        return "space pattern"
    for kind in ("first", "repeat"):
        if kind in kinds:
            return kind
    return "single" if kinds else "none"


def split_costs(lm: Any, canonical: Sequence[int], path: Sequence[int]) -> list[dict[str, Any]]:
    """Each split of ``path`` against ``canonical`` (both after BOS) with its ``own`` and ``after`` parts, nats
    (module docstring): ``[{"start", "own", "after"}]``, in byte order; they sum to ``log p(path) - log p(v*)``."""
    from itertools import accumulate

    found = splits(canonical, path, lm.vocab.surfaces)
    if not found:
        return []
    lps = lm.token_log_probs_after([lm.prefix_ids(), lm.prefix_ids()], [list(canonical), list(path)])
    cum = []
    for tokens, lp in zip((canonical, path), lps):
        ends = accumulate(len(lm.vocab.surfaces[t]) for t in tokens)
        cum.append({0: 0.0, **dict(zip(ends, accumulate(lp)))})
    end = max(cum[0])

    def d(b: int) -> float:
        return cum[1][b] - cum[0][b]

    out = []
    for k, s in enumerate(found):
        close = s.start + sum(map(len, s.canonical))
        following = found[k + 1].start if k + 1 < len(found) else end
        out.append({"start": s.start, "own": d(close) - d(s.start), "after": d(following) - d(close)})
    return out


def read_path_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows kept with ``bench perplexity --paths``: a bench folder (its ``documents.jsonl``) or a JSON Lines file
    of such rows (``.gz``: gzip); each needs ``index``, ``canonical_path`` and ``paths``."""
    path = Path(path)
    if path.is_dir():
        from benchmarks.knobs import read_rows

        rows, where = list(read_rows(path).values()), path / "documents.jsonl"
    else:
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8") as f:
                lines = split_lines(f.read())
        except OSError as err:
            raise ValueError(f"--splits: cannot read {path}: {err.strerror or err}") from None
        rows, where = [], path
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not a JSON line ({err.msg})") from None
    if not rows:
        raise ValueError(f"{where} holds no rows")
    bad = next((r for r in rows if not isinstance(r, dict) or not all(k in r for k in ("index", "canonical_path",
                                                                                       "paths"))), None)
    if bad is not None:
        raise ValueError(f"{where}: a row without its paths (index, canonical_path, paths; document "
                         f"{bad.get('index') if isinstance(bad, dict) else '?'}): measure with bench perplexity "
                         "--paths")
    return rows


def split_table(rows: Sequence[Mapping[str, Any]], surfaces: Sequence[bytes | None],
                joins: Mapping[int, Sequence[int]], kept: Mapping[int, float] | None = None,
                lm: Any = None) -> dict[str, Any]:
    """The found gain by class (module docstring) over ``rows`` (:func:`read_path_rows`).

    ``joins``: each document index's join offsets (:func:`~benchmarks.perplexity.document_parts`);
    ``kept``: another run's gain per document index, nats (e.g. a lazy setting's rows), to report its share of
    each class's gain. Returns ``gain_nats``, ``documents`` and per class ``classes[name]`` (``documents``,
    ``gain_nats``, ``share_of_gain``, ``splits``, ``splits_at_joins``, with ``kept``: ``kept_nats``,
    ``kept_share``), and per document ``per_document`` (``index``, ``class``, ``gain_nats``, ``kept_nats``,
    ``splits``: ``[start, kind, canonical, path, at a join]`` with surfaces as text). With ``lm`` (the LM that
    found the paths), :func:`split_costs` of each best path: per split ``own_nats`` and ``after_nats``, and their
    sums per class.
    """
    per_document = []
    for row in rows:
        i = row["index"]
        if i not in joins:
            raise ValueError(f"document {i} is not among the benchmark's documents: give the --documents, --lengths "
                             "and --corpus the paths were measured with")
        canonical = tuple(row["canonical_path"])
        paths = [(tuple(p), float(lp)) for p, lp in row["paths"]]
        own = [lp for p, lp in paths if p == canonical]
        if not own:
            raise ValueError(f"document {i}: the canonical tokenization is not among its paths")
        best = max(paths, key=lambda pl: pl[1])[0]
        found = splits(canonical, best, surfaces)
        kinds = split_kinds(found)
        at_joins = set(joins[i])
        if kept is not None and i not in kept:
            raise ValueError(f"document {i} has no row in the run to compare (it lacks that document)")
        doc = {"index": i, "class": document_class(kinds), "gain_nats": logsumexp([lp for _, lp in paths]) - own[0],
               "kept_nats": None if kept is None else kept[i],
               "splits": [[s.start, k, _text(s.canonical), _text(s.path), s.start in at_joins]
                          for s, k in zip(found, kinds)]}
        if lm is not None:
            costs = split_costs(lm, canonical, best)
            doc["own_nats"] = [c["own"] for c in costs]
            doc["after_nats"] = [c["after"] for c in costs]
        per_document.append(doc)
    total = sum(d["gain_nats"] for d in per_document)
    classes = {}
    for name in CLASSES:
        members = [d for d in per_document if d["class"] == name]
        gain = sum(d["gain_nats"] for d in members)
        entry: dict[str, Any] = {"documents": len(members), "gain_nats": gain,
                                 "share_of_gain": gain / total if total > 0 else None,
                                 "splits": sum(len(d["splits"]) for d in members),
                                 "splits_at_joins": sum(s[4] for d in members for s in d["splits"])}
        if kept is not None:
            got = sum(d["kept_nats"] for d in members)
            entry.update(kept_nats=got, kept_share=got / gain if gain > 0 else None)
        if lm is not None:
            entry.update(own_nats=sum(x for d in members for x in d["own_nats"]),
                         after_nats=sum(x for d in members for x in d["after_nats"]))
        classes[name] = entry
    out = {"documents": len(per_document), "gain_nats": total, "classes": classes, "per_document": per_document}
    if kept is not None:
        out["kept_nats"] = sum(d["kept_nats"] for d in per_document)
    return out


def _text(pieces: Sequence[bytes]) -> list[str]:
    return [p.decode("utf-8", errors="backslashreplace") for p in pieces]


def kept_gains(folder: str | Path) -> dict[int, float]:
    """A bench folder's gain per document index, nats (``gain_bits_per_byte`` times its bytes, in nats)."""
    from benchmarks.knobs import read_rows

    return {i: r["gain_bits_per_byte"] * r["bytes"] * math.log(2) for i, r in read_rows(folder).items()}


def format_split_table(t: dict[str, Any]) -> list[str]:
    kept = "kept_nats" in t
    costs = all("own_nats" in c for c in t["classes"].values())
    lines = [f"where the found gain sits ({t['documents']} documents, {t['gain_nats']:.1f} nats): the best path's "
             "splits against the canonical path, one class per document" + (", and the gain the compared run kept"
                                                                             if kept else ""),
             f"{'class':<13} {'docs':>4} {'splits (at joins)':>17} {'gain, nats':>10} {'share':>6}"
             + (f" {'kept, nats':>10} {'kept':>6}" if kept else "")
             + (f" {'own, nats':>9} {'after, nats':>11}" if costs else "")]
    for name, c in t["classes"].items():
        share = "-" if c["share_of_gain"] is None else f"{100 * c['share_of_gain']:.1f}%"
        line = (f"{name:<13} {c['documents']:>4} {c['splits']:>9} ({c['splits_at_joins']:>4}) {c['gain_nats']:>10.2f} "
                f"{share:>6}")
        if kept:
            k = "-" if c["kept_share"] is None else f"{100 * c['kept_share']:.1f}%"
            line += f" {c['kept_nats']:>10.2f} {k:>6}"
        if costs:
            line += f" {c['own_nats']:>9.2f} {c['after_nats']:>11.2f}"
        lines.append(line)
    if kept:
        lines.append(f"{'all':<13} {t['documents']:>4} {'':>17} {t['gain_nats']:>10.2f} {'100%':>6} "
                     f"{t['kept_nats']:>10.2f} "
                     f"{100 * t['kept_nats'] / t['gain_nats']:>5.1f}%")
    return lines


__all__ = ["CLASSES", "Split", "splits", "split_kinds", "document_class", "split_costs", "read_path_rows",
           "split_table", "kept_gains", "format_split_table"]
