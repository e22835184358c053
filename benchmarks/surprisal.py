"""``python -m benchmarks surprisal --text FILE``: word surprisal over strings against canonical-token surprisal.

On the first ``words`` words of held-out text (items in file order, each
scored alone after BOS, as a reading-time study scores its sentences), in one
process, each column after an empty prefix cache:

* **canonical**: :func:`ppl_tok.strings.surprisal.canonical_surprisals_many`, the
  canonical tokens' log-probs summed per word, ``batch`` items in one forward
  (what minicons and the ``surprisal`` package compute on a batch);
* **canonical 1x1**: :func:`~ppl_tok.strings.surprisal.canonical_surprisals`, one
  item per forward;
* **strings**: :func:`ppl_tok.strings.surprisal.surprisals_many`, the word-end
  corrected surprisal over strings with its certified bracket, ``batch`` items
  walked together (one LM call serves every walk waiting for a forward), its canonical column
  included;
* **strings 1x1** (``per_item``): :func:`~ppl_tok.strings.surprisal.surprisals`,
  one item walked at a time;
* **strings reference** (``reference``, with lazy extension only): the strings
  column without lazy extension, and each word's difference from it.

Reported: words per second of each, the ratio of their wall times (strings /
canonical, both batched: how many times slower; the issue's target is 3x), LM
forward calls and token-forwards per word, and the share of words whose bracket
is informative. The search config (beam, prune, lazy extension's threshold) is
the strings columns'.
"""

from __future__ import annotations

import time
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ppl_tok.common.lines import split_lines
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig


def held_out_items(path: str | Path, words: int) -> list[str]:
    """Items of ``path`` in order until they hold ``words`` words (:func:`~ppl_tok.strings.surprisal.word_spans`).

    ``path``: a multiple-choice data file (HellaSwag, SocialIQA, OpenBookQA, ``.jsonl`` or
    ``.jsonl.gz``: the questions' contexts) or a UTF-8 text file (one item per non-empty line).
    The last item is cut to its first words so that the total is exactly ``words`` (fewer if the
    file holds fewer).
    """
    from ppl_tok.datasets import load_questions
    from ppl_tok.strings.surprisal import word_spans

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--text {path}: no such file (give a text file or a HellaSwag, SocialIQA or "
                                "OpenBookQA data file)")
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        texts = (q.context for q in load_questions(path))
    else:
        texts = (line.strip() for line in split_lines(path.read_text(encoding="utf-8")))
    items, total = [], 0
    for text in texts:
        if not text:
            continue
        spans = word_spans(text)
        take = min(len(spans), words - total)
        items.append(text[: spans[take - 1][1]].rstrip())
        total += take
        if total >= words:
            break
    if not items:
        raise ValueError(f"--text {path}: no text in it")
    return items


def _measure(lm: LanguageModel, items: list[str], fn: Callable[[list[str]], list[list[Any]]],
             batch: int) -> dict[str, Any]:
    lm.clear_cache()
    lm.stats.reset()
    start = time.perf_counter()
    out = [rows for lo in range(0, len(items), batch) for rows in fn(items[lo: lo + batch])]
    seconds = time.perf_counter() - start
    words = sum(len(o) for o in out)
    return {"words": words, "seconds": seconds, "words_per_second": words / seconds, "calls": lm.stats.calls,
            "forwards": lm.stats.forwards, "forwards_per_word": lm.stats.forwards / words,
            "calls_per_word": lm.stats.calls / words, "batch": batch, "rows": out}


