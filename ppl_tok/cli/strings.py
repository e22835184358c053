"""``ppl-tok conditional``, ``generate`` and ``next``: the LM over strings on the command line."""

from __future__ import annotations

import argparse

from ppl_tok.common.arguments import POSITIVE, SEED, log_prob_floor, positive, top_mass
from ppl_tok.cli.common import (_check_utf8, _emit, _load_lm, add_command, add_search_arguments, add_text_arguments,
                                lm_specs, refuse_ignored, search_config)
from ppl_tok.cli.strings_batch import add_batch_arguments, run_task


def cmd_conditional(args: argparse.Namespace) -> None:
    run_task(args, "conditional")  # one prompt or --input FILE, one LM or an ensemble (cli.strings_batch)


def cmd_generate(args: argparse.Namespace) -> None:
    if args.greedy and (args.temperature is not None or args.top_p is not None):
        raise ValueError("--greedy takes the most probable byte: --temperature and --top-p do not apply "
                         "(drop them, or drop --greedy to sample)")
    if args.canonical:
        return _generate_canonical(args)
    args.temperature = 1.0 if args.temperature is None else args.temperature
    args.top_p = 1.0 if args.top_p is None else args.top_p
    run_task(args, "generate")


#: ``generate``'s flags that ``--canonical`` has no use for: the beam over strings, the batch and the ensemble's
CANONICAL_IGNORES = ("--beam", "--prune", "--search-budget", "--extend-threshold", "--boundary-threshold",
                     "--rejoin-threshold", "--prefill", "--prompt-field", "--out", "--batch-size", "--ray", "--workers",
                     "--kind", "--weight")


def _generate_canonical(args: argparse.Namespace) -> None:
    """``generate --canonical``: tokens from the LM conditioned on canonicality, each step renormalised
    (:func:`~ppl_tok.infer.canonical_lm.canonical_generate`)."""
    from ppl_tok.infer.canonical_lm import canonical_generate

    refuse_ignored(args, CANONICAL_IGNORES, "--canonical samples tokens from the canonical LM of one prompt with one "
                   "LM (no beam over strings, no batch, no ensemble)", "drop FLAG, or drop --canonical")
    if len(lm_specs(args)) > 1:
        raise ValueError("--canonical samples from one LM: give one --model (an ensemble has no canonical LM here), "
                         "or drop --canonical")
    for flag, value in (("--temperature", args.temperature), ("--top-p", args.top_p), ("--greedy", args.greedy or None),
                        ("--stop", args.stop or None), ("--context", args.context or None),
                        ("--input", args.input), ("--mode", None if args.mode == "auto" else args.mode)):
        if value is not None:
            raise ValueError(f"--canonical samples tokens from the canonical LM of one prompt: {flag} does not apply "
                             f"(drop {flag}, or drop --canonical)")
    prompt = args.prompt or ""
    _check_utf8("--prompt", prompt)
    lm = _load_lm(args)
    g = canonical_generate(lm, prompt, args.max_bytes, seed=args.seed)
    payload = {"model": lm.name, "canonical": True, "seed": args.seed, "prompt": prompt, "text": g.text,
               "tokens": g.tokens, "log_prob_local": g.log_prob, "log_prob": g.plain, "stopped": g.stopped,
               "forwards": g.forwards}
    lines = [prompt + g.text, f"-- {len(g.text.encode())} bytes in {len(g.tokens)} canonical tokens ({g.stopped}), "
             f"log l = {g.log_prob:.4f} (canonical LM, local), log p = {g.plain:.4f}, {g.forwards} LM forwards"]
    _emit(args, payload, lines)


def cmd_next(args: argparse.Namespace) -> None:
    if args.min_log_prob is not None and not args.chars:
        raise ValueError("--min-log-prob applies to --chars only (the next-byte table explores nothing): "
                         "add --chars or drop --min-log-prob")
    run_task(args, "next")


