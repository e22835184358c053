"""``python -m benchmarks learned``: the learned proposal against the look-ahead and the stratified one, on held-out strings.

A :class:`~ppl_tok.proposals.LearnedProposal` is trained
(:func:`ppl_tok.infer.learn.train_proposal`, stock ``ReweightedWakeSleep``) on
``train`` answers of SocialIQA dev, then each of ``heldout`` answers of
OpenBookQA dev (a data set it never saw; none of its strings among the training
ones; 24 to ``max_paths`` tokenizations each, no context) gets its exact ``log p(x)``
(the certified bracket closed to 1e-5 nats) and one importance estimate per
proposal (``lookahead``, ``stratified``, ``learned``) and ``N``, each from an
empty LM cache so that the forwards it reports are its own. Reported per
(proposal, ``N``): the median and the 90th percentile of
``|log p_hat - log p|`` and the mean token-forwards per string, and each
median's ratio to the look-ahead's (all in one process, one LM).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.diagnostics import pick_strings
from ppl_tok.datasets import data_file

METHODS = ("lookahead", "stratified", "learned")
#: a smoke-test configuration (a minute on one CPU thread)
QUICK = {"train": 3, "heldout": 3, "steps": 3, "sizes": (16,)}


def bench_learned(model: str = "smollm2-135m", *, train: int = 10, heldout: int = 30,
                  sizes: Sequence[int] = (64, 256), steps: int = 20, particles: int = 16, lr: float = 0.1,
                  seed: int = 0, data: str | Path | None = None, proposal_file: str | Path | None = None,
                  max_paths: int = 3000, on_row: Any = None, **lm_options: Any) -> dict[str, Any]:
    """The benchmark of the module docstring, as a JSON-able dict (``rows``: one per held-out string).

    :param max_paths: the most tokenizations of a held-out string (the exact marginal's cost grows with it).
    :param on_row: called with each held-out string's row as it is done (progress, partial results).
    """
    from tqdm import tqdm

    from ppl_tok.infer.importance import marginal
    from ppl_tok.infer.learn import train_proposal
    from ppl_tok.infer.search import marginal_bounds
    from ppl_tok.lm.cards import load_lm

    lm = load_lm(model, **lm_options)
    root = {} if data is None else {"root": data}
    train_texts = [t for _, t in pick_strings(data_file("socialiqa", "dev", **root), lm.vocab, train)]
    picked = pick_strings(data_file("openbookqa", "dev", **root), lm.vocab, heldout + train, max_paths=max_paths)
    test_texts = [t for _, t in picked if t not in set(train_texts)][:heldout]
    start = time.perf_counter()
    proposal = train_proposal(train_texts, lm, steps, particles=particles, lr=lr, seed=seed, path=proposal_file)
    train_seconds = time.perf_counter() - start
    rows = []
    for text in tqdm(test_texts, desc="held-out strings", unit="string", leave=False):
        lm.clear_cache()
        truth = marginal_bounds(text, lm, tolerance=1e-5, budget=None).lower
        row: dict[str, Any] = {"text": text, "log_p": truth, "runs": []}
        for method in METHODS:
            guide = proposal.guide if method == "learned" else method
            for n in sizes:
                lm.clear_cache()
                before = lm.stats.forwards
                est = marginal(text, lm, n, guide=guide, seed=seed)
                row["runs"].append({"method": method, "num_samples": n, "log_p_hat": est.log_marginal,
                                    "error": abs(est.log_marginal - truth), "forwards": lm.stats.forwards - before})
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return {"model": model, "train_texts": train_texts, "weights": proposal.weights.tolist(), "steps": proposal.step,
            "train_seconds": train_seconds, "sizes": list(sizes), "max_paths": max_paths, "rows": rows, "summary": summarize(rows, sizes)}


def summarize(rows: list[dict[str, Any]], sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Per (method, N): median and 90th percentile of the absolute error, mean forwards, ratios to the look-ahead."""
    out = []
    for n in sizes:
        base = None
        for method in METHODS:
            runs = [r for row in rows for r in row["runs"] if r["method"] == method and r["num_samples"] == n]
            if not runs:
                continue
            errors = np.array([r["error"] for r in runs])
            entry = {"method": method, "num_samples": n, "strings": len(runs),
                     "median_error": float(np.median(errors)), "p90_error": float(np.quantile(errors, 0.9)),
                     "mean_forwards": float(np.mean([r["forwards"] for r in runs]))}
            base = base or entry
            entry["forwards_ratio"] = entry["mean_forwards"] / max(base["mean_forwards"], 1e-12)
            out.append(entry)
    return out


def format_learned(result: dict[str, Any]) -> list[str]:
    """The summary table as text lines."""
    w = ", ".join(f"{x:.3f}" for x in result["weights"])
    lines = [f"learned proposal: w = ({w}) after {result['steps']} steps on {len(result['train_texts'])} SocialIQA "
             f"answers ({result['train_seconds']:.0f} s); {len(result['rows'])} held-out OpenBookQA answers",
             "proposal      N   median |err|   p90 |err|   forwards/string   x look-ahead"]
    for e in result["summary"]:
        lines.append(f"{e['method']:<11} {e['num_samples']:>4}   {e['median_error']:>12.4f}   {e['p90_error']:>9.4f}"
                     f"   {e['mean_forwards']:>15.1f}   {e['forwards_ratio']:>12.2f}")
    return lines
