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

import time
from collections.abc import Sequence
from typing import Any

from ppl_tok.bench.strings import _token_sampling
from ppl_tok.common.bootstrap import bootstrap_mean
from ppl_tok.datasets import Question, continuation
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.certified import WIDE_NATS


def _timed(fn) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench_loglikelihood(lm, qs: Sequence[Question], batch: int = 32) -> dict[str, Any]:
    """Conditional against canonical ``loglikelihood`` on the questions' (context, " " + choice) requests."""
    from ppl_tok.strings.boundary import spans_join
    from ppl_tok.strings.conditional import conditionals_many

    pairs = [(q.context, continuation(c)) for q in qs for c in q.choices]
    config = StringSearchConfig(prefill="canonical-head")  # the lm-eval model's default

    def canonical_scores(todo: Sequence[tuple[str, str]]) -> list[float]:
        return [s for lo in range(0, len(todo), batch) for s in lm.log_probs_many(
            [lm.canonical(x) for _, x in todo[lo: lo + batch]], [c for c, _ in todo[lo: lo + batch]])]

    def conditional_scores(todo: Sequence[tuple[str, str]]) -> list[Any]:
        return [r for lo in range(0, len(todo), batch) for r in conditionals_many(
            lm, [c for c, _ in todo[lo: lo + batch]], [x for _, x in todo[lo: lo + batch]], config=config)]

    canonical_scores(pairs[:4])  # one-time costs (the cover index, first calls) stay out
    conditional_scores(pairs[:4])
    lm.clear_cache()
    canonical, t_can = _timed(lambda: canonical_scores(pairs))
    lm.clear_cache()
    found, t_cond = _timed(lambda: conditional_scores(pairs))
    conditional = [r.estimate for r in found]
    moved = [b - a for a, b in zip(canonical, conditional)]
    spanning = [spans_join(lm, c, x) for c, x in pairs]
    out: dict[str, Any] = {"requests": len(pairs), "questions": len(qs), "batch": batch,
                           "canonical_seconds": t_can, "conditional_seconds": t_cond, "ratio": t_cond / t_can,
                           "moved_over_0.01_nats": sum(abs(m) > 0.01 for m in moved),
                           "spanning_join": sum(spanning), "max_abs_moved": max(abs(m) for m in moved),
                           "uninformative": sum(r.width > WIDE_NATS for r in found)}
    for name, scores in (("canonical", canonical), ("conditional", conditional)):
        correct, at = [], 0
        for q in qs:
            s = scores[at: at + len(q.choices)]
            correct.append(float(max(range(len(s)), key=s.__getitem__) == q.label))
            at += len(q.choices)
        mean, lo, hi = bootstrap_mean(correct)
        out[f"{name}_accuracy"] = {"mean": mean, "ci95": [lo, hi]}
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
        texts, secs = _timed(lambda: run(greedy))
        rate = sum(len(t.encode("utf-8")) for t in texts) / secs
        rows[f"{name}_bytes_per_s"] = rate
        rows[f"{name}_ratio"] = rate / base
    return rows


def format_lm_eval(r: dict[str, Any]) -> list[str]:
    ll = r["loglikelihood"]
    lines = [f"loglikelihood, {ll['requests']} requests ({ll['questions']} questions), batch {ll['batch']}: canonical "
             f"{ll['canonical_seconds']:.1f} s, conditional {ll['conditional_seconds']:.1f} s: {ll['ratio']:.2f}x "
             "(target <= 3x)",
             f"  moved by more than 0.01 nats: {ll['moved_over_0.01_nats']}; a token spans the join: "
             f"{ll['spanning_join']}; largest move {ll['max_abs_moved']:.4f} nats; uninformative intervals "
             f"{ll['uninformative']}",
             *(f"  accuracy {k}: {ll[k + '_accuracy']['mean']:.3f} [{ll[k + '_accuracy']['ci95'][0]:.3f}, "
               f"{ll[k + '_accuracy']['ci95'][1]:.3f}]" for k in ("canonical", "conditional"))]
    g = r.get("generate_until")
    if g:
        parts = [f"token sampling {g['token_sampling_bytes_per_s']:.1f} B/s"] + [
            f"{what} {g[k + '_bytes_per_s']:.1f} B/s ({g[k + '_ratio']:.2f}x{target})" for k, what, target in
            (("sampled", "sampled over strings", ", target >= 0.5x"), ("greedy", "greedy byte by byte", ""))]
        lines.append(f"generate_until, {g['prompts']} prompts, {g['budget_bytes']} bytes each: " + "; ".join(parts))
    return lines


__all__ = ["bench_generate_until", "bench_loglikelihood", "format_lm_eval"]
