"""The LM over canonical tokenizations against canonical and marginal scoring (issue 48, items 3-4).

Bits per byte of short documents from the bundled data sets (OpenBookQA question stems, SocialIQA contexts)
under four document-level scorings of one LM, in one process: ``canonical`` (the canonical tokens), ``canonical-
local`` and ``canonical-global`` (the LM conditioned on canonicality, :mod:`ppl_tok.infer.canonical_lm`) and
``beam`` (the marginal over tokenizations, certified floor). The cost of each is its wall time against
``canonical``'s on the same documents (target: ``canonical-local`` within 2x); the step masks' share of
``canonical-local``'s time is reported apart (the per-step canonicality test, :mod:`ppl_tok.canonical_step`).

Usage: python benchmarks/canonical_lm.py OUT.json [--model smollm2-135m] [--docs 8] [--data openbookqa]
                                          [--samples 8] [--scorings canonical,canonical-local,...]
Each scoring's figures are written to OUT.json as soon as it is done (a rerun recomputes them all).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _texts(data: str, n: int) -> list[str]:
    if data == "openbookqa":
        rows = [json.loads(line) for line in (DATA / "openbookqa" / "test.jsonl").open()]
        return [r["question"]["stem"] for r in rows[:n]]
    rows = [json.loads(line) for line in (DATA / "socialiqa" / "dev.jsonl").open()]
    return [r["context"] for r in rows[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--data", choices=("openbookqa", "socialiqa"), default="openbookqa")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--scorings", default="canonical,canonical-local,canonical-global,beam")
    args = ap.parse_args()

    from ppl_tok.canonical_step import steps_for
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.perplexity import ScoringConfig, corpus_from_texts, score_documents

    lm = load_lm(args.model)
    docs = corpus_from_texts(_texts(args.data, args.docs), source=args.data).documents
    n_bytes = sum(len(d.text.encode()) for d in docs)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"model": args.model, "data": args.data, "docs": len(docs), "bytes": n_bytes, "code": commit,
           "samples": args.samples, "scorings": {}}
    steps = steps_for(lm.vocab)
    for name in args.scorings.split(","):
        lm.clear_cache()
        steps.clear()
        masks_before = steps.mask_seconds
        start, forwards = time.perf_counter(), lm.stats.forwards
        scores = score_documents(lm, docs, ScoringConfig(scoring=name, num_samples=args.samples))
        seconds = time.perf_counter() - start
        total = math.fsum(s.log_likelihood for s in scores)
        row = {"bits_per_byte": -total / math.log(2) / n_bytes, "seconds": seconds,
               "forwards": lm.stats.forwards - forwards,
               "canonical_bits_per_byte": -math.fsum(s.canonical for s in scores) / math.log(2) / n_bytes,
               "mask_seconds": steps.mask_seconds - masks_before}
        out["scorings"][name] = row
        base = out["scorings"].get("canonical")
        if base:
            row["time_vs_canonical"] = seconds / base["seconds"]
        print(name, json.dumps(row), flush=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
