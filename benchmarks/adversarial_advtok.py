"""ppl-tok's certified adversarial search beside advtok's greedy search, on the same LM, prompts, targets (issue 48).

Both maximise ``log p(target | BOS, v, suffix)`` over tokenizations ``v`` of an OpenBookQA question (the
target: one of its *wrong* answers, " " + text, after ``suffix = "\\nAnswer:"``), with SmolLM2-135M (the
bundled card, the same ``transformers`` model object for both).

* advtok (PyPI 0.0.5, ``advtok.search.greedy``, unmodified): canonical start, distance-2 neighbours,
  ``--iters`` iterations. Its chat template is replaced by the benchmark's fixed tokens (the one hook it offers:
  ``advtok.jailbreak.template_chunks`` knows only Llama/Gemma templates), with the suffix as its
  ``frozen_suffix`` so that it scores exactly the target. Its cost: the token positions its forward calls run
  (the attention masks' sums, counted by a forward hook). Its answer is rescored under the objective above
  (advtok selects by a length-normalised score).
* ppl-tok (:func:`ppl_tok.infer.adversarial.adversarial_search`) over the balls ``d = 2, 4``, one run with a
  budget of ``100x`` advtok's token-forwards (and ``--time-cap`` seconds: the CPU is shared); its trace gives
  the state at ``1x`` and ``10x`` (the last batch within the budget, so a budget run would do as well or better).
  Cold caches for every run.

Reported per prompt and level: the best found, whether the certificate closed, ``complete_within``, and
advtok's best with its token edit distance from canonical. The check: where ppl-tok's certificate closes
over a ball holding advtok's answer, ppl-tok's best is at least advtok's.

Run (the peer venv: /work/peer-venvs/advtok, see benchmarks/README.md):

    OMP_NUM_THREADS=1 TQDM_DISABLE=1 /work/peer-venvs/advtok/bin/python benchmarks/adversarial_advtok.py --n 20

Resumable: prompts already in ``OUT/runs.jsonl`` are skipped; ``OUT/summary.json`` is rewritten at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import transformers  # noqa: E402

from ppl_tok.datasets import data_file, read_openbookqa  # noqa: E402
from ppl_tok.infer.adversarial import adversarial_search, problem, score_tokenizations  # noqa: E402
from ppl_tok.infer.neighbourhood import levenshtein  # noqa: E402
from ppl_tok.lm.cards import cache_dir, load_lm  # noqa: E402
from ppl_tok.lm.spec import LMSpec  # noqa: E402

SUFFIX = "\nAnswer:"
LEVELS = (1, 10, 100)


def items(n: int, max_bytes: int) -> list[tuple[str, str, str]]:
    """``(id, question, wrong answer)``: the first ``n`` test questions of at most ``max_bytes`` bytes."""
    out = []
    for q in read_openbookqa(data_file("openbookqa", "test")):
        if len(q.context.encode()) <= max_bytes:
            out.append((q.id, q.context, " " + q.choices[(q.label + 1) % len(q.choices)]))
        if len(out) == n:
            break
    return out


def run_advtok(lm, tok, pb, iters: int, batch: int) -> tuple[tuple[int, ...], int, float]:
    """advtok's greedy answer (the prompt's tokens), its token-forwards and seconds."""
    import advtok.jailbreak
    import advtok.mdd
    import advtok.search

    if advtok.mdd._no_vocab_cache(tok):
        # advtok's vocabulary map (surface string -> id), which it builds in a process pool that dies on this
        # machine and costs ~1 ms a token serially; for a byte-level BPE its surface is the token's bytes decoded
        # with errors="replace" (what `convert_tokens_to_string` gives), read from ppl-tok's vocabulary
        vocab = {}
        for t in range(len(lm.vocab)):
            raw = lm.vocab[t]
            if raw and t not in lm.vocab.special_ids:
                vocab.setdefault(raw.decode("utf-8", errors="replace"), t)
        advtok.mdd.cache_vocab(tok, cache=vocab, persistent=False)

    head, tail, target = list(pb.prefix_ids), list(pb.suffix_ids), list(pb.target_ids)
    advtok.jailbreak.template_chunks = lambda s, r, t, **kw: (head, [], [], target)
    seen = {"positions": 0}

    def count(module, args, kwargs):
        seen["positions"] += int(kwargs["attention_mask"].sum())

    hook = lm.model.register_forward_pre_hook(count, with_kwargs=True)
    start = time.perf_counter()
    try:
        x = advtok.search.greedy(lm.model, tok, pb.prompt, iters, "", "", batch, frozen_suffix=tail,
                                 X_0="canonical", only_dist2=True, early_stop=True)
    finally:
        hook.remove()
    return tuple(x[: len(x) - len(tail)]), seen["positions"], time.perf_counter() - start


def at_budget(trace: list, budget: float, size: int) -> dict:
    """The search's state after its last batch within ``budget`` token-forwards."""
    within = [t for t in trace if t[0] <= budget]
    if not within:
        return {"reached": False}
    forwards, examined, best, complete = within[-1]
    return {"reached": True, "forwards": forwards, "best": best, "closed": examined == size,
            "complete_within": complete, "examined": examined}