def bench_surprisal(lm: LanguageModel, text: str | Path, *, words: int = 1000,
                    config: StringSearchConfig | None = None, batch: int = 16, per_item: bool = False,
                    reference: bool = False, threads: int = 1) -> dict[str, Any]:
    """The columns on the first ``words`` words of ``text`` (module docstring), with their ratios.

    ``batch``: items per call (canonical) and walked together (strings); ``per_item``: also the
    strings column one item at a time (slow: one LM call per byte of every item); ``reference``: with
    lazy extension, also the strings column without it, and the per-word differences (median, 95th
    percentile, max bits) of the strings column from it; ``threads``:
    torch's CPU threads for all (one by default: a ratio not moved by other work's load).
    """
    import torch

    from ppl_tok.strings.surprisal import canonical_surprisals, canonical_surprisals_many, surprisals, surprisals_many

    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    torch.set_num_threads(threads)
    config = config or StringSearchConfig()
    items = held_out_items(text, words)
    surprisals(lm, "Warm up.", config=config)  # one-time costs (the cover index, first calls) stay out
    columns = {
        "canonical": _measure(lm, items, lambda ts: canonical_surprisals_many(lm, ts), batch),
        "canonical_1x1": _measure(lm, items, lambda ts: [canonical_surprisals(lm, t) for t in ts], 1),
        "strings": _measure(lm, items, lambda ts: surprisals_many(lm, ts, config=config), batch),
    }
    if per_item:
        columns["strings_1x1"] = _measure(lm, items, lambda ts: [surprisals(lm, t, config=config) for t in ts], 1)
    if reference and config.extend_threshold > 0:
        full = replace(config, extend_threshold=0.0)
        columns["strings_reference"] = _measure(lm, items, lambda ts: surprisals_many(lm, ts, config=full), batch)
    canon = [c for item in columns["canonical"]["rows"] for c in item]
    canon_1x1 = [c for item in columns["canonical_1x1"].pop("rows") for c in item]
    for name in ("canonical", "canonical_1x1"):
        columns[name]["mean_surprisal_bits"] = sum(canon) / len(canon)
    found: dict[str, list[float]] = {}
    for name in [n for n in columns if n.startswith("strings")]:
        rows = [r for item in columns[name].pop("rows") for r in item]
        found[name] = [r.surprisal for r in rows]
        columns[name].update(informative_share=sum(r.informative for r in rows) / len(rows),
                             mean_surprisal_bits=sum(r.surprisal for r in rows) / len(rows),
                             max_column_difference_bits=max(abs(r.canonical - c) for r, c in zip(rows, canon)))
    if "strings_reference" in found:  # what lazy extension changed, word by word
        diffs = sorted(abs(a - b) for a, b in zip(found["strings"], found["strings_reference"]))
        columns["strings"].update(reference_median_difference_bits=diffs[len(diffs) // 2],
                                  reference_p95_difference_bits=diffs[min(len(diffs) - 1, int(0.95 * len(diffs)))],
                                  reference_max_difference_bits=diffs[-1])
    columns["canonical"].pop("rows")
    c, s = columns["canonical"], columns["strings"]
    return {"model": lm.name, "text": str(text), "items": len(items), "words": c["words"],
            "bytes": sum(len(t.encode("utf-8")) for t in items), "beam": config.beam, "prune": config.prune,
            "extend_threshold": config.extend_threshold, "batch": batch, "threads": threads,
            **columns,
            "time_ratio": s["seconds"] / c["seconds"],
            "time_ratio_canonical_1x1": s["seconds"] / columns["canonical_1x1"]["seconds"],
            "forwards_ratio": s["forwards"] / c["forwards"],
            "canonical_batch_difference_bits": max(abs(a - b) for a, b in zip(canon, canon_1x1)),
            "target_ratio": 3.0}


def format_surprisal(result: dict[str, Any]) -> list[str]:
    """The table of :func:`bench_surprisal`."""
    s = result["strings"]
    lines = [f"{result['model']}: {result['words']} words in {result['items']} items ({result['bytes']} bytes) of "
             f"{result['text']}; beam {result['beam']}, prune {result['prune']:g}, extend threshold "
             f"{result['extend_threshold']:g}, {result['batch']} items per batch",
             f"{'column':<14} {'seconds':>9} {'words/s':>9} {'calls/word':>11} {'forwards/word':>14} "
             f"{'mean bits':>10}"]
    for name in ("canonical", "canonical_1x1", "strings", "strings_1x1", "strings_reference"):
        if name not in result:
            continue
        m = result[name]
        lines.append(f"{name:<14} {m['seconds']:>9.2f} {m['words_per_second']:>9.2f} {m['calls_per_word']:>11.3f} "
                     f"{m['forwards_per_word']:>14.2f} {m['mean_surprisal_bits']:>10.3f}")
    verdict = "within" if result["time_ratio"] <= result["target_ratio"] else "above"
    lines += [f"strings / canonical (both {result['batch']} items per batch): {result['time_ratio']:.2f}x the time "
              f"({verdict} the {result['target_ratio']:g}x target), {result['forwards_ratio']:.1f}x the "
              f"token-forwards; {100 * s['informative_share']:.1f}% of the brackets informative",
              f"strings / canonical one item per forward: {result['time_ratio_canonical_1x1']:.2f}x the time"]
    if "reference_max_difference_bits" in s:
        lines.append(f"strings against strings_reference (no lazy extension), per word: median "
                     f"{s['reference_median_difference_bits']:.4f}, p95 {s['reference_p95_difference_bits']:.4f}, "
                     f"max {s['reference_max_difference_bits']:.4f} bits")
    return lines


__all__ = ["bench_surprisal", "format_surprisal", "held_out_items"]
