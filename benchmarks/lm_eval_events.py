"""Multiple-choice accuracy under each event an answer's score can name (issue 58, item 3).

On multiple-choice questions, lm-eval's ``(context, " " + choice)`` requests scored three ways, the argmax choice
against the gold one:

* ``canonical``: ``log p(v*(choice) | v*(context))`` (lm-eval's ``hf``, ``scoring=canonical``);
* ``conditional-boundary``: ``scoring=conditional``'s default, the continuation then a boundary character or
  the end over strings (:mod:`ppl_tok.strings.conditional`, ``event="boundary"``);
* ``conditional-prefix``: ``event=prefix``, the output after the context begins with the continuation (the
  same walk gives both: :attr:`~ppl_tok.strings.conditional.StringConditional.prefix_estimate`);

each with a percentile bootstrap interval over questions (:func:`ppl_tok.common.bootstrap.bootstrap_mean`) and
each conditional's paired difference from canonical (:func:`~ppl_tok.common.bootstrap.paired_difference`). The
conditional runs as the lm-eval model does by default (canonical-head prefill, lazy extension at
:data:`~ppl_tok.integrations.lm_eval_strings.EXTEND_THRESHOLD`, a question's choices in one batch).

Usage: python -m benchmarks.lm_eval_events DATA_FILE OUT.jsonl [--questions 100] [--summary SUMMARY.json]
Resumable: one line of OUT.jsonl per question (its scores under each); a rerun skips those there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EVENTS = ("canonical", "conditional-boundary", "conditional-prefix")


def score_question(lm, context: str, choices: list[str], extend_threshold: float) -> dict[str, list[float]]:
    """The choices' scores under each of :data:`EVENTS`."""
    from ppl_tok.datasets import continuation
    from ppl_tok.strings.beam import StringSearchConfig
    from ppl_tok.strings.boundary import move_trailing_space
    from ppl_tok.strings.conditional import conditionals_many

    pairs = [move_trailing_space(context, continuation(c)) for c in choices]
    canonical = lm.log_probs_many([lm.canonical(x) for _, x in pairs], [c for c, _ in pairs])
    config = StringSearchConfig(prefill="canonical-head", extend_threshold=extend_threshold)
    found = conditionals_many(lm, [c for c, _ in pairs], [x for _, x in pairs], config=config, event="boundary")
    return {"canonical": list(canonical), "conditional-boundary": [r.estimate for r in found],
            "conditional-prefix": [r.prefix_estimate for r in found]}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy per event with its bootstrap interval, each conditional's paired difference from canonical, and
    how often the events pick different answers."""
    from ppl_tok.common.bootstrap import bootstrap_mean, paired_difference

    def pick(s: list[float]) -> int:
        return max(range(len(s)), key=s.__getitem__)

    correct = {e: [float(pick(r["scores"][e]) == r["label"]) for r in rows] for e in EVENTS}
    out: dict[str, Any] = {"questions": len(rows), "accuracy": {}, "difference_from_canonical": {}}
    for e in EVENTS:
        m = bootstrap_mean(correct[e])
        out["accuracy"][e] = {"mean": m[0], "ci95": [m[1], m[2]]}
        if e != "canonical":
            d = paired_difference(correct[e], correct["canonical"])
            out["difference_from_canonical"][e] = {"mean": d[0], "ci95": [d[1], d[2]]}
    out["picks_differ"] = {e: sum(pick(r["scores"][e]) != pick(r["scores"]["canonical"]) for r in rows)
                           for e in EVENTS[1:]}
    for e in EVENTS[1:]:  # requests whose score moved from canonical's, and the mean move (nats)
        moves = [a - b for r in rows for a, b in zip(r["scores"][e], r["scores"]["canonical"])]
        out.setdefault("moved_over_0.01_nats", {})[e] = sum(abs(m) > 0.01 for m in moves)
        out.setdefault("mean_move_nats", {})[e] = sum(moves) / len(moves)
    out["requests"] = sum(len(r["scores"]["canonical"]) for r in rows)
    out["boundary_vs_prefix_picks_differ"] = sum(pick(r["scores"]["conditional-boundary"])
                                                 != pick(r["scores"]["conditional-prefix"]) for r in rows)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="a multiple-choice file ppl_tok.datasets.load_questions reads")
    ap.add_argument("out", type=Path)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--summary", type=Path)
    ap.add_argument("--no-run", action="store_true", help="only --summary from OUT.jsonl")
    args = ap.parse_args(argv)
    from ppl_tok.integrations.lm_eval_strings import EXTEND_THRESHOLD

    rows = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.is_file() else []
    for n, r in enumerate(rows, 1):
        if (r["model"], r["extend_threshold"]) != (args.model, EXTEND_THRESHOLD) and not args.no_run:
            raise SystemExit(f"{args.out}:{n}: measured with {r['model']} at extend_threshold "
                             f"{r['extend_threshold']}, this run is {args.model} at {EXTEND_THRESHOLD}: use another OUT")
    if not args.no_run:
        import torch

        from ppl_tok.datasets import load_questions
        from ppl_tok.lm.cards import load_lm

        torch.set_num_threads(1)
        lm = load_lm(args.model, device="cpu")
        done = {r["id"] for r in rows}
        for q in load_questions(args.data)[: args.questions]:
            if q.id in done:
                continue
            row = {"model": args.model, "extend_threshold": EXTEND_THRESHOLD, "id": q.id, "label": q.label,
                   "scores": score_question(lm, q.context, list(q.choices), EXTEND_THRESHOLD)}
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
    if args.summary is not None and rows:
        summary = summarise(rows)
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
        print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
