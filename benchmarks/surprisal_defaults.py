"""Which lazy-extension setting can be `ppl-tok surprisal`'s default (issue 45, item 5)?

For each candidate `--extend-threshold`, the word surprisals over strings of held-out items against the exhaustive
setting (`--extend-threshold 0`: every kept prefix) on the same words: the median, 99th percentile and max of the
per-word absolute difference in bits, and the time against canonical-token surprisal of the same items batched the
same way, all in one process. The target: median <= 0.01 bits and p99 <= 0.1 bits per word; the default is the
cheapest candidate that meets it on text it was not chosen on.

Usage: python benchmarks/surprisal_defaults.py DATA_FILE OUT.jsonl [--words 1000] [--thresholds 0.1,0.01,...]
Resumable: each finished setting is one line of OUT.jsonl; a rerun skips the settings already there. The
exhaustive reference (OUT.reference.json) and every row record the package version they ran on (`code`: the git
commit of the checkout); a rerun on other code is refused rather than mixed with them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

if not __package__:  # run as a file (python benchmarks/NAME.py): the checkout's root on the path, for benchmarks.*
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("out", type=Path)
    ap.add_argument("--words", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--thresholds", default="0.1,0.03,0.01,0.003,0.001")
    args = ap.parse_args()

    import torch

    from ppl_tok import load_lm
    from benchmarks.surprisal import held_out_items
    from ppl_tok.strings import StringSearchConfig
    from ppl_tok.strings.surprisal import canonical_surprisals_many, surprisals, surprisals_many

    torch.set_num_threads(1)
    import subprocess
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip() or "unknown"
    done = {}
    if args.out.is_file():
        for line in args.out.read_text().splitlines():
            row = json.loads(line)
            done[row["extend_threshold"]] = row
            if row.get("code", code) != code:
                raise SystemExit(f"{args.out} was measured on {row['code']}, this checkout is {code}: use another OUT")
    lm = load_lm("smollm2-135m")
    items = held_out_items(args.data, args.words)
    base = StringSearchConfig()
    surprisals(lm, "Warm up.", config=base)

    def timed(fn):
        t0 = time.perf_counter()
        rows = [r for i in range(0, len(items), args.batch) for r in fn(items[i: i + args.batch])]
        return rows, time.perf_counter() - t0

    def write(row):
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    reference_path = args.out.with_suffix(".reference.json")
    if reference_path.is_file():
        reference = json.loads(reference_path.read_text())
        if reference.get("code", code) != code:
            raise SystemExit(f"{reference_path} was measured on {reference['code']}, this checkout is {code}")
    else:
        canon, canon_s = timed(lambda ts: canonical_surprisals_many(lm, ts))
        rows, seconds = timed(lambda ts: surprisals_many(lm, ts, config=replace(base, extend_threshold=0.0)))
        reference = {"code": code, "data": str(args.data), "words": sum(len(r) for r in rows), "items": len(items),
                     "canonical_seconds": canon_s, "seconds": seconds,
                     "surprisal": [u.surprisal for r in rows for u in r]}
        reference_path.write_text(json.dumps(reference))
    truth = reference["surprisal"]
    for s in [float(x) for x in args.thresholds.split(",")]:
        if s in done:
            continue
        canon, canon_s = timed(lambda ts: canonical_surprisals_many(lm, ts))
        rows, seconds = timed(lambda ts: surprisals_many(lm, ts, config=replace(base, extend_threshold=s)))
        got = [u.surprisal for r in rows for u in r]
        diff = [abs(a - b) for a, b in zip(got, truth, strict=True)]
        write({"code": code, "data": str(args.data), "extend_threshold": s, "words": len(got), "canonical_seconds": canon_s,
               "seconds": seconds, "ratio_to_canonical": seconds / canon_s,
               "exhaustive_ratio_to_canonical": reference["seconds"] / reference["canonical_seconds"],
               "median_bits": statistics.median(diff), "p99_bits": _quantile(diff, 0.99), "max_bits": max(diff),
               "mean_bits": sum(got) / len(got), "exhaustive_mean_bits": sum(truth) / len(truth)})


if __name__ == "__main__":
    main()
