"""`ppl-tok surprisal`'s default chosen by measurement on held-out words (issue 45 item 5, issue 47's benchmark).

Each SETTING (beam knobs of `StringSearchConfig`, e.g. `extend_threshold=0.1` or
`extend_threshold=0.1,boundary_threshold=3e-5`; `exhaustive` is `extend_threshold=0`, every kept prefix extended;
`tree=W` scores through the token tree off the canonical cache with a back-off of W bytes,
`ppl_tok.strings.tree`, e.g. `tree=0,extend_threshold=1e-05`; `tree_share=TAU,tree_reach=D` add its detour roots,
`tree_extend=S,tree_roots=M,tree_depth=L` set their branches' lazy share, roots per unit and levels)
scores the first WORDS words of DATA (`benchmarks.surprisal.held_out_items`: the items in file order, each
alone after BOS, `--final` at its default) in batches of BATCH items, the LM's prefix cache emptied before each
batch. Each batch is one line of `OUT/SETTING.jsonl` (the word surprisals over strings, the process CPU seconds
and wall seconds of the walk, and of canonical-token surprisal of the same batch in the same process, the LM's
token-forwards and forward calls, and the canonical scoring's calls), appended durably: a killed run resumes at the next batch, so the long exhaustive run can be
started first and alone. `OUT/run.json` records the data, words, batch and the code (git commit) and a rerun on
other code or data is refused rather than mixed.

`--report` (no LM) compares every finished setting with `exhaustive` word by word: the median, 99th percentile
and max absolute difference in bits, and the cost (CPU seconds against canonical's, summed over batches);
the chosen default is the cheapest setting (CPU against canonical) with median <= 0.01 and p99 <= 0.1 bits (none: exhaustive stays).
`meets_issue58` is issue 58's stricter rule (p99 <= 0.01 and max <= 0.1 bits per word); `calls_per_item` the LM's
forward calls per item (the figure a GPU pays for), beside canonical scoring's.

Usage:
    python benchmarks/surprisal_grid.py DATA OUT exhaustive "extend_threshold=0.1" ... [--words 1000] [--batch 16]
    python benchmarks/surprisal_grid.py DATA OUT --report [--json SUMMARY.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a file (python benchmarks/NAME.py): the checkout's root on the path, for benchmarks.*
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_setting(text: str) -> dict[str, Any]:
    """``exhaustive`` or ``key=value,...`` over :class:`StringSearchConfig`'s fields (numbers, or ``None``)."""
    if text == "exhaustive":
        return {"extend_threshold": 0.0}
    out: dict[str, Any] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if not value:
            raise SystemExit(f"setting {text!r}: give key=value pairs (e.g. extend_threshold=0.1) or exhaustive")
        out[key.strip()] = None if value == "None" else (int(value) if value.isdigit() else float(value))
    return out


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def report(out: Path) -> dict[str, Any]:
    """Every finished setting against ``exhaustive`` (the module docstring)."""
    run = json.loads((out / "run.json").read_text())
    n_batches = -(-run["n_items"] // run["batch"])

    def batches(name: str) -> dict[int, dict[str, Any]]:
        return {r["lo"]: r for r in reversed(_rows(out / f"{name}.jsonl"))}  # a batch done twice: its first line

    reference = batches("exhaustive")
    if not reference:
        raise SystemExit(f"{out}/exhaustive.jsonl holds no batch: run the exhaustive setting first")
    settings = []
    for path in sorted(out.glob("*.jsonl")):
        mine = batches(path.stem)
        common = sorted(set(mine) & set(reference))  # every batch, or (an unfinished run) those both finished
        if not common:
            continue
        rows = [mine[lo] for lo in common]
        truth = [s for lo in common for item in reference[lo]["surprisal"] for s in item]
        got = [s for r in rows for item in r["surprisal"] for s in item]
        diff = [abs(a - b) for a, b in zip(got, truth, strict=True)]
        cpu, canon = sum(r["cpu"] for r in rows), sum(r["canonical_cpu"] for r in rows)
        items = sum(len(r["surprisal"]) for r in rows)
        calls = [r.get("calls") for r in rows]
        settings.append({"setting": path.stem, "knobs": rows[0]["knobs"], "words": len(got),
                         "batches": f"{len(common)} of {n_batches}", "cpu_seconds": cpu,
                         "canonical_cpu_seconds": canon, "ratio_to_canonical": cpu / canon,
                         "forwards": sum(r["forwards"] for r in rows),
                         "median_bits": statistics.median(diff), "p99_bits": _quantile(diff, 0.99),
                         "max_bits": max(diff), "mean_surprisal": sum(got) / len(got),
                         "calls_per_item": None if None in calls else sum(calls) / items,  # type: ignore[arg-type]
                         "canonical_calls_per_item": (None if any("canonical_calls" not in r for r in rows)
                                                      else sum(r["canonical_calls"] for r in rows) / items),
                         "meets_issue58": len(common) == n_batches and _quantile(diff, 0.99) <= 0.01
                         and max(diff) <= 0.1,
                         "meets": len(common) == n_batches and statistics.median(diff) <= 0.01
                         and _quantile(diff, 0.99) <= 0.1})
    settings.sort(key=lambda s: s["ratio_to_canonical"])
    chosen = next((s["setting"] for s in settings if s["meets"]), "exhaustive")
    return {**run, "complete": len(reference) == n_batches and all(s["batches"] == f"{n_batches} of {n_batches}"
                                                                    for s in settings), "target": "median <= 0.01 bits and p99 <= 0.1 bits per word against exhaustive",
            "settings": settings, "chosen": chosen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("out", type=Path)
    ap.add_argument("settings", nargs="*", help="exhaustive, or key=value,... over StringSearchConfig's fields")
    ap.add_argument("--words", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reverse", action="store_true",
                    help="take the batches last first (a second process beside one going first to last; the "
                         "file is read again before each batch, and a batch both did is counted once)")
    ap.add_argument("--report", action="store_true", help="compare the finished settings (no LM)")
    ap.add_argument("--json", type=Path, help="with --report: write the summary here too")
    args = ap.parse_args()
    if args.report:
        summary = report(args.out)
        text = json.dumps(summary, indent=1)
        print(text)
        if args.json:
            args.json.write_text(text + "\n")
        return

    import torch

    from ppl_tok import load_lm
    from benchmarks.surprisal import held_out_items
    from ppl_tok.strings import StringSearchConfig
    from ppl_tok.strings.surprisal import canonical_surprisals_many, surprisals_many
    from ppl_tok.strings.tree import TokenTree

    torch.set_num_threads(1)
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip() or "unknown"
    items = held_out_items(args.data, args.words)
    run = {"data": str(args.data), "words": args.words, "n_items": len(items), "batch": args.batch, "code": code,
           "model": "smollm2-135m", "threads": 1}
    args.out.mkdir(parents=True, exist_ok=True)
    run_path = args.out / "run.json"
    if run_path.is_file():
        old = json.loads(run_path.read_text())
        if old != run:
            raise SystemExit(f"{run_path} holds {old}, this run is {run}: use another OUT")
    else:
        run_path.write_text(json.dumps(run, indent=1) + "\n")
    lm = load_lm("smollm2-135m")
    for name in args.settings:
        knobs = parse_setting(name)
        tree_knobs = ("tree", "tree_share", "tree_reach", "tree_extend", "tree_roots", "tree_depth")
        config = StringSearchConfig(**{k: v for k, v in knobs.items() if k not in tree_knobs})
        search = TokenTree(int(knobs["tree"]), detour_share=knobs.get("tree_share"),  # type: ignore[arg-type]
                           detour_reach=knobs.get("tree_reach", TokenTree.detour_reach),
                           detour_extend=knobs.get("tree_extend"),
                           detour_roots=int(knobs.get("tree_roots", TokenTree.detour_roots)),
                           detour_depth=int(knobs.get("tree_depth", TokenTree.detour_depth))) if "tree" in knobs \
            else "walk"
        path = args.out / f"{name}.jsonl"
        starts = list(range(0, len(items), args.batch))
        for lo in reversed(starts) if args.reverse else starts:
            if lo in {r["lo"] for r in _rows(path)}:
                continue
            batch = items[lo: lo + args.batch]
            lm.clear_cache()
            lm.stats.reset()
            c0 = time.process_time()
            canonical_surprisals_many(lm, batch)
            canonical_cpu = time.process_time() - c0
            canonical_calls = lm.stats.calls
            lm.clear_cache()
            lm.stats.reset()
            c0, w0 = time.process_time(), time.perf_counter()
            rows = surprisals_many(lm, batch, config=config, search=search)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            line = {"lo": lo, "knobs": knobs, "cpu": cpu, "wall": wall, "canonical_cpu": canonical_cpu,
                    "forwards": lm.stats.forwards, "calls": lm.stats.calls, "canonical_calls": canonical_calls,
                    "surprisal": [[u.surprisal for u in r] for r in rows]}
            with path.open("a") as f:
                f.write(json.dumps(line) + "\n")
                f.flush()
                os.fsync(f.fileno())
            print(name, lo, f"cpu {cpu:.1f}s canonical {canonical_cpu:.2f}s", flush=True)


if __name__ == "__main__":
    main()
