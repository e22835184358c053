"""Which lazy-extension setting can be `ppl-tok perplexity --scoring beam`'s default (issue 45, item 5)?

On held-out documents, the byte-synchronous beam (beam 8, prune 12) under each candidate lazy-extension setting
against the exhaustive setting (`--extend-threshold 0`: every kept prefix run) on the same documents: the share
of the exhaustive beam's *gain* it keeps (gain: the beam's log-likelihood minus the canonical tokenization's,
nats; aggregate = summed over the documents, per-document quantiles, and the gain lost per document in bits per
byte), its token-forwards and wall time
against canonical scoring of the same documents (wall and the process's CPU seconds), canonical timed in the same
process just before each chunk.
The target: at least 90% of the exhaustive gain, aggregate; the default is the cheapest candidate meeting it with
the lower end of the share's 95% bootstrap interval over documents at least 80% (`cheapest_meeting_target_robustly`;
`cheapest_meeting_target` drops that condition).

The documents (`--corpus`): OpenBookQA dev question stems (default) or HellaSwag validation contexts, from
item `--skip` on, each one document conditioned on BOS. No beam setting was tuned on them: the beam's knob
tables used the 50-document benchmark (HellaSwag validation items from the start of the file and OpenBookQA
*test* stems) and SocialIQA dev contexts; surprisal's defaults used the first HellaSwag contexts (so
`--corpus hellaswag` takes `--skip 5000`). The documents are taken a chunk at a time, every setting on a chunk
before the next chunk, so a run stopped part way compares every setting on the same documents.

`--corpus hellaswag-long` (issue 58: the rule on long documents): documents of 1-2 kB, each built from consecutive
HellaSwag validation items from `--skip` on, every item's context and its gold ending (`context + " " + ending`)
joined by a space, items added while the document stays under 2,048 bytes and until it holds at least 1,024 (an item
that would pass 2,048 starts the next document); `--documents` counts these documents.

Usage: python benchmarks/perplexity_defaults.py DATA_DIR OUT.jsonl [--corpus openbookqa] [--skip 0]
           [--documents 100] [--chunk 10] [--settings exhaustive,0.01,...] [--summary SUMMARY.json]
A setting is `exhaustive`, a share `S` (`extend_threshold=S` everywhere) or `S/B/R` (inside / boundary / rejoin
shares), each the `beam` scoring; or `tree:SEARCH:SEGMENT`, the `tree` scoring (the token tree off the canonical
cache, ppl_tok.scorings.tree) with the search SEARCH (`default`: the scoring's own default, or one of the beam's
forms above) and `segment_bytes` SEGMENT (`tree` alone: `tree:default:0`, every word a segment). Every row records
the LM calls of the chunk (`calls`, and canonical's `canonical_calls`). Resumable: each finished (setting, chunk of documents) is one line of OUT.jsonl; a rerun skips those
already there. Every row records the code (git commit) it ran on; a rerun on other code is refused.
`--summary` writes the per-setting figures over the chunks every setting finished (`--no-run`: only that, no
model loaded).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import time
from pathlib import Path


#: the share of the exhaustive beam's gain (aggregate) the default must keep
TARGET_SHARE = 0.9
#: ... and the lower end of its 95% bootstrap interval over documents must be at least this: a few documents carry
#: most of the gain, so a setting that meets the target only through which documents were drawn is not chosen
ROBUST_LOWER = 0.8
#: nats: a document whose exhaustive gain is at least this is counted in the per-document shares of large gains
LARGE_GAIN = 0.01


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _bootstrap_share(gain: list[float], ref_gain: list[float], resamples: int = 2000, seed: int = 0) -> list[float]:
    """The 95% percentile interval of the aggregate share (a ratio of sums) over documents resampled with
    replacement (a fixed seed): how much the share depends on which documents carry the gain."""
    import random

    rng = random.Random(seed)
    n, shares = len(gain), []
    for _ in range(resamples):
        pick = [rng.randrange(n) for _ in range(n)]
        ref = math.fsum(ref_gain[i] for i in pick)
        if ref > 0:
            shares.append(math.fsum(gain[i] for i in pick) / ref)
    return [_quantile(shares, 0.025), _quantile(shares, 0.975)] if shares else [math.nan, math.nan]


def tree_setting(setting: str) -> tuple[str, int] | None:
    """``(search, segment_bytes)`` of a ``tree:SEARCH:SEGMENT`` setting (``None``: a ``beam`` setting)."""
    if setting != "tree" and not setting.startswith("tree:"):
        return None
    parts = (setting.split(":") + ["default", "0"])[1:3] if setting != "tree" else ["default", "0"]
    if len(setting.split(":")) not in (1, 3) or not parts[1].isdigit():
        raise SystemExit(f"setting {setting!r}: give tree or tree:SEARCH:SEGMENT (SEARCH default, exhaustive, S or "
                         "S/B/R; SEGMENT bytes)")
    if parts[0] != "default":
        search_options(parts[0])
    return parts[0], int(parts[1])


def scoring_config(setting: str):
    """The :class:`~ppl_tok.scorings.ScoringConfig` a setting names (``beam`` or ``tree``)."""
    from ppl_tok.scorings.registry import ScoringConfig
    from ppl_tok.strings.beam import StringSearchConfig

    tree = tree_setting(setting)
    if tree is None:
        return ScoringConfig(scoring="beam", search=StringSearchConfig(**search_options(setting)))
    search, segment = tree
    extra = {} if search == "default" else {"search": StringSearchConfig(**search_options(search))}
    return ScoringConfig(scoring="tree", segment_bytes=segment, **extra)


#: bytes: the long documents' size (``--corpus hellaswag-long``): at least the first, under the second
LONG_BYTES = (1024, 2048)


def long_documents(data_dir: str, skip: int, count: int) -> list[str]:
    """``count`` documents of 1-2 kB from HellaSwag validation items ``skip`` on (module docstring)."""
    from ppl_tok.datasets import continuation, data_file, read_hellaswag

    questions = read_hellaswag(data_file("hellaswag", "val", data_dir))[skip:]
    out, parts = [], []
    for q in questions:
        item = q.context + continuation(q.choices[q.label])
        joined = " ".join(parts + [item])
        if len(joined.encode("utf-8")) >= LONG_BYTES[1]:
            parts = [item]
            continue
        parts.append(item)
        if len(joined.encode("utf-8")) >= LONG_BYTES[0]:
            out.append(joined)
            parts = []
            if len(out) == count:
                return out
    raise SystemExit(f"{data_dir}: hellaswag from item {skip} gives {len(out)} documents of 1-2 kB, fewer than "
                     f"--documents {count}")


def search_options(setting: str) -> dict:
    """The :class:`~ppl_tok.strings.StringSearchConfig` lazy keywords of a setting's name."""
    names = ("extend_threshold", "boundary_threshold", "rejoin_threshold")
    if setting == "exhaustive":
        return dict(zip(names, (0.0, None, None)))
    shares = [float(x) for x in setting.split("/")]
    if not 1 <= len(shares) <= 3:
        raise SystemExit(f"setting {setting!r}: give 'exhaustive', S or S/B/R (inside/boundary/rejoin shares)")
    return dict(zip(names, shares + [None] * (3 - len(shares))))  # every share given: no default read


