"""``python -m benchmarks strings prefill --prefill-bytes N...``: conditioning on a long prompt, against canonical scoring.

For each size ``n``, a prompt of ``n`` bytes of held-out running text
(:func:`benchmarks.strings.running_text`: HellaSwag validation contexts) is

* scored canonically, ``log p(v*(x))`` (one batched forward: the token-level way);
* conditioned on by the LM over strings, ``initial(lm, x)`` then ``next_byte_log_probs()``,
  in ``canonical-head`` mode (:mod:`ppl_tok.strings.prefill`) and, up to
  ``exact_up_to`` bytes (it is slow), in ``exact`` mode;

each after an empty cache, with wall time, LM forward calls and token-forwards,
and the ratios to canonical scoring measured in the same process. The mid-word
part compares the 12-byte continuation's conditional in ``canonical-head`` with
``exact`` on the prompt-boundary benchmark's prompts (the exact figures from its
records file when given, else computed).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ppl_tok.common.jsonl_store import decode_log
from ppl_tok.datasets import DATA_ROOT
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig


def _measure(lm: LanguageModel, fn: Callable[[], Any]) -> dict[str, Any]:
    lm.clear_cache()
    lm.stats.reset()
    start = time.perf_counter()
    fn()
    return {"seconds": time.perf_counter() - start, "calls": lm.stats.calls, "forwards": lm.stats.forwards}


def prefill_sizes(lm: LanguageModel, sizes: Sequence[int], data: str | Path = DATA_ROOT, exact_up_to: int = 400,
                  config: StringSearchConfig = StringSearchConfig()) -> list[dict[str, Any]]:
    """One row per size: canonical scoring, canonical-head and (small sizes) exact, with ratios to canonical."""
    from benchmarks.strings import running_text
    from ppl_tok.strings.state import initial

    lm.canonical_log_prob(running_text(data, 400))  # warm-up: one-time costs stay out of the first row
    initial(lm, "warm up", config=config).next_byte_log_probs()
    rows = []
    for n in sizes:
        text = running_text(data, n)
        row: dict[str, Any] = {"bytes": len(text.encode()), "canonical": _measure(lm, lambda: lm.canonical_log_prob(text))}
        modes = ["canonical-head"] + (["exact"] if n <= exact_up_to else [])
        for mode in modes:
            cfg = replace(config, prefill=mode)
            box: dict[str, Any] = {}
            m = _measure(lm, lambda: box.setdefault("s", initial(lm, text, config=cfg)).next_byte_log_probs())
            m.update(head_bytes=box["s"].base, tail_bytes=row["bytes"] - box["s"].base,
                     time_ratio=m["seconds"] / row["canonical"]["seconds"],
                     forwards_ratio=m["forwards"] / row["canonical"]["forwards"])
            row[mode] = m
        rows.append(row)
    return rows


def midword_difference(lm: LanguageModel, pairs: Sequence[tuple[str, str]], config: StringSearchConfig,
                       records: str | Path | None = None) -> dict[str, Any]:
    """``|log p_H(y | x) - log p(y | x)|`` of the 12-byte continuations: canonical-head against exact.

    ``records``: the prompt-boundary benchmark's JSON Lines (exact's estimate per prompt, in order);
    the prompts not there are computed exactly here. A prompt that gets no head is canonical-head's
    exact computation (tested bit for bit), so its difference is 0 without running it. Also the mean
    gain of each over canonical-token conditioning ``log p(v*(y) | v*(x))``.
    """
    from benchmarks.strings import PromptRecords
    from ppl_tok.strings.conditional import string_conditional
    from ppl_tok.strings.prefill import head_tokens

    done = list(PromptRecords.read_records(Path(records))) if records is not None and Path(records).is_file() else []
    ch_config = replace(config, prefill="canonical-head")
    diffs, gains_exact, gains_ch, heads = [], [], [], 0
    for k, (prompt, cont) in tqdm(list(enumerate(pairs)), desc="mid-word prompts", leave=False):
        if k < len(done) and (done[k]["prompt"], done[k]["continuation"]) == (prompt, cont):
            exact, canonical = decode_log(done[k]["estimate"]), decode_log(done[k]["canonical"])
        else:
            exact = string_conditional(lm, prompt, cont, config=replace(config, prefill="exact"), event="prefix").estimate
            canonical = lm.canonical_log_prob(cont, prompt)
        if head_tokens(lm.vocab, prompt.encode(), ch_config)[0]:
            ch = string_conditional(lm, prompt, cont, config=ch_config, event="prefix").estimate
            heads += 1
        else:
            ch = exact
        diffs.append(abs(ch - exact))
        gains_exact.append(exact - canonical)
        gains_ch.append(ch - canonical)
    diffs.sort()
    return {"prompts": len(diffs), "with_a_head": heads, "median_abs_diff": statistics.median(diffs),
            "p95_abs_diff": diffs[min(len(diffs) - 1, int(0.95 * len(diffs)))], "max_abs_diff": diffs[-1],
            "mean_gain_exact": statistics.fmean(gains_exact), "mean_gain_canonical_head": statistics.fmean(gains_ch),
            "prefill_tail": config.prefill_tail}


def format_prefill(rows: list[dict[str, Any]]) -> list[str]:
    """The prefill table, one line per size and mode."""
    out = [f"{'bytes':>6} {'mode':>15} {'seconds':>8} {'calls':>6} {'forwards':>9} {'head':>6} {'tail':>5} "
           f"{'x time':>7} {'x fwd':>6}"]
    for r in rows:
        c = r["canonical"]
        out.append(f"{r['bytes']:>6} {'canonical':>15} {c['seconds']:>8.2f} {c['calls']:>6} {c['forwards']:>9}")
        for mode in ("canonical-head", "exact"):
            if mode in r:
                m = r[mode]
                out.append(f"{'':>6} {mode:>15} {m['seconds']:>8.2f} {m['calls']:>6} {m['forwards']:>9} "
                           f"{m['head_bytes']:>6} {m['tail_bytes']:>5} {m['time_ratio']:>7.1f} {m['forwards_ratio']:>6.2f}")
    return out


__all__ = ["format_prefill", "midword_difference", "prefill_sizes"]
