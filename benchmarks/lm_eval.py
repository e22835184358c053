"""The lm-eval model's string answers against their token baselines, in one process.

* **loglikelihood**: ``scoring=conditional`` (the LM over strings, canonical-head prefill) against
  ``scoring=canonical`` on the same multiple-choice requests (lm-eval's ``(question, " " + answer)``
  pairs of OpenBookQA), both through :meth:`~ppl_tok.integrations.lm_eval.PPLTokLM.score_pairs` at
  its default batch: seconds and their ratio (target: conditional at most 3x); the requests whose
  score moved by more than 0.01 nats and those with a canonical token spanning the join
  (:mod:`ppl_tok.strings.boundary`); and the accuracy under each with a percentile bootstrap
  interval over questions.
* **generate_until**: sampled generation over strings (a covering of the prompt drawn, then tokens:
  :func:`~ppl_tok.integrations.lm_eval_strings.generate_until` with ``do_sample``) against plain token
  sampling of the same byte budget after the prompt's canonical tokens: bytes per second and their
  ratio (target: at least 0.5x); the greedy byte-by-byte walk is reported beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from benchmarks.strings import _token_sampling
from ppl_tok.common.bootstrap import bootstrap_mean
from ppl_tok.datasets import Question, continuation
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.certified import WIDE_NATS
from ppl_tok.strings.conditional import CONDITIONAL_EXTEND_THRESHOLD


def _timed(fn) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _accuracy(qs: Sequence[Question], scores: Sequence[float]) -> dict[str, Any]:
    """Multiple-choice accuracy (the argmax choice) with a percentile bootstrap interval over questions."""
    correct, at = [], 0
    for q in qs:
        s = scores[at: at + len(q.choices)]
        correct.append(float(max(range(len(s)), key=s.__getitem__) == q.label))
        at += len(q.choices)
    mean, lo, hi = bootstrap_mean(correct)
    return {"mean": mean, "ci95": [lo, hi]}


def bench_loglikelihood(lm, qs: Sequence[Question], batch: int = 32,
                        extend_threshold: float = CONDITIONAL_EXTEND_THRESHOLD, reference: bool = False,
                        event: str = "boundary") -> dict[str, Any]:
    """Conditional against canonical ``loglikelihood`` on the questions' (context, " " + choice) requests.

    Conditional runs as the lm-eval model does by default (canonical-head prefill, lazy extension at
    ``extend_threshold``, ``event``: the continuation then a boundary, a question's choices in one batch); ``reference``: also the exhaustive beam
    (``extend_threshold=0``) on the same requests, its time, and the per-request error of the lazy setting's
    estimates against it (median, p95 and max in nats; the accuracy under each).
    """
    from ppl_tok.strings.boundary import spans_join
    from ppl_tok.strings.conditional import conditionals_many

    pairs = [(q.context, continuation(c)) for q in qs for c in q.choices]
    config = StringSearchConfig(prefill="canonical-head", extend_threshold=extend_threshold)
    per_q = [len(q.choices) for q in qs]
    chunks, at = [], 0  # whole questions per batch, as the lm-eval model's chunks
    for n in per_q:
        if chunks and chunks[-1][1] - chunks[-1][0] + n <= batch:
            chunks[-1] = (chunks[-1][0], chunks[-1][1] + n)
        else:
            chunks.append((at, at + n))
        at += n

    def canonical_scores(todo: Sequence[tuple[str, str]]) -> list[float]:
        return [s for lo in range(0, len(todo), batch) for s in lm.log_probs_many(
            [lm.canonical(x) for _, x in todo[lo: lo + batch]], [c for c, _ in todo[lo: lo + batch]])]

    def conditional_scores(cfg: StringSearchConfig) -> list[Any]:
        return [r for lo, hi in chunks for r in conditionals_many(
            lm, [c for c, _ in pairs[lo: hi]], [x for _, x in pairs[lo: hi]], config=cfg, event=event)]

    canonical_scores(pairs[:4])  # one-time costs (the cover index, first calls) stay out
    conditionals_many(lm, [c for c, _ in pairs[:4]], [x for _, x in pairs[:4]], config=config, event=event)
    lm.clear_cache()
    canonical, t_can = _timed(lambda: canonical_scores(pairs))
    lm.clear_cache()
    lm.stats.reset()
    found, t_cond = _timed(lambda: conditional_scores(config))
    conditional = [r.estimate for r in found]
    moved = [b - a for a, b in zip(canonical, conditional)]
    spanning = [spans_join(lm, c, x) for c, x in pairs]
    out: dict[str, Any] = {"requests": len(pairs), "questions": len(qs), "batch": batch, "event": event,
                           "extend_threshold": extend_threshold, "forwards": lm.stats.forwards, "calls": lm.stats.calls,
                           "canonical_seconds": t_can, "conditional_seconds": t_cond, "ratio": t_cond / t_can,
                           "moved_over_0.01_nats": sum(abs(m) > 0.01 for m in moved),
                           "spanning_join": sum(spanning), "max_abs_moved": max(abs(m) for m in moved),
                           "uninformative": sum(r.width > WIDE_NATS for r in found),
                           "canonical_accuracy": _accuracy(qs, canonical),
                           "conditional_accuracy": _accuracy(qs, conditional)}
    if reference:
        lm.clear_cache()
        exhaustive, t_ref = _timed(lambda: [r.estimate for r in conditional_scores(replace(config, extend_threshold=0.0))])
        err = sorted(abs(a - b) for a, b in zip(conditional, exhaustive))
        out["exhaustive"] = {"seconds": t_ref, "ratio": t_ref / t_can, "accuracy": _accuracy(qs, exhaustive),
                             "error_nats": {"median": statistics.median(err), "p95": err[int(0.95 * (len(err) - 1))],
                                            "max": err[-1]},
                             "moved_over_0.01_nats": sum(abs(b - a) > 0.01 for a, b in zip(canonical, exhaustive))}
    return out


def bench_generate_until(lm, qs: Sequence[Question], max_gen_toks: int = 16, bytes_per_token: int = 4
                         ) -> dict[str, Any]:
    """Sampled and greedy generation over strings after the questions' contexts (what ``generate_until`` runs)
    against token sampling of the same byte budget, ``max_gen_toks x bytes_per_token`` bytes."""
    from ppl_tok.common.seeds import pair_seed
    from ppl_tok.strings.generate import generate

    budget = max_gen_toks * bytes_per_token
    config = StringSearchConfig(prefill="canonical-head")

    def run(greedy: bool) -> list[str]:
        kw = {"greedy": True, "mode": "bytes"} if greedy else {}
        return [generate(lm, q.context, budget, config=config, seed=pair_seed(0, "generate", str(i), 0),
                         progress=False, **kw).text for i, q in enumerate(qs)]

    generate(lm, qs[0].context, 4, config=config, progress=False)  # warm-up
    rows: dict[str, Any] = {"prompts": len(qs), "budget_bytes": budget}
    lm.clear_cache()
    tokens = [_token_sampling(lm, q.context, budget, seed=i) for i, q in enumerate(qs)]
    base = sum(r["bytes"] for r in tokens) / sum(r["seconds"] for r in tokens)
    rows["token_sampling_bytes_per_s"] = base
    for name, greedy in (("sampled", False), ("greedy", True)):
        lm.clear_cache()
        calls, forwards = lm.stats.calls, lm.stats.forwards
        texts, secs = _timed(lambda: run(greedy))
        made = max(1, sum(len(t.encode("utf-8")) for t in texts))
        rate = made / secs
        rows[f"{name}_bytes_per_s"] = rate
        rows[f"{name}_ratio"] = rate / base
        # the cost per generated byte (docs/lm-eval.md): seconds, LM calls and token-forwards, prompts included
        rows[f"{name}_seconds_per_byte"] = secs / made
        rows[f"{name}_calls_per_byte"] = (lm.stats.calls - calls) / made
        rows[f"{name}_forwards_per_byte"] = (lm.stats.forwards - forwards) / made
    return rows


def format_lm_eval(r: dict[str, Any]) -> list[str]:
    ll = r["loglikelihood"]
    lines = [f"loglikelihood, {ll['requests']} requests ({ll['questions']} questions), batch {ll['batch']}: canonical "
             f"{ll['canonical_seconds']:.1f} s, conditional (extend threshold {ll['extend_threshold']:g}) "
             f"{ll['conditional_seconds']:.1f} s: {ll['ratio']:.2f}x (target <= 3x); {ll['forwards']} token-forwards "
             f"in {ll['calls']} LM calls",
             f"  moved by more than 0.01 nats: {ll['moved_over_0.01_nats']}; a token spans the join: "
             f"{ll['spanning_join']}; largest move {ll['max_abs_moved']:.4f} nats; uninformative intervals "
             f"{ll['uninformative']}",
             *(f"  accuracy {k}: {ll[k + '_accuracy']['mean']:.3f} [{ll[k + '_accuracy']['ci95'][0]:.3f}, "
               f"{ll[k + '_accuracy']['ci95'][1]:.3f}]" for k in ("canonical", "conditional"))]
    ref = ll.get("exhaustive")
    if ref:
        e = ref["error_nats"]
        lines.append(f"  exhaustive beam (extend threshold 0): {ref['seconds']:.1f} s ({ref['ratio']:.2f}x); the default's "
                     f"error against it: median {e['median']:.2g}, p95 {e['p95']:.2g}, max {e['max']:.2g} nats; "
                     f"accuracy {ref['accuracy']['mean']:.3f}; moved by more than 0.01 nats {ref['moved_over_0.01_nats']}")
    g = r.get("generate_until")
    if g:
        parts = [f"token sampling {g['token_sampling_bytes_per_s']:.1f} B/s"] + [
            f"{what} {g[k + '_bytes_per_s']:.1f} B/s ({g[k + '_ratio']:.2f}x{target})" for k, what, target in
            (("sampled", "sampled over strings", ", target >= 0.5x"), ("greedy", "greedy byte by byte", ""))]
        lines.append(f"generate_until, {g['prompts']} prompts, {g['budget_bytes']} bytes each: " + "; ".join(parts))
        if "greedy_forwards_per_byte" in g:
            lines.append("  per generated byte: " + "; ".join(
                f"{what} {g[k + '_seconds_per_byte']:.3f} s, {g[k + '_calls_per_byte']:.2f} LM calls, "
                f"{g[k + '_forwards_per_byte']:.1f} token-forwards" for k, what in
                (("sampled", "sampled"), ("greedy", "greedy"))))
    return lines


__all__ = ["bench_generate_until", "bench_loglikelihood", "format_lm_eval"]