def one(lm, tok, item, args) -> dict:
    qid, question, target = item
    pb = problem(lm, question, target, suffix=SUFFIX)
    lm.clear_cache()
    adv, adv_forwards, adv_seconds = run_advtok(lm, tok, pb, args.iters, args.batch)
    lm.clear_cache()
    valid = pb.space.mdd.accepts(adv)
    adv_lp = score_tokenizations(pb, [adv])[0][0] if valid else math.nan
    rec = {"id": qid, "prompt": question, "target": target, "canonical_tokens": len(pb.canonical),
           "advtok": {"log_prob": adv_lp, "distance": levenshtein(adv, pb.canonical) if valid else None,
                      "valid": valid, "forwards": adv_forwards, "seconds": adv_seconds,
                      "same_canonical": list(pb.canonical) == tok.encode(question, add_special_tokens=False)}}
    for d in (2, 4):
        lm.clear_cache()
        r = adversarial_search(lm, question, target, suffix=SUFFIX, distance=d, budget=LEVELS[-1] * adv_forwards,
                               time_budget=args.time_cap, batch=args.batch)
        rec[f"d{d}"] = {"size": r.size, "canonical_log_prob": r.canonical_log_prob, "final_best": r.best_log_prob,
                        "final_closed": r.closed, "forwards": r.forwards, "seconds": r.seconds, "stopped": r.stopped,
                        "advtok_inside": valid and rec["advtok"]["distance"] <= d,
                        **{f"{k}x": at_budget(r.trace, k * adv_forwards, r.size) for k in LEVELS}}
    return rec


#: float32 rows: one tokenization scored in two batches differs by up to ~1e-5 nats (padding, batch size)
TIE = 1e-4


def summarise(rows: list[dict]) -> dict:
    out = {"prompts": len(rows), "tie_nats": TIE}
    for d in (2, 4):
        for k in LEVELS:
            cells = [r[f"d{d}"][f"{k}x"] for r in rows]
            reached = [c for c in cells if c["reached"]]
            closed = [r for r, c in zip(rows, cells) if c["reached"] and c["closed"]]
            vs = [(c["best"], r["advtok"]["log_prob"]) for r, c in zip(rows, cells) if c["reached"]]
            out[f"d{d}_{k}x"] = {
                "reached": len(reached), "closed": len(closed), "closure_rate": len(closed) / len(rows),
                "ppl_tok_higher": sum(a > b + TIE for a, b in vs), "equal": sum(abs(a - b) <= TIE for a, b in vs),
                "advtok_higher": sum(b > a + TIE for a, b in vs),
                "violations": [r["id"] for r, c in zip(rows, cells) if c["reached"] and c["closed"]
                               and r[f"d{d}"]["advtok_inside"] and c["best"] < r["advtok"]["log_prob"] - TIE]}
    out["advtok_forwards_median"] = sorted(r["advtok"]["forwards"] for r in rows)[len(rows) // 2]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20, help="prompts (default 20)")
    ap.add_argument("--max-bytes", type=int, default=48, help="questions of at most this many bytes (default 48)")
    ap.add_argument("--iters", type=int, default=2, help="advtok's greedy iterations (default 2)")
    ap.add_argument("--batch", type=int, default=16, help="sequences per forward call, both (default 16)")
    ap.add_argument("--time-cap", type=float, default=120.0, help="seconds per ppl-tok search (default 120)")
    ap.add_argument("--out", default=str(ROOT / "results" / "adversarial"), help="results folder")
    ap.add_argument("--summarise", action="store_true", help="only rewrite the summary of the stored runs")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs.jsonl"
    done = {json.loads(line)["id"] for line in runs.open()} if runs.exists() else set()
    if not args.summarise:
        run_all(args, runs, done)
    rows = [json.loads(line) for line in runs.open()]
    summary = summarise(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


def run_all(args: argparse.Namespace, runs: Path, done: set) -> None:
    lm = load_lm(LMSpec(model="smollm2-135m"))
    tok = transformers.AutoTokenizer.from_pretrained(cache_dir() / "smollm2-135m" / "model")
    for item in items(args.n, args.max_bytes):
        if item[0] in done:
            continue
        rec = one(lm, tok, item, args)
        with runs.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        a, d2, d4 = rec["advtok"], rec["d2"], rec["d4"]
        print(f"{item[0]}: advtok {a['log_prob']:.3f} (d={a['distance']}, {a['forwards']} fw) | "
              f"d2 {d2['final_best']:.3f} closed={d2['final_closed']} ({d2['forwards']} fw) | "
              f"d4 {d4['final_best']:.3f} closed={d4['final_closed']} ({d4['forwards']} fw)", flush=True)


if __name__ == "__main__":
    main()
