"""`ppl-tok surprisal` at its defaults against minicons on the same model and words, whole processes (issue 47, item 3).

minicons (0.3.39, in a separate virtual environment: never a dependency of ppl-tok) and `ppl-tok surprisal` score
the same held-out items (the first WORDS words of DATA, `benchmarks.surprisal.held_out_items`) with the same
model folder (the SmolLM2-135M conversion in ppl-tok's cache), each as a whole process (model loading included),
alternately A B A B ..., the wall and CPU seconds of every run taken around the child process; the figure is the
median of the pairwise ratios ppl-tok / minicons (goal: at most 2x). minicons runs `IncrementalLMScorer.
word_score_tokenized` (batches of 16, `bow_correction=True`: its word-end correction, surprisal in bits, the
words split at whitespace); ppl-tok its defaults (`--format jsonl`). With `--reference` the exhaustive setting
(`--extend-threshold 0`) runs once more and the per-word difference of the defaults' figures from it is
reported (median, p99, max in bits; 0 when the defaults are the exhaustive setting).

Usage (OMP_NUM_THREADS=1 for both is set here):
    python benchmarks/surprisal_minicons.py ../shared/data/socialiqa/dev.jsonl results/surprisal/minicons.json \\
        --minicons-python /work/peer-venvs/minicons/bin/python [--words 1000] [--runs 3] [--reference] [--ours FLAGS]
Not resumable: each call measures afresh and overwrites OUT (small: the summary and the timings).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as a file (python benchmarks/NAME.py): the checkout's root on the path, for benchmarks.*
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def minicons_worker(items: str, folder: str, batch: int) -> None:
    """Run inside minicons' environment: word surprisals of every item, one JSON list per line on stdout."""
    import torch
    from minicons import scorer

    torch.set_num_threads(1)
    lm = scorer.IncrementalLMScorer(folder, device="cpu")
    texts = [t for t in Path(items).read_text(encoding="utf-8").splitlines() if t.strip()]
    for lo in range(0, len(texts), batch):
        for words in lm.word_score_tokenized(texts[lo: lo + batch], tokenize_function=lambda s: s.split(),
                                             bow_correction=True, bos_token=True, surprisal=True, base_two=True):
            print(json.dumps([[w, float(s)] for w, s in words]))


def timed(cmd: list[str], out: Path | None = None) -> dict[str, float]:
    """One whole process: wall seconds, and the child's user+sys CPU seconds (``getrusage`` of the children)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    if out is not None:
        out.write_text(done.stdout, encoding="utf-8")
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    if sys.argv[1:2] == ["--minicons-worker"]:
        minicons_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("out", type=Path)
    ap.add_argument("--minicons-python", required=True, help="the python of minicons' own environment")
    ap.add_argument("--words", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--ours", default="", help="extra flags of ppl-tok surprisal, one string (e.g. a candidate "
                    "default: '--extend-threshold 0.1 --batch-size 64'); empty: its defaults")
    args = ap.parse_args()

    from benchmarks.surprisal import held_out_items
    from ppl_tok.lm.cards import cache_dir, load_lm

    load_lm("smollm2-135m")  # converts the bundled model once, into the cache folder both processes read
    folder = cache_dir() / "smollm2-135m" / "model"
    items = held_out_items(args.data, args.words)
    items_file = args.out.with_suffix(".items.txt")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    items_file.write_text("".join(t.replace("\n", " ") + "\n" for t in items), encoding="utf-8")
    ours = [sys.executable, "-m", "ppl_tok.cli", "surprisal", str(items_file), "--model", "smollm2-135m",
            "--format", "jsonl", *(args.ours.split() or ["--batch-size", str(args.batch)])]
    theirs = [args.minicons_python, str(Path(__file__).resolve()), "--minicons-worker", str(items_file), str(folder),
              str(args.batch)]
    rows_file = args.out.with_suffix(".rows.jsonl")
    timed(theirs)  # warm-up of both (file caches)
    runs = []
    for _ in range(args.runs):
        a = timed(ours, rows_file)
        b = timed(theirs)
        runs.append({"ppl_tok": a, "minicons": b, "wall_ratio": a["wall"] / b["wall"], "cpu_ratio": a["cpu"] / b["cpu"]})
        print(json.dumps(runs[-1]), flush=True)
    result = {"data": args.data, "words": args.words, "items": len(items), "model_folder": str(folder),
              "ppl_tok_command": " ".join(ours[1:]), "minicons": "IncrementalLMScorer.word_score_tokenized "
              "(bow_correction=True, bos_token=True, batch %d)" % args.batch, "runs": runs,
              "median_wall_ratio": statistics.median(r["wall_ratio"] for r in runs),
              "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in runs),
              "median_ppl_tok_wall": statistics.median(r["ppl_tok"]["wall"] for r in runs),
              "median_minicons_wall": statistics.median(r["minicons"]["wall"] for r in runs)}
    if args.reference:
        ref_file = args.out.with_suffix(".exhaustive.jsonl")
        result["exhaustive"] = timed(ours + ["--extend-threshold", "0"], ref_file)
        read = lambda p: [json.loads(line)["surprisal"] for line in p.read_text().splitlines()]  # noqa: E731
        err = [abs(a - b) for a, b in zip(read(rows_file), read(ref_file))]
        result["error_bits"] = {"median": statistics.median(err), "p99": _quantile(err, 0.99), "max": max(err),
                                "words": len(err)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
