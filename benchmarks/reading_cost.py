"""Where the reading study's predictor CPU goes, against minicons-style canonical word surprisal, in one process
(issue 59, the cost benchmark line).

On the first ``--chars`` characters of each of ``--texts`` (Provo text ids, 1-based), one thread:

* ``canonical``: :func:`~ppl_tok.strings.surprisal.canonical_surprisals_many` on a fresh LM: the canonical tokens'
  word surprisal, what minicons computes (one forward per text); the baseline of the ratio;
* ``walk``: :func:`~ppl_tok.reading.focal_surprisal.walk_events` on a fresh LM (the study's walk at its default
  lazy extension: every event of every focal area, the canonical column included), under :mod:`cProfile`, its CPU
  split into the LM's forwards (the HF model's ``_prefill`` / ``_extend`` / ``_recompute``), the word-end events
  (``_boundary_event``, forwards excluded: they are in the first), and the rest (the walk's host work);
* ``regions``: :func:`~ppl_tok.reading.focal_surprisal.focal_table` from the events (every region of every
  variant: 4 conventions x 10 areas x 3 families and the bracket), no LM.

The figure: (walk + regions) / canonical CPU seconds (the issue's goal: at most 3x), and the share of each part.

With ``--sweep 1,6`` the texts are also walked, unprofiled, in groups of 1 and of 6 (the study's ``--batch-size``):
one LM call serves every text of a group, and a call of a few rows costs about what one row does on a CPU.

Usage (from the checkout's root): nice -n 10 python -m benchmarks.reading_cost --texts 1,2,3 --chars 100 \\
    --out results/reading/cost-smollm2 [--sweep 1,6]
Writes OUT.json and OUT.md. Not resumable (a few minutes).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

STIMULI = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "reading" / "provo" / "stimuli.txt"
FORWARDS = ("_prefill", "_extend", "_recompute")


def cut_at_word(text: str, chars: int) -> str:
    """The text's first words, at most ``chars`` characters (all of it when ``chars`` is 0)."""
    if not chars or len(text) <= chars:
        return text
    return text[:text.rfind(" ", 0, chars + 1)]


def provo_texts(stimuli: Path, texts: str, chars: int) -> tuple[list[int], list[str]]:
    """The ids of ``texts`` (comma-separated, 1-based) and those stimuli, normalised and cut at ``chars``."""
    from ppl_tok.reading.corpus import read_stimuli
    from ppl_tok.reading.focal import normalise

    ids = [int(t) for t in texts.split(",")]
    every = read_stimuli(stimuli)
    return ids, [cut_at_word(normalise(every[i - 1]), chars) for i in ids]


