"""``ppl-tok conditional``, ``generate`` and ``next``: the LM over strings on the command line."""

from __future__ import annotations

import argparse

from ppl_tok.common.arguments import POSITIVE, LaterChoices, positive
from ppl_tok.common.params import add_flags_later
from ppl_tok.cli.common import (_check_utf8, _emit, _load_lm, add_command, add_search_arguments, add_text_arguments,
                                lm_specs, refuse_ignored, search_config)
from ppl_tok.cli.strings_batch import add_batch_arguments, run_task
from ppl_tok.strings.conditional_event import DEFAULT_EVENT, EVENTS


def cmd_conditional(args: argparse.Namespace) -> None:
    run_task(args, "conditional")  # one prompt or --input FILE, one LM or an ensemble (cli.strings_batch)


def cmd_generate(args: argparse.Namespace) -> None:
    if args.canonical:
        return _generate_canonical(args)
    run_task(args, "generate", stop=tuple(args.stop))  # --stop, repeatable, is the task's stop


def cmd_task(args: argparse.Namespace) -> None:
    """``ppl-tok task NAME``: any registered string task, its own flags (and no other task's) read."""
    from ppl_tok.common.params import refuse_foreign
    from ppl_tok.strings.tasks import string_task

    refuse_foreign(args, {args.task: string_task(args.task).params}, _task_params(), "TASK")
    run_task(args, args.task)


def _task_names() -> tuple[str, ...]:
    from ppl_tok.strings.tasks import TASKS

    return tuple(TASKS.names())


def _task_params() -> dict[str, type]:
    """Every registered task's parameters by its name (read when a command parses, not for ``--help``)."""
    from ppl_tok.strings.tasks import TASKS

    return {name: task.params for name, task in TASKS.items()}


#: ``generate``'s flags that ``--canonical`` has no use for: the beam over strings, the batch and the ensemble's
CANONICAL_IGNORES = ("--beam", "--prune", "--search-budget", "--extend-threshold", "--boundary-threshold",
                     "--rejoin-threshold", "--prefill", "--prompt-field", "--out", "--batch-size", "--ray", "--workers",
                     "--kind", "--weight")


def _generate_canonical(args: argparse.Namespace) -> None:
    """``generate --canonical``: tokens from the LM conditioned on canonicality, each step renormalised
    (:func:`~ppl_tok.infer.canonical_lm.canonical_generate`)."""
    from ppl_tok.infer.canonical_lm import canonical_generate

    from ppl_tok.common.params import from_args, given, specs
    from ppl_tok.strings.tasks import GenerateParams

    refuse_ignored(args, CANONICAL_IGNORES, "--canonical samples tokens from the canonical LM of one prompt with one "
                   "LM (no beam over strings, no batch, no ensemble)", "drop FLAG, or drop --canonical")
    if len(lm_specs(args)) > 1:
        raise ValueError("--canonical samples from one LM: give one --model (an ensemble has no canonical LM here), "
                         "or drop --canonical")
    own = from_args(GenerateParams, args)  # its checks (--greedy with --temperature) as without --canonical
    flags = {s.name: s.flag for s in specs(GenerateParams)}
    sampling = [flags[name] for name in given(args) if name not in ("max_bytes", "seed")]
    for flag, value in ((sampling[0] if sampling else "", sampling or None), ("--stop", args.stop or None),
                        ("--context", args.context or None), ("--input", args.input)):
        if value is not None:
            raise ValueError(f"--canonical samples tokens from the canonical LM of one prompt: {flag} does not apply "
                             f"(drop {flag}, or drop --canonical)")
    prompt = args.prompt or ""
    _check_utf8("--prompt", prompt)
    lm = _load_lm(args)
    g = canonical_generate(lm, prompt, own.max_bytes, seed=own.seed)
    payload = {"model": lm.name, "canonical": True, "seed": own.seed, "prompt": prompt, "text": g.text,
               "tokens": g.tokens, "log_prob_local": g.log_prob, "log_prob": g.plain, "stopped": g.stopped,
               "forwards": g.forwards}
    lines = [prompt + g.text, f"-- {len(g.text.encode())} bytes in {len(g.tokens)} canonical tokens ({g.stopped}), "
             f"log l = {g.log_prob:.4f} (canonical LM, local), log p = {g.plain:.4f}, {g.forwards} LM forwards"]
    _emit(args, payload, lines)


