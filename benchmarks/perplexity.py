"""``python -m benchmarks perplexity``: the cost of marginal scoring against canonical scoring, in one process.

Documents of ``min_bytes``..``max_bytes`` bytes (lengths spread evenly over the
range) are running text built from the data folder
(:data:`ppl_tok.datasets.DATA_ROOT`): consecutive HellaSwag validation contexts
with their gold endings, and consecutive OpenBookQA test question stems, joined
by spaces, alternately. Each document is scored

* canonically (:func:`ppl_tok.scorings.canonical.canonical_scores`: its canonical
  tokens, one chunked forward), and
* by the marginal (:func:`ppl_tok.strings.string_marginal`, the byte-synchronous
  beam, ``search``: a :class:`~ppl_tok.strings.StringSearchConfig`),

each from an empty prefix cache, on the same model in the same process. Per
document: token-forwards per byte and bytes/s of each, their ratios, the gain of
the marginal over canonical (bits per byte), and the certified bracket's width in
bits per byte (``upper - lower``; the beam's estimate *is* its floor, so the
floor-to-estimate gap is zero by construction and the width is what says how
far the floor may be from the marginal). Cost per byte against length: the
documents in three length bins.

With ``out``, each document's row goes into a store folder
(:class:`BenchStore`, ``run.json`` + ``documents.jsonl``) as soon as it is
measured, and a rerun with the same settings skips the rows already there: the
50-document run takes hours on a CPU and survives being killed. Timings of
resumed rows come from the processes that measured them. Documents are measured
from both ends of the length range inward (:func:`measuring_order`), so a run
stopped part way already spans the lengths.

:func:`bench_prefixes` measures the beam's error where an exact answer exists:
on the documents' first bytes, against best-first search's certified bracket
closed to a tolerance. :func:`bench_lockstep` and :func:`bench_memory_document`
measure documents in lockstep and the peak memory of one long document.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ppl_tok.datasets import DATA_ROOT, continuation, data_file, read_hellaswag, read_openbookqa
from ppl_tok.perplexity.corpus import Document
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.common.jsonl_store import JsonlStore
from ppl_tok.perplexity.store import PerplexityStore

LN2 = math.log(2)


#: the corpora of :func:`bench_documents`: HellaSwag and OpenBookQA alternately, or SocialIQA's (held out: not
#: the one the beam's settings were chosen on)
CORPORA = ("mixed", "socialiqa")


def _sources(data_dir: str | Path, corpus: str) -> list[list[str]]:
    if corpus == "socialiqa":  # the dev contexts and questions as running text (not the QA prompt format)
        from ppl_tok.datasets import read_socialiqa

        return [[q.context[len("Q: "):].split("\n")[0] for q in read_socialiqa(data_file("socialiqa", "dev", data_dir))]]
    if corpus != "mixed":
        raise ValueError(f"corpus must be one of {', '.join(CORPORA)}, got {corpus!r}")
    swag = [q.context + continuation(q.choices[q.label])
            for q in read_hellaswag(data_file("hellaswag", "val", data_dir))]
    return [swag, [q.context for q in read_openbookqa(data_file("openbookqa", "test", data_dir))]]


def bench_documents(data_dir: str | Path, count: int, min_bytes: int, max_bytes: int,
                    corpus: str = "mixed") -> list[str]:
    """``count`` running-text documents with lengths spread over ``[min_bytes, max_bytes]`` (see the module docstring).

    ``corpus``: ``"mixed"`` (HellaSwag and OpenBookQA, alternately) or ``"socialiqa"`` (SocialIQA dev
    contexts with their questions; a second, held-out corpus).
    """
    return [text for text, _ in document_parts(data_dir, count, min_bytes, max_bytes, corpus)]


def document_parts(data_dir: str | Path, count: int, min_bytes: int, max_bytes: int,
                   corpus: str = "mixed") -> list[tuple[str, list[int]]]:
    """:func:`bench_documents`, each with its *joins*: the byte offsets of the spaces that join its source items
    (the item before ends there), inside the document."""
    if not 1 <= min_bytes <= max_bytes:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes, got {min_bytes}, {max_bytes}")
    sources = _sources(data_dir, corpus)
    at = [0] * len(sources)
    out = []
    for k in range(count):
        target = min_bytes + (max_bytes - min_bytes) * k // max(1, count - 1)
        s = k % len(sources)
        parts: list[str] = []
        while len(" ".join(parts).encode()) < target:
            parts.append(sources[s][at[s] % len(sources[s])])
            at[s] += 1
        text = " ".join(parts).encode()[:max(target, min_bytes)].decode("utf-8", "ignore")
        size = len(text.encode())
        joins, offset = [], 0
        for part in parts[:-1]:
            offset += len(part.encode())
            if offset < size:
                joins.append(offset)
            offset += 1
        out.append((text, joins))
    return out


def measuring_order(count: int) -> list[int]:
    """Document indices from both ends inward (0, n-1, 1, n-2, ...): a run stopped part way has short and long documents."""
    order = []
    lo, hi = 0, count - 1
    while lo <= hi:
        order.append(lo)
        if hi != lo:
            order.append(hi)
        lo, hi = lo + 1, hi - 1
    return order


class BenchStore(PerplexityStore):
    """The rows of one ``python -m benchmarks perplexity`` run (``--out``): one per document, keyed by its index."""

    informational = ("ppl_tok_version",)
    what = "perplexity benchmark folder"
    record_name = "benchmark row"
    fields = {"index": "count", "bytes": "count"}  # a row's own numbers (not a run folder's document record)

    @classmethod
    def validate(cls, record: Any, where: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A benchmark row: its numbers checked (:attr:`fields`), not a run folder's document fields."""
        return JsonlStore.validate.__func__(cls, record, where, settings)

    @classmethod
    def differences(cls, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """Every setting compared as written (a benchmark folder has none of a run folder's later settings)."""
        return JsonlStore.differences.__func__(cls, old, new)


def bench_perplexity(model: str, *, data_dir: str | Path = DATA_ROOT, documents: int = 50,
                     min_bytes: int = 300, max_bytes: int = 2000, search: StringSearchConfig = StringSearchConfig(),
                     out: str | Path | None = None, progress: bool = False, corpus: str = "mixed",
                     limit: int | None = None, shard: tuple[int, int] = (0, 1), reference: str | Path | None = None,
                     paths: bool = False, device: str | None = None, dtype: str | None = None,
                     bos_id: int | None = None) -> dict[str, Any]:
    """Marginal against canonical scoring on ``documents`` documents (see the module docstring).

    :param out: a store folder: rows are written as measured and a rerun resumes (:class:`BenchStore`).
    :param progress: a progress bar over the documents' bytes on standard error.
    :param corpus: :data:`CORPORA` (:func:`bench_documents`).
    :param limit: only the first ``limit`` documents of :func:`measuring_order` (the same documents as the full
        run's, so a reference run's rows compare).
    :param shard: ``(k, n)``: measure only every ``n``-th of those documents from the ``k``-th (processes that
        share the work; their folders' ``documents.jsonl`` concatenated make one folder a run without a shard
        reports on).
    :param reference: a folder of this benchmark's rows for the same documents (beam 8, say): each row gets the
        share of the reference's gain and whether the two certified brackets meet (:mod:`benchmarks.knobs`).
    :param paths: keep every complete tokenization the search found in each row (``paths``, ``canonical_path``)
        and report ``oracle``: the cost of the found gain to an oracle that knew those paths in advance
        (:func:`benchmarks.oracle.oracle_curve`, over the rows that hold them).
    """
    from benchmarks.knobs import against_reference, read_rows
    from benchmarks.oracle import oracle_of_rows
    from tqdm.auto import tqdm

    from ppl_tok.common.version import __version__
    from ppl_tok.lm.cards import load_lm

    texts = bench_documents(data_dir, documents, min_bytes, max_bytes, corpus)
    k, n_shards = shard
    if not 0 <= k < n_shards:
        raise ValueError(f"shard must be (k, n) with 0 <= k < n, got {shard}")
    order = measuring_order(len(texts))[:limit]
    refs = read_rows(reference) if reference is not None else None
    store = None
    if out is not None:
        # the document lengths follow from (documents, min_bytes, max_bytes), so all three are compared
        settings = {"model": model, "documents": documents, "min_bytes": min_bytes,
                    "max_bytes": max_bytes, "beam": search.beam, "prune": search.prune,
                    "device": device or "cpu", "dtype": dtype, "bos_id": bos_id, "ppl_tok_version": __version__}
        settings.update({key: v for key, v in (*search.lazy_settings().items(), ("corpus", corpus))
                         if v != {"extend_threshold": 0.0, "corpus": "mixed"}.get(key)})  # older folders resume
        store = BenchStore.open(out, settings)
    done = {r["index"]: r for r in store.records} if store is not None else {}
    for i, row in done.items():
        if i >= len(texts) or row["bytes"] != len(texts[i].encode()):
            raise ValueError(f"{store.path}: row {i} is not a row of these documents (was the data changed?)")
    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    config = search
    rows = []
    mine = set(order[k::n_shards])
    bar = tqdm(total=sum(len(texts[i].encode()) for i in order), unit="B", unit_scale=True, desc="bench perplexity",
               disable=not progress)
    for i in order:
        text = texts[i]
        n = len(text.encode())
        if i in done or i not in mine:
            if i in done:
                rows.append(done[i])
            bar.update(n)
            continue
        rows.append(_measure(lm, i, text, config, paths))
        if store is not None:
            store.append([rows[-1]])
        bar.update(n)
    bar.close()
    if store is not None:
        store.close()
    rows.sort(key=lambda r: r["index"])
    if not rows:
        raise ValueError(f"no document measured: shard {k} of {n_shards} of {len(order)} documents is empty")
    return {"model": model, "documents": len(rows), "beam": search.beam, "prune": search.prune,
            **search.lazy_settings(), "corpus": corpus, "rows": rows,
            "reference": against_reference(rows, refs, reference) if refs is not None else None,
            "oracle": oracle_of_rows(rows) if paths else None, **_summary(rows, min_bytes, max_bytes)}


def _measure(lm: Any, i: int, text: str, config: StringSearchConfig, paths: bool = False) -> dict[str, Any]:
    """One document's row: canonical scoring and the marginal, each from an empty prefix cache (``paths``: with
    the tokenizations the marginal found)."""
    from ppl_tok.scorings.canonical import canonical_scores
    from ppl_tok.strings import string_marginal

    n = len(text.encode())
    lm.clear_cache()
    t0 = time.perf_counter()
    (canon,) = canonical_scores(lm, [Document(i, text, "bench", 1)], None)
    t_canon = time.perf_counter() - t0
    lm.clear_cache()
    t0 = time.perf_counter()
    r = string_marginal(lm, text, "", config)
    t_marg = time.perf_counter() - t0
    return {"index": i, "bytes": n, "tokens": canon.n_tokens,
            "canonical_forwards_per_byte": canon.forwards / n, "marginal_forwards_per_byte": r.forwards / n,
            "forwards_ratio": r.forwards / max(1, canon.forwards),
            "canonical_bytes_per_s": n / t_canon, "marginal_bytes_per_s": n / t_marg,
            "gain_bits_per_byte": (r.estimate - canon.log_likelihood) / (LN2 * n),
            "bracket_width_bits_per_byte": (r.upper - r.lower) / (LN2 * n),
            "canonical_nats": canon.log_likelihood, "lower_nats": r.lower, "upper_nats": r.upper,
            **({"canonical_path": list(r.canonical_path),
                "paths": [[list(p), lp] for p, lp in r.paths if lp > -math.inf]} if paths else {})}


def _summary(rows: list[dict[str, Any]], min_bytes: int, max_bytes: int) -> dict[str, Any]:
    """The rows' totals: forwards per byte by length bin, the ratios, the gain, the median bracket width."""
    bins = []
    edges = [min_bytes, min_bytes + (max_bytes - min_bytes) // 3, min_bytes + 2 * (max_bytes - min_bytes) // 3,
             max_bytes + 1]
    for lo, hi in zip(edges, edges[1:]):
        members = [r for r in rows if lo <= r["bytes"] < hi]
        if members:
            total = sum(r["bytes"] for r in members)
            bins.append({"bytes": f"{lo}-{hi - 1}", "documents": len(members),
                         "marginal_forwards_per_byte": sum(r["marginal_forwards_per_byte"] * r["bytes"]
                                                           for r in members) / total})
    total = sum(r["bytes"] for r in rows)
    return {"by_length": bins, "forwards_ratio": sum(r["marginal_forwards_per_byte"] * r["bytes"] for r in rows)
            / sum(r["canonical_forwards_per_byte"] * r["bytes"] for r in rows),
            "canonical_bytes_per_s": total / sum(r["bytes"] / r["canonical_bytes_per_s"] for r in rows),
            "marginal_bytes_per_s": total / sum(r["bytes"] / r["marginal_bytes_per_s"] for r in rows),
            "gain_bits_per_byte": sum(r["gain_bits_per_byte"] * r["bytes"] for r in rows) / total,
            "median_bracket_width_bits_per_byte": sorted(r["bracket_width_bits_per_byte"] for r in rows)[len(rows) // 2]}


def bench_lockstep(model: str, *, data_dir: str | Path = DATA_ROOT, documents: int = 8, min_bytes: int = 100,
                   max_bytes: int = 300, search: StringSearchConfig = StringSearchConfig(),
                   device: str | None = None, dtype: str | None = None, bos_id: int | None = None) -> dict[str, Any]:
    """The marginals of ``documents`` documents one at a time, then swept in lockstep, in one process.

    Both from an empty prefix cache with the cache capped as ``ppl-tok perplexity`` caps it.
    Reported: wall seconds and LM calls of each, their ratios, the token-forwards (equal:
    the beams are the same), and the largest difference of a document's floor (float32
    rounding of batched forwards).
    """
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.strings import string_marginal, string_marginals
    from ppl_tok.scorings.documents import cap_prefix_cache

    texts = bench_documents(data_dir, documents, min_bytes, max_bytes)
    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    cap_prefix_cache(lm)
    config = search
    out: dict[str, Any] = {"model": model, "documents": documents, "bytes": sum(len(t.encode()) for t in texts),
                           "beam": search.beam, "prune": search.prune}
    runs = {}
    for mode in ("alone", "lockstep"):
        lm.clear_cache()
        lm.stats.reset()
        t0 = time.perf_counter()
        runs[mode] = ([string_marginal(lm, t, "", config) for t in texts] if mode == "alone"
                      else string_marginals(lm, texts, None, config))
        out[mode] = {"seconds": time.perf_counter() - t0, "calls": lm.stats.calls,
                     "forwards": sum(r.forwards for r in runs[mode])}
    out["speedup"] = out["alone"]["seconds"] / out["lockstep"]["seconds"]
    out["calls_ratio"] = out["alone"]["calls"] / max(1, out["lockstep"]["calls"])
    out["max_floor_difference_nats"] = max(abs(a.lower - b.lower) for a, b in zip(runs["alone"], runs["lockstep"]))
    return out


def format_lockstep(r: dict[str, Any]) -> list[str]:
    a, b = r["alone"], r["lockstep"]
    return [f"marginals of {r['documents']} documents ({r['bytes']} bytes), {r['model']}, beam {r['beam']}, "
            f"prune {r['prune']}",
            f"one at a time: {a['seconds']:.1f} s, {a['calls']} LM calls, {a['forwards']} token-forwards",
            f"in lockstep:   {b['seconds']:.1f} s, {b['calls']} LM calls, {b['forwards']} token-forwards",
            f"speedup {r['speedup']:.2f}x ({r['calls_ratio']:.1f}x fewer calls); largest floor difference "
            f"{r['max_floor_difference_nats']:.1e} nats"]


def bench_prefixes(model: str, *, data_dir: str | Path = DATA_ROOT, documents: int = 50, min_bytes: int = 300,
                   max_bytes: int = 2000, prefix_bytes: Sequence[int] = (16, 32, 64), tolerance: float = 1e-3,
                   budget: int = 5000, search: StringSearchConfig = StringSearchConfig(),
                   device: str | None = None, dtype: str | None = None, bos_id: int | None = None) -> dict[str, Any]:
    """The beam's floor against the exact bracket, on the documents' prefixes where that bracket closes.

    For each length ``L`` in ``prefix_bytes``, the first ``L`` bytes of every benchmark
    document (:func:`bench_documents`; a cut inside a UTF-8 character drops it) are
    bracketed by best-first search (:func:`ppl_tok.infer.search.marginal_bounds_many`, at most
    ``budget`` forwards each) and scored by the beam (:func:`ppl_tok.strings.string_marginals`).
    Where the bracket closes (``upper - lower <= tolerance``), the beam's floor ``f``
    falls short of the marginal by at most ``upper - f`` and at least ``lower - f``; the
    row reports the former (a certified bound on the beam's error) in nats and in bits
    per byte, the largest of the latter (mass the beam certainly missed), and counts any
    floor above ``upper`` (which would be a bug; float32 rounding allows ``1e-4`` nats).
    """
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.search import marginal_bounds_many
    from ppl_tok.strings import string_marginals
    from ppl_tok.scorings.documents import cap_prefix_cache

    if not prefix_bytes or min(prefix_bytes) < 1:
        raise ValueError(f"prefix_bytes must be positive lengths, got {list(prefix_bytes)}")
    texts = bench_documents(data_dir, documents, min_bytes, max_bytes)
    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    cap_prefix_cache(lm)
    config = search
    rows = []
    for length in prefix_bytes:
        prefixes = [t.encode()[:length].decode("utf-8", "ignore") for t in texts]
        lm.clear_cache()
        brackets = marginal_bounds_many(prefixes, lm, tolerance=tolerance, budget=budget)
        lm.clear_cache()
        beams = string_marginals(lm, prefixes, None, config)
        # (bytes, error bound, certain shortfall) of each prefix whose bracket closed
        closed = [(len(p.encode()), max(0.0, b.upper - r.lower), max(0.0, b.lower - r.lower))
                  for p, b, r in zip(prefixes, brackets, beams) if b.closed]
        errors = sorted(e for _, e, _ in closed)
        per_byte = [e / (LN2 * n) for n, e, _ in closed]
        rows.append({"prefix_bytes": length, "documents": len(prefixes), "closed": len(closed),
                     "bracket_forwards_per_prefix": sum(b.forwards for b in brackets) / len(brackets),
                     "beam_forwards_per_prefix": sum(r.forwards for r in beams) / len(beams),
                     "median_error_nats": errors[len(errors) // 2] if errors else None,
                     "max_error_nats": errors[-1] if errors else None,
                     "max_error_bits_per_byte": max(per_byte, default=None),
                     "max_certain_error_nats": max((c for _, _, c in closed), default=None),
                     "within_0.01_bits_per_byte": sum(e <= 0.01 for e in per_byte),
                     "floor_above_bracket": sum(r.lower > b.upper + 1e-4
                                                for b, r in zip(brackets, beams) if b.closed)})
    return {"model": model, "documents": len(texts), "beam": search.beam, "prune": search.prune,
            "tolerance": tolerance,
            "budget": budget, "rows": rows}


def format_prefixes(result: dict[str, Any]) -> list[str]:
    lines = [f"the beam's floor (beam {result['beam']}, prune {result['prune']}) against the bracket closed to "
             f"{result['tolerance']} nats ({result['budget']} forwards at most), {result['model']}, the first bytes "
             f"of {result['documents']} documents",
             f"{'bytes':>6} {'closed':>7} {'bracket fwd':>11} {'beam fwd':>8} {'median err':>10} {'max err':>9} "
             f"{'max err bpb':>11} {'certain':>9} {'<=0.01 bpb':>10} {'floor > upper':>13}"]

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    for r in result["rows"]:
        lines.append(f"{r['prefix_bytes']:>6} {r['closed']:>3}/{r['documents']:<3} {r['bracket_forwards_per_prefix']:>11.0f} "
                     f"{r['beam_forwards_per_prefix']:>8.0f} {fmt(r['median_error_nats'], '10.2e'):>10} "
                     f"{fmt(r['max_error_nats'], '9.2e'):>9} {fmt(r['max_error_bits_per_byte'], '11.2e'):>11} "
                     f"{fmt(r['max_certain_error_nats'], '9.2e'):>9} "
                     f"{r['within_0.01_bits_per_byte']:>10} {r['floor_above_bracket']:>13}")
    return lines


def lazy_label(result: dict[str, Any]) -> str:
    """``", extend threshold 0.2, boundary threshold 0.001, ..."``: the lazy settings a result ran under (none at 0)."""
    return "".join(f", {name.replace('_', ' ')} {result[name]:g}"
                   for name in ("extend_threshold", "boundary_threshold", "rejoin_threshold")
                   if result.get(name) is not None and (result[name] or name != "extend_threshold"))


def format_perplexity(result: dict[str, Any]) -> list[str]:
    lazy = lazy_label(result)
    lines = [f"perplexity: marginal (beam {result['beam']}, prune {result['prune']}{lazy}) against canonical scoring, "
             f"{result['model']}, {result['documents']} documents ({result.get('corpus', 'mixed')})",
             f"{'bytes':>6} {'canon fwd/B':>11} {'marg fwd/B':>10} {'ratio':>6} {'canon B/s':>9} {'marg B/s':>8} "
             f"{'gain bpb':>9} {'width bpb':>9}"]
    for r in result["rows"]:
        lines.append(f"{r['bytes']:>6} {r['canonical_forwards_per_byte']:>11.3f} {r['marginal_forwards_per_byte']:>10.3f} "
                     f"{r['forwards_ratio']:>5.1f}x {r['canonical_bytes_per_s']:>9.0f} {r['marginal_bytes_per_s']:>8.1f} "
                     f"{r['gain_bits_per_byte']:>9.5f} {r['bracket_width_bits_per_byte']:>9.3f}")
    lines.append("marginal forwards per byte by length: " + ", ".join(
        f"{b['bytes']} B: {b['marginal_forwards_per_byte']:.2f} ({b['documents']} docs)" for b in result["by_length"]))
    lines.append(f"in all: {result['forwards_ratio']:.1f}x canonical's token-forwards; {result['canonical_bytes_per_s']:.0f} "
                 f"B/s canonical, {result['marginal_bytes_per_s']:.1f} B/s marginal; gain "
                 f"{result['gain_bits_per_byte']:.5f} bits/byte; median bracket width "
                 f"{result['median_bracket_width_bits_per_byte']:.3f} bits/byte")
    if result.get("reference"):
        from benchmarks.knobs import format_reference

        lines.append(format_reference(result["reference"]))
    if result.get("oracle"):
        from benchmarks.oracle import format_oracle

        lines.append(format_oracle(result["oracle"]))
    return lines
