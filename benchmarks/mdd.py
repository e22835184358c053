"""``python -m benchmarks mdd``: bytes per second of :func:`~ppl_tok.mdd.compile_mdd` against
:func:`~ppl_tok.mdd.compile_mdd_naive` (Algorithm 1 as written: the whole vocabulary scanned at every position), on
the same texts; the time to compile one 10 kB text; and the CPU time per text of :func:`~ppl_tok.mdd.compile_mdd`
against :func:`compile_mdd_e9ead21` (the compiler as of e9ead21, kept here as the baseline) on each data set,
alone and with the networkx graph read."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ppl_tok.datasets import find_data_files, load_questions, texts_of
from ppl_tok.lm.cards import load_vocabulary
from ppl_tok.mdd import MDD, _as_bytes, _characters, _coverage, _no_tokenization_error, compile_mdd, compile_mdd_naive
from ppl_tok.vocabulary import ByteFallback, Vocabulary


# ------------------------------------------------- the baseline: compile_mdd as of e9ead21
def _fallback_positions_e9ead21(data: bytes, vocab: Vocabulary, matches: list[list[tuple[int, int]]]) -> list[int]:
    """The byte offsets where the paper's policy allows byte pieces, character by character."""
    single = vocab._by_surface
    spans = [(offset, offset + width) for _, offset, ch, width in _characters(data)
             if not any(t not in vocab.byte_fallback_ids
                        for t in single.get(ch.encode("utf-8", errors="surrogateescape"), ()))]
    if not spans:
        return []
    covered = _coverage(data, matches)
    return [i for a, b in spans if not all(covered[a:b]) for i in range(a, b)]


def compile_mdd_e9ead21(text: str | bytes, vocab: Vocabulary) -> MDD:
    """:func:`~ppl_tok.mdd.compile_mdd` as it was at e9ead21, the speed baseline of ``python -m benchmarks mdd``
    and the reference of tests/test_mdd.py: a trie walk from every offset, then networkx's dicts filled eagerly
    (``succ[i][j]`` and ``pred[j][i]`` separate key dicts sharing each edge's attribute dict)."""
    data = _as_bytes(text)
    has_bytes = bool(vocab.byte_fallback_ids)
    trie = vocab.trie(vocab.fallback is ByteFallback.ALWAYS and has_bytes)
    edges = [trie.matches(data, i) for i in range(len(data))]
    if has_bytes and vocab.fallback is ByteFallback.PAPER:
        for i in _fallback_positions_e9ead21(data, vocab, edges):
            edges[i].extend((i + 1, t) for t in vocab.ids_of(data[i:i + 1]) if t in vocab.byte_fallback_ids)
    n = len(data)
    reach = bytearray(n + 1)
    reach[0] = 1
    for i in range(n):
        if reach[i]:
            for end, _ in edges[i]:
                reach[end] = 1
    alive = bytearray(n + 1)
    alive[n] = reach[n]
    for i in range(n - 1, -1, -1):
        if reach[i] and any(alive[end] for end, _ in edges[i]):
            alive[i] = 1
    if not alive[0]:
        raise _no_tokenization_error(data, vocab, edges, reach)
    nodes = [i for i in range(n + 1) if alive[i]]
    mdd = MDD(text=data, vocab=vocab)
    succ: dict = {i: {} for i in nodes}
    pred: dict = {i: {} for i in nodes}
    for i in nodes[:-1]:
        out = succ[i]
        for end, t in edges[i]:
            if alive[end]:
                attr: dict = {}
                out.setdefault(end, {})[t] = attr
                pred[end].setdefault(i, {})[t] = attr
    mdd._node.update((i, {}) for i in nodes)
    mdd._adj.update(succ)
    mdd._pred.update(pred)
    return mdd


def load_texts(source: str | Path) -> list[str]:
    """Texts to benchmark on: every context and answer of a data folder, or the paragraphs of a file."""
    source = Path(source)
    if source.is_dir():
        return [t for f in find_data_files(source) for t in texts_of(load_questions(f))]
    if source.suffix in (".jsonl", ".gz"):
        return list(texts_of(load_questions(source)))
    if not source.is_file():
        raise FileNotFoundError(f"no data folder or text file at {source}")
    return [p for p in source.read_text(encoding="utf-8").split("\n\n") if p.strip()]


def load_data_sets(source: str | Path) -> dict[str, list[str]]:
    """:func:`load_texts` by data set: a data folder's files by their folder's name, else the one file."""
    source = Path(source)
    if not source.is_dir():
        return {source.name: load_texts(source)}
    sets: dict[str, list[str]] = {}
    for f in find_data_files(source):
        sets.setdefault(f.parent.name, []).extend(texts_of(load_questions(f)))
    return sets


def _cpu_seconds(texts: list[str], compile_fn, vocab, graph: bool) -> float:
    """CPU seconds to compile ``texts`` (and, with ``graph``, to read each MDD's networkx graph)."""
    start = time.process_time()
    for text in texts:
        mdd = compile_fn(text, vocab)
        if graph:
            mdd.number_of_edges()
    return time.process_time() - start


