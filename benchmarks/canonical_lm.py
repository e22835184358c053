"""The LM over canonical tokenizations against canonical and marginal scoring (issue 48, items 3-4).

Bits per byte of short documents from the bundled data sets (each a question's context and its correct answer:
OpenBookQA test, HellaSwag val, SocialIQA dev) under four document-level scorings of one LM, in one process:
``canonical`` (the canonical tokens), ``canonical-local`` and ``canonical-global`` (the LM conditioned on
canonicality, :mod:`ppl_tok.infer.canonical_lm`) and ``beam`` (the marginal over tokenizations, certified
floor). The cost of each is its wall time against ``canonical``'s on the same documents (target:
``canonical-local`` within 2x); the step masks' share of the time is reported apart (the per-step canonicality
test, :mod:`ppl_tok.canonical_step`; cold caches for each scoring), and so is the one-off build of the
merge tables (:mod:`ppl_tok.canonical_step.pairs`, once per process and vocabulary).

Usage: python benchmarks/canonical_lm.py OUT.json [--model smollm2-135m] [--docs 50]
                                          [--data openbookqa,hellaswag,socialiqa] [--samples 8]
                                          [--scorings canonical,canonical-local,canonical-global,beam]
Each scoring's figures are written to OUT.json as soon as they are done (a rerun recomputes them all).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

SPLITS = {"openbookqa": "test", "hellaswag": "val", "socialiqa": "dev"}


def _texts(data: str, n: int) -> list[str]:
    """The first ``n`` questions' contexts, each followed by its correct answer."""
    from ppl_tok import datasets

    reader = getattr(datasets, f"read_{data}")
    rows = reader(datasets.data_file(data, SPLITS[data]))[:n]
    return [f"{q.context} {q.choices[q.label]}" for q in rows]


def _brackets(lm, texts: list[str], args: argparse.Namespace) -> list[dict]:
    """``canonical-global``'s figure of each text (after BOS) with its certified bracket and its cost."""
    from ppl_tok.infer.canonical_lm import canonical_lm_scores

    rows = []
    for text in texts:
        lm.clear_cache()
        start = time.perf_counter()
        r = canonical_lm_scores(lm, [""], [text], mode="global", num_samples=args.samples, budget=args.budget)[0]
        local = canonical_lm_scores(lm, [""], [text], mode="local")[0]
        rows.append({"text": text, "bytes": len(text.encode()), "plain": r.plain, "local": local.estimate,
                     "global": r.estimate, "lower": r.lower, "upper": r.upper, "log_z": r.log_z,
                     "forwards": r.forwards, "seconds": time.perf_counter() - start})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--docs", type=int, default=50, help="documents per data set")
    ap.add_argument("--data", default=",".join(SPLITS), help="data sets, comma-separated")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--scorings", default="canonical,canonical-local,canonical-global,beam")
    ap.add_argument("--bracket", type=int, default=0, metavar="N",
                    help="also score the first N texts of each data set with canonical-global's certified bracket "
                         "(canonical_lm_scores, mode global, --budget best-first expansions per normaliser)")
    ap.add_argument("--budget", type=int, default=32)
    args = ap.parse_args()

    from ppl_tok.canonical_step import START, steps_for
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.common.params import split_values
    from ppl_tok.perplexity import ScoringConfig, corpus_from_texts, score_documents
    from ppl_tok.scorings.registry import DOCUMENT, scoring as find_scoring

    lm = load_lm(args.model)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    steps = steps_for(lm.vocab)
    start = time.perf_counter()
    steps.banned(steps.key(lm.canonical(" the")))  # builds the merge tables once (timed apart)
    steps.banned(START)
    out = {"model": args.model, "code": commit, "samples": args.samples, "docs_per_data_set": args.docs,
           "merge_tables_seconds": time.perf_counter() - start, "data": {}}
    for data in args.data.split(","):
        if data not in SPLITS:
            raise SystemExit(f"unknown data set {data!r}: expected some of {', '.join(SPLITS)}")
        docs = corpus_from_texts(_texts(data, args.docs), source=data).documents
        n_bytes = sum(len(d.text.encode()) for d in docs)
        block = out["data"][data] = {"docs": len(docs), "bytes": n_bytes, "scorings": {}}
        if args.bracket:
            block["global_brackets"] = _brackets(lm, [d.text for d in docs[: args.bracket]], args)
            print(data, "brackets", json.dumps(block["global_brackets"]), flush=True)
        for name in args.scorings.split(","):
            lm.clear_cache()
            steps.clear()
            masks_before = steps.mask_seconds
            start, forwards = time.perf_counter(), lm.stats.forwards
            own = split_values(find_scoring(name, DOCUMENT).params, {"num_samples": args.samples})[0]  # if it samples
            scores = score_documents(lm, docs, ScoringConfig(scoring=name, **own))
            seconds = time.perf_counter() - start
            total = math.fsum(s.log_likelihood for s in scores)
            row = {"bits_per_byte": -total / math.log(2) / n_bytes, "seconds": seconds,
                   "forwards": lm.stats.forwards - forwards,
                   "canonical_bits_per_byte": -math.fsum(s.canonical for s in scores) / math.log(2) / n_bytes,
                   "mask_seconds": steps.mask_seconds - masks_before,
                   "docs_above_canonical": sum(s.log_likelihood < s.canonical - 1e-9 for s in scores)}
            block["scorings"][name] = row
            base = block["scorings"].get("canonical")
            if base:
                row["time_vs_canonical"] = seconds / base["seconds"]
            print(data, name, json.dumps(row), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