def held_out_documents(data_dir: str, corpus: str, skip: int, count: int) -> list[str]:
    """``count`` held-out texts from item ``skip`` on: OpenBookQA dev question stems or HellaSwag validation
    contexts (activity label and context, as :mod:`ppl_tok.datasets` reads them), or 1-2 kB HellaSwag documents
    (:func:`long_documents`)."""
    from ppl_tok.datasets import data_file, read_hellaswag, read_openbookqa

    if corpus == "hellaswag-long":
        return long_documents(data_dir, skip, count)
    if corpus == "openbookqa":
        questions = read_openbookqa(data_file("openbookqa", "dev", data_dir))
    elif corpus == "hellaswag":
        questions = read_hellaswag(data_file("hellaswag", "val", data_dir))
    else:
        raise SystemExit(f"--corpus must be openbookqa, hellaswag or hellaswag-long, got {corpus!r}")
    if len(questions) < skip + count:
        raise SystemExit(f"{data_dir}: {corpus} has {len(questions)} items, fewer than --skip + --documents")
    return [q.context for q in questions[skip: skip + count]]


def summarize(rows: list[dict], settings: list[str]) -> dict:
    """Per setting: cost (forwards and time against canonical) and error (share of the exhaustive gain)."""
    by, seen = {}, set()
    for r in rows:
        if (r["setting"], r["chunk"]) not in seen:  # a chunk measured twice (two processes) counts once
            seen.add((r["setting"], r["chunk"]))
            by.setdefault(r["setting"], []).extend(r["documents"])
    if "exhaustive" not in by:
        raise SystemExit("no exhaustive rows yet: the gain share needs them")
    truth = {d["index"]: d for d in by["exhaustive"]}
    first = {(r["setting"], r["chunk"]): r for r in reversed(rows)}.values()
    seconds = {s: sum(r["seconds"] for r in first if r["setting"] == s) for s in by}
    canon_seconds = {s: sum(r["canonical_seconds"] for r in first if r["setting"] == s) for s in by}
    out = {}
    for s in settings:
        docs = [d for d in by.get(s, []) if d["index"] in truth]
        if not docs:
            continue
        ref = [truth[d["index"]] for d in docs]
        gain = [d["log_likelihood"] - d["canonical"] for d in docs]
        ref_gain = [d["log_likelihood"] - d["canonical"] for d in ref]
        per_doc = [g / r for g, r in zip(gain, ref_gain) if r > 1e-6]  # documents with an exhaustive gain
        large = [g / r for g, r in zip(gain, ref_gain) if r >= LARGE_GAIN]
        lost = [(r - g) / math.log(2) / d["bytes"] for g, r, d in zip(gain, ref_gain, docs)]
        nbytes = sum(d["bytes"] for d in docs)
        calls = [r for r in first if r["setting"] == s and "calls" in r]
        out[s] = {"search": search_options(s) if tree_setting(s) is None else s, "documents": len(docs),
                  "bytes": nbytes,
                  "calls_per_document": sum(r["calls"] for r in calls) / max(1, sum(len(r["documents"]) for r in calls)),
                  "canonical_calls_per_document": sum(r["canonical_calls"] for r in calls)
                  / max(1, sum(len(r["documents"]) for r in calls)),
                  "forwards": sum(d["forwards"] for d in docs),
                  "canonical_forwards": sum(d["canonical_forwards"] for d in docs),
                  "forwards_ratio": sum(d["forwards"] for d in docs) / sum(d["canonical_forwards"] for d in docs),
                  "seconds": seconds[s], "canonical_seconds": canon_seconds[s],
                  "time_ratio": seconds[s] / canon_seconds[s],
                  "cpu_ratio": sum(r.get("cpu_seconds", math.nan) for r in first if r["setting"] == s)
                  / sum(r.get("canonical_cpu_seconds", math.nan) for r in first if r["setting"] == s),
                  "gain_nats": math.fsum(gain), "exhaustive_gain_nats": math.fsum(ref_gain),
                  "gain_share": math.fsum(gain) / math.fsum(ref_gain),
                  "gain_share_bootstrap_95": _bootstrap_share(gain, ref_gain),
                  "gain_bits_per_byte": math.fsum(gain) / math.log(2) / nbytes,
                  "documents_with_gain": len(per_doc),
                  "per_document_share": {q: _quantile(per_doc, p) for q, p in
                                         (("min", 0.0), ("p10", 0.1), ("p25", 0.25), ("median", 0.5))}
                  if per_doc else None,
                  "documents_with_gain_over_0.01_nats": len(large),
                  "per_document_share_gain_over_0.01_nats": {q: _quantile(large, p) for q, p in
                                                             (("min", 0.0), ("p10", 0.1), ("median", 0.5))}
                  if large else None,
                  "lost_bits_per_byte": {q: _quantile(lost, p) for q, p in
                                         (("median", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))},
                  "brackets_meet": sum(d["lower"] <= r["upper"] + 1e-6 and r["lower"] <= d["upper"] + 1e-6
                                       for d, r in zip(docs, ref))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir")
    ap.add_argument("out", type=Path)
    ap.add_argument("--documents", type=int, default=100)
    ap.add_argument("--corpus", default="openbookqa", choices=("openbookqa", "hellaswag", "hellaswag-long"))
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--settings", default="exhaustive,0.01,0.003,0.001,0.2/1e-3/1e-6,0.1/3e-5")
    ap.add_argument("--summary", type=Path)
    ap.add_argument("--no-run", action="store_true", help="summarize the chunks every setting finished; run nothing")
    args = ap.parse_args()
    settings = args.settings.split(",")
    for s in settings:
        if tree_setting(s) is None:
            search_options(s)

    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip() or "unknown"
    rows = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.is_file() else []
    done = {(r["setting"], r["chunk"]) for r in rows}
    texts = held_out_documents(args.data_dir, args.corpus, args.skip, args.documents)
    chunks = [range(i, min(i + args.chunk, len(texts))) for i in range(0, len(texts), args.chunk)]
    todo = [(s, k) for k in range(len(chunks)) for s in settings if (s, k) not in done]
    if todo and not args.no_run:  # a summary of finished rows reads them on any code; new rows join only rows of the same code
        for row in rows:
            if row["code"] != code:
                raise SystemExit(f"{args.out} was measured on {row['code']}, this checkout is {code}: use another OUT")
        import torch

        from ppl_tok import load_lm
        from ppl_tok.scorings import score_documents
        from ppl_tok.scorings.canonical import canonical_scores
        from ppl_tok.scorings.documents import cap_prefix_cache
        from ppl_tok.perplexity.corpus import Document

        torch.set_num_threads(1)
        lm = load_lm(args.model)
        cap_prefix_cache(lm)
        canonical_scores(lm, [Document(0, "Warm up.", "warm-up", 0)], None)
        for s, k in todo:
            docs = [Document(i, texts[i], args.corpus, args.skip + i) for i in chunks[k]]
            lm.clear_cache()
            calls = lm.stats.calls
            t0, c0 = time.perf_counter(), time.process_time()
            canonical_scores(lm, docs, None)
            canon_s, canon_cpu = time.perf_counter() - t0, time.process_time() - c0
            canon_calls = lm.stats.calls - calls
            lm.clear_cache()
            config = scoring_config(s)
            calls = lm.stats.calls
            t0, c0 = time.perf_counter(), time.process_time()
            scores = score_documents(lm, docs, config)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            row = {"code": code, "model": args.model, "data": f"{args.corpus} [{args.skip}:]", "setting": s,
                   "chunk": k, "seconds": seconds, "canonical_seconds": canon_s, "cpu_seconds": cpu,
                   "canonical_cpu_seconds": canon_cpu, "calls": lm.stats.calls - calls,
                   "canonical_calls": canon_calls,
                   "documents": [{"index": d.index, "bytes": d.n_bytes, "log_likelihood": d.log_likelihood,
                                  "canonical": d.canonical, "lower": d.lower, "upper": d.upper,
                                  "forwards": d.forwards, "canonical_forwards": d.canonical_forwards}
                                 for d in scores]}
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
            print(f"{s} chunk {k}: {seconds:.1f} s ({cpu:.1f} s CPU) against canonical {canon_s:.2f} s "
                  f"({canon_cpu:.2f} s CPU)", flush=True)
    done = {(r["setting"], r["chunk"]) for r in rows}
    finished = [k for k in range(len(chunks)) if all((s, k) in done for s in settings)]
    kept = [r for r in rows if r["setting"] in settings and r["chunk"] in finished]
    summary = summarize(kept, settings)  # every setting on the same documents: the chunks all of them finished
    meeting = [s for s, v in summary.items() if v["gain_share"] >= TARGET_SHARE]
    cheapest = min(meeting, key=lambda s: summary[s]["forwards_ratio"]) if meeting else None
    robust = [s for s in meeting if summary[s]["gain_share_bootstrap_95"][0] >= ROBUST_LOWER]
    chosen = min(robust, key=lambda s: summary[s]["forwards_ratio"]) if robust else None
    text = json.dumps({"code": sorted({r["code"] for r in kept}), "summarized_on": code, "model": args.model, "documents": sum(len(chunks[k]) for k in finished), "skip": args.skip,
                       "corpus": args.corpus, "target_gain_share": TARGET_SHARE,
                       "cheapest_meeting_target": cheapest,
                       "robust_lower": ROBUST_LOWER, "cheapest_meeting_target_robustly": chosen, "settings": summary}, indent=1)
    if args.summary:
        args.summary.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
