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


#: the look-ahead shares ``a`` of the defensive mixture tried on the tuning split
DEFENSIVE_GRID = (0.0, 0.1, 0.3)


def bench_defensive(model: str = "smollm2-135m", *, train: int = 60, steps: int = 60, particles: int = 16,
                    tune: int = 6, heldout: int = 15, grid: Sequence[float] = DEFENSIVE_GRID,
                    sizes: Sequence[int] = (64, 256), seed: int = 0, max_paths: int = 3000,
                    records: str | Path = "defensive-runs.jsonl", proposal_file: str | Path | None = None,
                    data: str | Path | None = None, **lm_options: Any) -> dict[str, Any]:
    """The defensive mixture's share ``a`` chosen on a tuning split, reported on a held-out one.

    A proposal is trained on ``train`` SocialIQA dev answers (``steps`` steps); the tuning split is
    ``tune`` OpenBookQA *dev* answers, the held-out split ``heldout`` OpenBookQA *test* answers (no
    context, 24 to ``max_paths`` tokenizations, none a training string). On the tuning split each
    ``a`` in ``grid`` runs at the largest ``N`` (seed ``seed``); the chosen ``a`` is the one with the
    smallest 90th-percentile error (then median; then the smaller ``a``). On the held-out split the
    chosen ``a`` runs at every ``N`` in ``sizes``, the look-ahead and ``a = 0`` at the largest. Every run is one line
    of ``records`` (the fields of ``python -m benchmarks diagnostics``' runs, plus ``split``, ``a``,
    ``distinct`` and ``support``), appended as it finishes; a rerun resumes.
    """
    from benchmarks.diagnostics import RunRecords, _record
    from ppl_tok.infer.importance import marginal
    from ppl_tok.infer.learn import train_proposal
    from ppl_tok.infer.search import marginal_bounds
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.proposals import LearnedProposal

    lm = load_lm(model, **lm_options)
    root = {} if data is None else {"root": data}
    train_texts = [t for _, t in pick_strings(data_file("socialiqa", "dev", **root), lm.vocab, train)]
    seen = set(train_texts)
    splits = {}
    for split, (name, part, count) in {"tune": ("openbookqa", "dev", tune),
                                       "heldout": ("openbookqa", "test", heldout)}.items():
        picked = pick_strings(data_file(name, part, **root), lm.vocab, count + len(seen), max_paths=max_paths)
        splits[split] = [t for _, t in picked if t not in seen][:count]
    start = time.perf_counter()
    trained = train_proposal(train_texts, lm, steps, particles=particles, seed=seed, path=proposal_file)
    train_seconds = time.perf_counter() - start
    weights = trained.weights.tolist()
    path = Path(records)
    with RunRecords.open_file(path) as store:
        truths: dict[str, float] = {}

        def run(split: str, text: str, label: str, a: float | None, n: int) -> None:
            if any(r["text"] == text and r["method"] == label and r["num_samples"] == n and r.get("split") == split
                   for r in store.records):
                return
            if text not in truths:
                lm.clear_cache()
                truths[text] = marginal_bounds(text, lm, tolerance=1e-5, budget=None).lower
            guide = "lookahead" if a is None else LearnedProposal(weights, defensive=a).guide
            lm.clear_cache()
            est = marginal(text, lm, n, guide=guide, seed=seed)
            record = _record(est, label, seed, "", truths[text])
            record.update(split=split, a=a, distinct=est.distinct, support=est.support, weights=weights)
            store.append([record])

        big = max(sizes)
        for text in splits["tune"]:
            for a in grid:
                run("tune", text, f"learned a={a:g}", a, big)
        chosen = choose_defensive([r for r in store.records if r.get("split") == "tune"], grid, big)
        for text in splits["heldout"]:  # the chosen a at every N first; the look-ahead and a = 0 at the largest
            for n in sorted(sizes, reverse=True):
                run("heldout", text, f"learned a={chosen:g}", chosen, n)
            run("heldout", text, "lookahead", None, big)
            if chosen != 0.0:
                run("heldout", text, "learned a=0", 0.0, big)
        rows = list(store.records)
    return {"model": model, "train_texts": train_texts, "weights": weights, "steps": trained.step,
            "train_seconds": train_seconds, "tune_texts": splits["tune"], "heldout_texts": splits["heldout"],
            "grid": list(grid), "chosen_a": chosen, "records": str(path),
            "summary": summarize_runs(rows), "seconds": time.perf_counter() - start}


def choose_defensive(rows: list[dict[str, Any]], grid: Sequence[float], n: int) -> float:
    """The ``a`` of ``grid`` with the smallest 90th-percentile error at ``N = n`` (then median, then smaller ``a``)."""
    def key(a: float) -> tuple[float, float, float]:
        errors = np.abs([r["error"] for r in rows if r.get("a") == a and r["num_samples"] == n])
        if errors.size == 0:
            return (np.inf, np.inf, a)
        return (float(np.quantile(errors, 0.9)), float(np.median(errors)), a)

    return min(grid, key=key)


def summarize_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (split, method, N): median and p90 of ``|error|``, mean forwards, runs off by > 1 nat and those unwarned."""
    from benchmarks.diagnostics import checks_of

    out = []
    for key in sorted({(r["split"], r["method"], r["num_samples"]) for r in rows}):
        runs = [r for r in rows if (r["split"], r["method"], r["num_samples"]) == key]
        errors = np.abs([r["error"] for r in runs])
        bad = [r for r in runs if abs(r["error"]) > 1.0]
        out.append({"split": key[0], "method": key[1], "num_samples": key[2], "runs": len(runs),
                    "median_error": float(np.median(errors)), "p90_error": float(np.quantile(errors, 0.9)),
                    "mean_forwards": float(np.mean([r["forwards"] for r in runs])), "bad": len(bad),
                    "bad_unwarned": sum(1 for r in bad if not checks_of(r)),
                    "warned": sum(1 for r in runs if checks_of(r))})
    return out


def format_defensive(result: dict[str, Any]) -> list[str]:
    """The table of :func:`bench_defensive` as text lines."""
    lines = [f"learned w = ({', '.join(f'{x:.3f}' for x in result['weights'])}), {result['steps']} steps; "
             f"a chosen on the tuning split: {result['chosen_a']:g}",
             "split    method          N   median |err|   p90 |err|   forwards   bad  unwarned  warned"]
    for e in result["summary"]:
        lines.append(f"{e['split']:<8} {e['method']:<14} {e['num_samples']:>4}   {e['median_error']:>12.4f}   "
                     f"{e['p90_error']:>9.4f}   {e['mean_forwards']:>8.1f}   {e['bad']:>3}  {e['bad_unwarned']:>8}"
                     f"  {e['warned']:>6}")
    return lines