def versus_e9ead21(sets: dict[str, list[str]], vocab: Vocabulary, per_set: int, rounds: int = 3) -> list[dict]:
    """Per data set, ``per_set`` texts spread over it: the best of ``rounds`` alternating CPU timings of the
    baseline, of :func:`compile_mdd`, and of :func:`compile_mdd` with the networkx graph read; their ratios."""
    rows = []
    for name, texts in sets.items():
        sample = texts[::max(1, len(texts) // per_set)][:per_set]
        best = {"baseline": math.inf, "compile": math.inf, "graph": math.inf}
        for _ in range(rounds):
            best["baseline"] = min(best["baseline"], _cpu_seconds(sample, compile_mdd_e9ead21, vocab, True))
            best["compile"] = min(best["compile"], _cpu_seconds(sample, compile_mdd, vocab, False))
            best["graph"] = min(best["graph"], _cpu_seconds(sample, compile_mdd, vocab, True))
        rows.append({"data_set": name, "texts": len(sample), "bytes": sum(len(t.encode("utf-8")) for t in sample),
                     **{f"{k}_ms_per_text": 1e3 * v / len(sample) for k, v in best.items()},
                     "speedup": best["baseline"] / best["compile"],
                     "speedup_with_graph": best["baseline"] / best["graph"]})
    return rows


def _rate(texts: list[str], compile_fn, vocab, desc: str) -> tuple[float, int, float]:
    done, start = 0, time.perf_counter()
    for text in tqdm(texts, desc=desc, unit="text", leave=False):
        compile_fn(text, vocab)
        done += len(text.encode("utf-8"))
    seconds = time.perf_counter() - start
    return done / seconds, done, seconds


def _take(texts: list[str], budget: int) -> list[str]:
    out, total = [], 0
    for t in texts:
        if total >= budget:
            break
        out.append(t)
        total += len(t.encode("utf-8"))
    return out


MDD_MODELS = ("smollm2-135m", "gemma3-270m")


def bench_mdd(data: str | Path, models: list[str], naive_bytes: int = 3_000,
              max_bytes: int = 2_000_000, baseline_texts: int = 300) -> dict[str, Any]:
    """Compile the texts under ``data`` with each model's vocabulary, against the naive compiler and against the
    e9ead21 compiler (``baseline_texts`` per data set; 0: not at all)."""
    texts = load_texts(data)
    # Interleave the data sets so a byte budget samples all of them.
    texts = texts[::7] + [t for i, t in enumerate(texts) if i % 7]
    rows = []
    for name in models:
        vocab = load_vocabulary(name)
        compile_mdd("warm up the trie", vocab)
        fast_texts = _take(texts, max_bytes)
        fast, fast_bytes, fast_s = _rate(fast_texts, compile_mdd, vocab, f"{name}: trie compiler")
        naive_texts = _take(texts, naive_bytes)
        trie_same, _, _ = _rate(naive_texts, compile_mdd, vocab, f"{name}: trie compiler (same texts)")
        naive, naive_done, naive_s = _rate(naive_texts, compile_mdd_naive, vocab, f"{name}: naive compiler")
        big = " ".join(_take(texts, 10_000))[:10_000]
        start = time.perf_counter()
        mdd = compile_mdd(big, vocab)
        big_s = time.perf_counter() - start
        rows.append({
            "model": name, "vocab_size": len(vocab),
            "trie_bytes_per_s": fast, "trie_bytes": fast_bytes, "trie_seconds": fast_s,
            "trie_bytes_per_s_on_naive_texts": trie_same,
            "naive_bytes_per_s": naive, "naive_bytes": naive_done, "naive_seconds": naive_s,
            "speedup": trie_same / naive,
            "ten_kb_seconds": big_s, "ten_kb_edges": mdd.number_of_edges(),
            "ten_kb_log10_count": len(str(mdd.count())) - 1,
            "versus_e9ead21": versus_e9ead21(load_data_sets(data), vocab, baseline_texts) if baseline_texts else [],
        })
    return {"data": str(data), "texts": len(texts), "results": rows}


def format_mdd(result: dict[str, Any]) -> list[str]:
    lines = [f"MDD compilation on {result['data']} ({result['texts']} texts)",
             f"{'model':<14} {'trie B/s':>10} {'naive B/s':>10} {'speedup':>8} {'10 kB text':>11}"]
    for r in result["results"]:
        lines.append(f"{r['model']:<14} {r['trie_bytes_per_s']:>10.0f} {r['naive_bytes_per_s']:>10.0f} "
                     f"{r['speedup']:>7.0f}x {r['ten_kb_seconds']:>10.3f}s")
    versus = [(r["model"], v) for r in result["results"] for v in r.get("versus_e9ead21", [])]
    if versus:
        lines += ["", "against the e9ead21 compiler (CPU ms per text, best of 3; graph: the networkx graph read too)",
                  f"{'model':<14} {'data set':<12} {'texts':>6} {'e9ead21':>8} {'now':>8} {'speedup':>8} "
                  f"{'now+graph':>10} {'speedup':>8}"]
        for model, v in versus:
            lines.append(f"{model:<14} {v['data_set']:<12} {v['texts']:>6} {v['baseline_ms_per_text']:>8.3f} "
                         f"{v['compile_ms_per_text']:>8.3f} {v['speedup']:>7.2f}x {v['graph_ms_per_text']:>10.3f} "
                         f"{v['speedup_with_graph']:>7.2f}x")
    return lines