def cmd_next(args: argparse.Namespace) -> None:
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


def add_task_flags(p: argparse.ArgumentParser, name: str) -> None:
    """The flags of task ``name``'s own parameters (:attr:`~ppl_tok.strings.tasks.StringTask.params`), added when the
    command first parses or shows its help."""
    from ppl_tok.common.params import add_flags_later

    add_flags_later(p, lambda: {name: _task_params()[name]}, "task")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``conditional``, ``generate``, ``next``, ``task`` and ``boundary`` to the ``ppl-tok`` subcommands."""
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
    p.add_argument("--event", choices=EVENTS, default=DEFAULT_EVENT,
                   help="the conditional's event (default %(default)s, as ppl-tok conditional's and lm-eval's "
                        "scoring=conditional): boundary (the continuation then a boundary character or the end) or "
                        "prefix (the output begins with it)")
    add_search_arguments(p)
    p.set_defaults(func=cmd_boundary)

    p = add_command(sub, "conditional", "log p(TEXT | prompt) over strings: every tokenization of prompt and text, with a "
            "certified interval (no prompt boundary problem)", "lms")
    add_text_arguments(p)
    p.add_argument("--prompt", help="the prompt string, cut anywhere (\"\": unconditional); required without --input")
    add_search_arguments(p)
    add_batch_arguments(p, text=True)
    add_task_flags(p, "conditional")
    p.set_defaults(func=cmd_conditional)
    p = add_command(sub, "generate", "sample or greedily decode bytes after a prompt string from the LM over strings",
                    "lms")
    p.add_argument("--prompt", help="the prompt string, cut anywhere (default: none)")
    p.add_argument("--context", default="", help="text before the prompt, canonically tokenized (default: none)")
    add_task_flags(p, "generate")
    p.add_argument("--stop", action="append", default=[], metavar="STRING", help="end at this string (repeatable)")
    p.add_argument("--canonical", action="store_true",
                   help="sample tokens from the LM conditioned on canonicality (each step renormalised over the "
                        "tokens that keep prompt and continuation the tokenizer's own encoding; docs/canonical_lm.md)")
    add_search_arguments(p)
    add_batch_arguments(p, text=False)
    p.set_defaults(func=cmd_generate)
    p = add_command(sub, "next", "the next-byte (or next-character) distribution after a prompt string, with certified "
            "intervals", "lms")
    p.add_argument("--prompt", help="the prompt string, cut anywhere (default: none)")
    p.add_argument("--context", default="", help="text before the prompt, canonically tokenized (default: none)")
    add_task_flags(p, "next")
    p.add_argument("--top", type=POSITIVE, default=10, help="rows printed (default 10; --json has them all)")
    add_search_arguments(p)
    add_batch_arguments(p, text=False)
    p.set_defaults(func=cmd_next)
    p = add_command(sub, "task", "any registered string task (ppl_tok.strings.tasks.TASKS: a user's own too) on a "
                    "prompt or on --input's items, with that task's own flags", "lms")
    p.add_argument("task", metavar="TASK", choices=LaterChoices(_task_names), help="the task: %(choices)s")
    p.add_argument("--prompt", help="the prompt string, cut anywhere (default: none)")
    p.add_argument("--text", help="the text after the prompt, for a task that reads one (conditional)")
    p.add_argument("--context", default="", help="text before the prompt, canonically tokenized (default: none)")
    p.add_argument("--top", type=POSITIVE, default=10, help="rows a table prints (default 10; --json has them all)")
    add_search_arguments(p)
    add_batch_arguments(p, text=True)
    add_flags_later(p, _task_params, "TASK")
    p.set_defaults(func=cmd_task)


__all__ = ["register"]
