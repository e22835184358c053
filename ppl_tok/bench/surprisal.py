"""``ppl-tok bench surprisal --text FILE``: word surprisal over strings against canonical-token surprisal.

On the first ``words`` words of held-out text (items in file order, each
scored alone after BOS, as a reading-time study scores its sentences), in one
process, each after an empty prefix cache:

* **canonical**: :func:`ppl_tok.strings.surprisal.canonical_surprisals`, the
  canonical tokens' log-probs summed per word (one forward per item: what
  minicons and the ``surprisal`` package compute);
* **one forward**: the same canonical tokens' log-probability in one forward per item
  (:meth:`~ppl_tok.lm.base.LanguageModel.log_probs_after`, which the ``transformers`` backend runs
  as one forward; the per-token terms come out of that forward too, so this is what a one-forward
  canonical column would cost: ``token_log_probs_after``, which the canonical column calls,
  extends one token per forward call);
* **strings**: :func:`ppl_tok.strings.surprisal.surprisals`, the word-end
  corrected surprisal over strings with its certified bracket (one walk of the
  LM over strings per item, its canonical column included).

Reported: words per second of each, the ratio of their wall times
(strings / canonical: how many times slower), LM forward calls and
token-forwards per word, and the share of words whose bracket is informative.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        texts = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
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


def _measure(lm: LanguageModel, items: list[str], fn: Callable[[str], list[Any]]) -> dict[str, Any]:
    lm.clear_cache()
    lm.stats.reset()
    start = time.perf_counter()
    out = [fn(text) for text in items]
    seconds = time.perf_counter() - start
    words = sum(len(o) for o in out)
    return {"words": words, "seconds": seconds, "words_per_second": words / seconds, "calls": lm.stats.calls,
            "forwards": lm.stats.forwards, "forwards_per_word": lm.stats.forwards / words,
            "calls_per_word": lm.stats.calls / words, "rows": out}


def bench_surprisal(lm: LanguageModel, text: str | Path, *, words: int = 1000,
                    config: StringSearchConfig | None = None, threads: int = 1) -> dict[str, Any]:
    """The two columns on the first ``words`` words of ``text`` (module docstring), with their ratio;
    ``threads``: torch's CPU threads for both (one by default: a ratio not moved by other work's load)."""
    import torch

    from ppl_tok.strings.surprisal import canonical_surprisals, surprisals, word_spans

    torch.set_num_threads(threads)
    config = config or StringSearchConfig()
    items = held_out_items(text, words)
    surprisals(lm, "Warm up.", config=config)  # one-time costs (the cover index, first calls) stay out
    canonical = _measure(lm, items, lambda t: canonical_surprisals(lm, t))
    ids = {t: lm.canonical(t) for t in items}

    def one_forward(t: str) -> list[Any]:
        lm.log_probs_after([lm.prefix_ids()], [ids[t]])
        return word_spans(t)  # the words it scores (their per-word sums are not formed: the cost is the forward)

    one = _measure(lm, items, one_forward)
    one.pop("rows")
    strings = _measure(lm, items, lambda t: surprisals(lm, t, config=config))
    rows = [r for item in strings.pop("rows") for r in item]
    canon = [c for item in canonical.pop("rows") for c in item]
    n = len(rows)
    strings.update(informative_share=sum(r.informative for r in rows) / n,
                   mean_surprisal_bits=sum(r.surprisal for r in rows) / n,
                   max_column_difference_bits=max(abs(r.canonical - c) for r, c in zip(rows, canon)))
    canonical["mean_surprisal_bits"] = sum(canon) / n
    return {"model": lm.name, "text": str(text), "items": len(items), "words": n,
            "bytes": sum(len(t.encode("utf-8")) for t in items), "beam": config.beam, "prune": config.prune,
            "threads": threads,
            "canonical": canonical, "one_forward": one, "strings": strings,
            "time_ratio": strings["seconds"] / canonical["seconds"],
            "time_ratio_one_forward": strings["seconds"] / one["seconds"],
            "forwards_ratio": strings["forwards"] / canonical["forwards"],
            "target_ratio": 3.0}


def format_surprisal(result: dict[str, Any]) -> list[str]:
    """The table of :func:`bench_surprisal`."""
    c, s = result["canonical"], result["strings"]
    lines = [f"{result['model']}: {result['words']} words in {result['items']} items ({result['bytes']} bytes) of "
             f"{result['text']}; beam {result['beam']}, prune {result['prune']:g}",
             f"{'column':<10} {'seconds':>9} {'words/s':>9} {'calls/word':>11} {'forwards/word':>14} "
             f"{'mean bits':>10}"]
    for name, m in (("canonical", c), ("1 forward", result["one_forward"]), ("strings", s)):
        bits = f"{m['mean_surprisal_bits']:>10.3f}" if "mean_surprisal_bits" in m else f"{'':>10}"
        lines.append(f"{name:<10} {m['seconds']:>9.2f} {m['words_per_second']:>9.2f} {m['calls_per_word']:>11.2f} "
                     f"{m['forwards_per_word']:>14.2f} {bits}")
    verdict = "within" if result["time_ratio"] <= result["target_ratio"] else "above"
    lines += [f"strings / canonical: {result['time_ratio']:.1f}x the time ({verdict} the "
              f"{result['target_ratio']:g}x target), {result['forwards_ratio']:.1f}x the token-forwards; "
              f"{100 * s['informative_share']:.1f}% of the brackets informative",
              f"strings / one forward per item: {result['time_ratio_one_forward']:.1f}x the time"]
    return lines


__all__ = ["bench_surprisal", "format_surprisal", "held_out_items"]