def cmd_boundary(args: argparse.Namespace) -> None:
    from pathlib import Path

    from ppl_tok.datasets import _open
    from ppl_tok.strings.boundary import boundary_report, move_trailing_space

    if (args.file is None) == (args.task is None):
        raise ValueError("give either FILE (JSON Lines of requests) or --task NAME (an lm-eval task), not "
                         f"{'both' if args.file else 'neither'}")
    pairs = []
    if args.task is not None:  # through lm-eval's task API
        from ppl_tok.integrations.lm_eval_requests import task_pairs

        pairs = task_pairs(args.task, args.tasks_dir, limit=args.limit)
        source = f"lm-eval task {args.task}"
    else:
        for n, row in _open(Path(args.file)):  # JSON Lines, errors naming file:line
            if not all(isinstance(row.get(k), str) for k in args.fields):
                raise ValueError(f"{args.file}:{n}: expected string fields {' and '.join(map(repr, args.fields))} "
                                 "(--fields CONTEXT CONTINUATION names them)")
            context, text = row[args.fields[0]], row[args.fields[1]]
            if not move_trailing_space(context, text)[1]:  # as boundary_report would find it, after the load
                raise ValueError(f"{args.file}:{n}: the continuation {args.fields[1]!r} is empty (after the context's "
                                 "trailing whitespace moves to it): nothing to score; give it text, or drop the line")
            pairs.append((context, text))
        source = args.file
    report = boundary_report(_load_lm(args), pairs, search_config(args), threshold=args.threshold, event=args.event)
    s = report.summary()
    lines = [f"{source}: {s['requests']} requests; {s['spanning']} have a canonical token spanning the join",
             f"moved by more than {args.threshold:g} nats (the conditional over strings, the continuation then a "
             f"boundary, vs canonical): {s['moved']} "
             f"({s['moved_spanning']} of them spanning); largest move {s['max_abs_moved']:.4f} nats",
             f"the prefix event's figure moved in {s['moved_prefix']}, by cause: "
             + ", ".join(f"{c} {n}" for c, n in s["moved_prefix_by_cause"].items())]
    for r in report.rows:
        if r["spans_join"] or abs(r["moved"]) > args.threshold or r["cause"] is not None:
            lines.append(f"  {r['index']:5d} {r['context'][-30:]!r} + {r['continuation'][:30]!r}: canonical "
                         f"{r['canonical']:.4f}, conditional {r['conditional']:.4f} ({r['moved']:+.4f}), prefix "
                         f"{r['prefix']:.4f} ({r['moved_prefix']:+.4f})" + (f"  [{r['cause']}]" if r["cause"] else ""))
    _emit(args, {"model": args.model, "source": source, **s, "rows": report.rows}, lines)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``conditional``, ``generate``, ``next`` and ``boundary`` to the ``ppl-tok`` subcommands."""
    p = add_command(sub, "boundary", "the boundary report of (context, continuation) requests: which have a canonical "
                    "token spanning the join, and how far canonical scoring and the conditional over strings differ "
                    "(docs/lm-eval.md)", "lm")
    p.add_argument("file", metavar="FILE", nargs="?", help="JSON Lines, one request per line (or --task)")
    p.add_argument("--task", metavar="NAME", help="an lm-eval task instead of FILE: its loglikelihood requests, "
                   "read through lm-eval's task API (e.g. a task of ppl-tok-lm-eval write-tasks; offline data)")
    p.add_argument("--tasks-dir", metavar="D", help="the folder of --task's YAML (lm-eval's --include_path; "
                   "default: lm-eval's own tasks)")
    p.add_argument("--limit", type=POSITIVE, metavar="N", help="--task: its first N documents only")
    p.add_argument("--fields", nargs=2, default=["context", "continuation"], metavar=("CONTEXT", "CONTINUATION"),
                   help="the two string fields of a line (default: context continuation)")
    p.add_argument("--threshold", type=positive, default=0.01, metavar="NATS",
                   help="a request moved if the two scores differ by more (default 0.01)")
    p.add_argument("--event", choices=["boundary", "prefix"], default="boundary",
                   help="the conditional's event: the continuation then a boundary character or the end (default, "
                        "lm-eval's scoring=conditional), or the output begins with it (prefix)")
    add_search_arguments(p)
    p.set_defaults(func=cmd_boundary)

    p = add_command(sub, "conditional", "log p(TEXT | prompt) over strings: every tokenization of prompt and text, with a "
            "certified interval (no prompt boundary problem)", "lms")
    add_text_arguments(p)
    p.add_argument("--prompt", help="the prompt string, cut anywhere (\"\": unconditional); required without --input")
    add_search_arguments(p)
    add_batch_arguments(p, text=True)
    p.set_defaults(func=cmd_conditional)
    p = add_command(sub, "generate", "sample or greedily decode bytes after a prompt string from the LM over strings",
                    "lms")
    p.add_argument("--prompt", help="the prompt string, cut anywhere (default: none)")
    p.add_argument("--context", default="", help="text before the prompt, canonically tokenized (default: none)")
    p.add_argument("--max-bytes", type=POSITIVE, default=64,
                   help="bytes to generate at most (default 64; at most the generated_bytes limit, docs/limits.md)")
    p.add_argument("--temperature", type=positive, help="divide the next-byte log-probs by this (default 1)")
    p.add_argument("--top-p", type=top_mass, help="sample from the smallest set holding this mass (default 1)")
    p.add_argument("--greedy", action="store_true",
                   help="take the most probable byte each time (not with --temperature or --top-p)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    p.add_argument("--stop", action="append", default=[], metavar="STRING", help="end at this string (repeatable)")
    p.add_argument("--canonical", action="store_true",
                   help="sample tokens from the LM conditioned on canonicality (each step renormalised over the "
                        "tokens that keep prompt and continuation the tokenizer's own encoding; docs/canonical_lm.md)")
    p.add_argument("--mode", choices=["auto", "bytes", "tokens"], default="auto",
                   help="tokens: a covering of the prompt, then plain token sampling (fast); bytes: byte by byte "
                        "(needed by --temperature, --top-p, --greedy); auto (default): tokens where it applies")
    add_search_arguments(p)
    add_batch_arguments(p, text=False)
    p.set_defaults(func=cmd_generate)
    p = add_command(sub, "next", "the next-byte (or next-character) distribution after a prompt string, with certified "
            "intervals", "lms")
    p.add_argument("--prompt", help="the prompt string, cut anywhere (default: none)")
    p.add_argument("--context", default="", help="text before the prompt, canonically tokenized (default: none)")
    p.add_argument("--chars", action="store_true", help="UTF-8 characters instead of bytes")
    p.add_argument("--min-log-prob", type=log_prob_floor, metavar="NATS",
                   help="with --chars: leave partial characters below this unexplored (default -12; -inf: none)")
    p.add_argument("--top", type=POSITIVE, default=10, help="rows printed (default 10; --json has them all)")
    add_search_arguments(p)
    add_batch_arguments(p, text=False)
    p.set_defaults(func=cmd_next)


__all__ = ["register"]