def profile_parts(prof: cProfile.Profile) -> dict[str, float]:
    """Seconds inside the LM's forward methods and inside the word-end events (their own forwards excluded)."""
    stats = pstats.Stats(prof)
    forwards = boundary = boundary_forwards = 0.0
    for (file, _line, name), (_cc, _nc, _tt, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name in FORWARDS and "ppl_tok/lm" in file:
            # count top-level calls only: callers that are not forwards themselves
            forwards += sum(v[3] for (cf, _cl, cn), v in callers.items() if cn not in FORWARDS)
        if name == "_boundary_event":
            boundary += ct
    # forwards issued from inside the word-end events
    for (file, _line, name), (_cc, _nc, _tt, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name == "extend" and "strings/state" in file:
            boundary_forwards += sum(v[3] for (cf, _cl, cn), v in callers.items() if cn == "_boundary_event")
    return {"forwards_s": forwards, "boundary_event_s": boundary, "boundary_forwards_s": boundary_forwards}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stimuli", type=Path, default=STIMULI)
    p.add_argument("--texts", default="1,2,3", help="Provo text ids, 1-based (default 1,2,3)")
    p.add_argument("--chars", type=int, default=120, help="the first CHARS characters, cut at a space (0: all)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--sweep", default="", help="also walk the texts in groups of each of these sizes (comma-separated; "
                   "the study's --batch-size), unprofiled, on a fresh LM each")
    p.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    args = p.parse_args(argv)

    import torch

    from ppl_tok.cli.reading import EXTEND
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.reading.focal_surprisal import focal_table, walk_events
    from ppl_tok.strings.beam import StringSearchConfig
    from ppl_tok.strings.surprisal import canonical_surprisals_many

    torch.set_num_threads(1)
    ids, texts = provo_texts(args.stimuli, args.texts, args.chars)
    config = StringSearchConfig(extend_threshold=EXTEND)
    out: dict[str, Any] = {"texts": ids, "chars": sum(map(len, texts)), "words": sum(len(t.split()) for t in texts),
                           "model": args.model, "extend_threshold": EXTEND}

    lm = load_lm(args.model)
    c0 = time.process_time()
    canonical_surprisals_many(lm, texts)
    out["canonical_cpu_s"] = time.process_time() - c0

    lm = load_lm(args.model)  # fresh: nothing cached from the canonical pass
    calls = {"forward_calls": 0, "forward_rows": 0}
    for name in ("_prefill", "_extend"):
        inner = getattr(lm, name)

        def counted(first: list[Any], *rest: Any, _inner: Any = inner) -> Any:
            calls["forward_calls"] += 1
            calls["forward_rows"] += len(first)
            return _inner(first, *rest)

        setattr(lm, name, counted)
    prof = cProfile.Profile(time.process_time)  # CPU seconds, as the figures
    c0 = time.process_time()
    prof.enable()
    events = walk_events(lm, texts, config=config)
    prof.disable()
    out["walk_cpu_s"] = time.process_time() - c0
    out.update(calls)
    parts = profile_parts(prof)
    out["walk_forwards_cpu_s"] = parts["forwards_s"]
    out["walk_boundary_host_cpu_s"] = parts["boundary_event_s"] - parts["boundary_forwards_s"]
    out["walk_boundary_forwards_cpu_s"] = parts["boundary_forwards_s"]
    c0 = time.process_time()
    table = focal_table(events, ids)  # type: ignore[arg-type]
    out["regions_cpu_s"] = time.process_time() - c0
    out["predictor_columns"] = sum(c.startswith(("Surprisal", "Canonical")) for c in table.columns)
    total = out["walk_cpu_s"] + out["regions_cpu_s"]
    out["all_predictors_over_canonical"] = total / out["canonical_cpu_s"]
    out["cpu_s_per_word"] = total / out["words"]
    out["walk_forwards_share"] = out["walk_forwards_cpu_s"] / total
    out["sweep"] = []
    for b in [int(x) for x in args.sweep.split(",") if x]:
        lm = load_lm(args.model)
        c0 = time.process_time()
        for at in range(0, len(texts), b):
            walk_events(lm, texts[at:at + b], config=config)
        cpu = time.process_time() - c0
        out["sweep"].append({"batch": b, "walk_cpu_s": cpu, "cpu_s_per_word": cpu / out["words"],
                             "over_canonical": cpu / out["canonical_cpu_s"]})
    out["load_avg_at_end"] = os.getloadavg()[0]
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime")
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:12]  # type: ignore[attr-defined]
    out["top_own_time"] = [[f"{Path(f).name}:{n}", round(v[2], 3)] for (f, _l, n), v in top]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    md = [f"# Reading predictors' CPU, {args.model}, Provo texts {args.texts} (first {args.chars} characters each)",
          "", f"`python -m benchmarks.reading_cost --texts {args.texts} --chars {args.chars} --sweep {args.sweep} "
          f"--out {args.out}` "
          f"(one thread; load average {out['load_avg_at_end']:.1f} on 2 cores: CPU seconds are the figure)", "",
          "| part | CPU s | share |", "|---|---|---|"]
    for key, label in (("walk_forwards_cpu_s", "walk: LM forwards"),
                       ("walk_boundary_host_cpu_s", "walk: word-end events (host)"),
                       ("regions_cpu_s", "regions (every variant, no LM)")):
        md.append(f"| {label} | {out[key]:.2f} | {out[key] / total:.1%} |")
    rest = out["walk_cpu_s"] - out["walk_forwards_cpu_s"] - out["walk_boundary_host_cpu_s"]
    md.append(f"| walk: the rest (host) | {rest:.2f} | {rest / total:.1%} |")
    md += ["", f"{out['words']} words, {out['chars']} characters; {out['forward_calls']} forward calls, "
           f"{out['forward_rows']} rows; all predictors {total:.2f} CPU s ({out['cpu_s_per_word']:.2f} per word) "
           f"against canonical word surprisal {out['canonical_cpu_s']:.2f} CPU s: "
           f"**{out['all_predictors_over_canonical']:.1f}x** (goal: at most 3x; the profiler adds its overhead to the "
           "host parts)"]
    if out["sweep"]:
        md += ["", "Unprofiled, the texts walked in groups of `batch` (the study's `--batch-size`):", "",
               "| batch | walk CPU s | per word | / canonical |", "|---|---|---|---|"]
        md += [f"| {r['batch']} | {r['walk_cpu_s']:.2f} | {r['cpu_s_per_word']:.3f} | {r['over_canonical']:.1f}x |"
               for r in out["sweep"]]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    if not __package__:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
