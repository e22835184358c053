"""``ppl-tok conditional``, ``generate`` and ``next``: the LM over strings on the command line."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ppl_tok.common.arguments import POSITIVE, SEED, log_prob_floor, positive, top_mass
from ppl_tok.cli.common import (_check_context, _check_utf8, _emit, _load_lm, add_command, add_search_arguments,
                                add_text_arguments, lm_specs, refuse_ignored, search_config)
from ppl_tok.cli.strings_batch import add_batch_arguments, byte_bar, dispatch


def cmd_conditional(args: argparse.Namespace) -> None:
    from ppl_tok.strings.batch import Item, Members, Options, answer
    from ppl_tok.strings.certified import head_caveat

    if dispatch(args, "conditional"):  # --input FILE, or an ensemble (cli.strings_batch)
        return
    _check_utf8("--prompt", args.prompt)
    config = search_config(args)
    lm = _load_lm(args)
    _check_context(argparse.Namespace(command=args.command, text=args.prompt + args.text, context=args.context), lm,
                   walk="the prompt and the text")
    with byte_bar(args, len((args.prompt + args.text).encode("utf-8")), "conditional") as bar:  # byte by byte
        # one prompt is a batch of one item of the one runner's task (ppl_tok.strings.tasks)
        r = answer("conditional", Members((lm,)), Item(0, args.prompt, args.text, "--prompt"),
                   Options(args.context, config), on_bytes=bar.update)
    payload = {"model": lm.name, "context": args.context, **r, "beam": args.beam, "prune": args.prune}
    pp, jp = r["prompt_prefix"], r["joint_prefix"]
    lines = [f"prompt: {args.prompt!r}   text: {args.text!r}   context: {args.context!r}   model: {lm.name}",
             f"log p(text | prompt), over strings: {r['estimate']:.4f}   {'certified ' * r['certified']}in "
             f"[{r['lower']:.4f}, {r['upper']:.4f}] (rounding tolerance {r['tolerance_nats']:.1e} nats included)",
             f"  log P(prompt is a prefix):        [{pp['lower']:.4f}, {pp['upper']:.4f}]",
             f"  log P(prompt+text is a prefix):   [{jp['lower']:.4f}, {jp['upper']:.4f}]",
             f"log p(canonical tokens of text | canonical tokens of prompt): {r['canonical_tokens']:.4f}",
             f"{r['forwards']} LM forwards, {r['seconds']:.1f} s (beam {args.beam}, prefill {r['prefill']}"
             + (f": a canonical head of {r['head_bytes']} bytes, the conditional given it)" if r['head_bytes'] else ")")]
    caveat = head_caveat(r["head_bytes"])
    if caveat:
        lines.insert(2, "  " + caveat)
    if r["hint"]:
        lines.append(r["hint"])
    _emit(args, payload, lines)


def cmd_generate(args: argparse.Namespace) -> None:
    from ppl_tok.strings.generate import check_sampling, generate, sampling_mode

    if args.greedy and (args.temperature is not None or args.top_p is not None):
        raise ValueError("--greedy takes the most probable byte: --temperature and --top-p do not apply "
                         "(drop them, or drop --greedy to sample)")
    if args.canonical:
        return _generate_canonical(args)
    args.temperature = 1.0 if args.temperature is None else args.temperature
    args.top_p = 1.0 if args.top_p is None else args.top_p
    if dispatch(args, "generate"):
        return
    _check_utf8("--prompt", args.prompt)
    for s in args.stop:
        _check_utf8("--stop", s)
    check_sampling(args.max_bytes, args.temperature, args.top_p, args.stop)
    sampling_mode(args.mode, args.temperature, args.top_p, args.greedy)
    config = search_config(args)
    lm = _load_lm(args)
    _check_context(argparse.Namespace(command=args.command, text=args.prompt, context=args.context), lm,
                   walk="the prompt")
    result = generate(lm, args.prompt, args.max_bytes, temperature=args.temperature, top_p=args.top_p,
                      greedy=args.greedy, seed=args.seed, stop=args.stop, context=args.context, config=config,
                      progress=None if not args.json else False, mode=args.mode)
    payload = {"model": lm.name, "context": args.context, "greedy": args.greedy, "temperature": args.temperature,
               "top_p": args.top_p, "seed": args.seed, **result.to_dict()}
    rate = len(result.data) / result.seconds if result.seconds > 0 else float("nan")
    if result.mode == "bytes":
        log_p = f"log p = {result.log_prob:.4f}, "
    else:
        log_p = f"log p >= {result.log_prob_lower:.4f} (certified, from the tokens drawn), "
    lines = [args.prompt + result.text,
             f"-- {len(result.data)} bytes ({result.stopped}, {result.mode} mode), {log_p}"
             f"{result.forwards} LM forwards, {result.seconds:.1f} s ({rate:.1f} bytes/s)"]
    _emit(args, payload, lines)


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


def _next_rows(args: argparse.Namespace, state: Any, min_log_prob: float
               ) -> tuple[list[tuple[str, str, float, float, float]], dict[str, Any], list[str], float]:
    """``next``'s rows ``(JSON key, shown name, log p, lower, upper)``, its payload, extra lines and tolerance."""
    from ppl_tok.strings.chars import next_char_log_probs, visible, visible_byte
    from ppl_tok.strings.state import END_OF_STRING

    if args.chars:
        dist = next_char_log_probs(state, min_log_prob)
        rows = [(c, visible(c), *e) for c, e in dist.chars.items()]
        if dist.end is not None:
            rows.append(("end", "<end>", *dist.end))
        extra = [f"not a character or below {min_log_prob:g} nats: log p = {dist.other:.4f}"]
        if dist.partial:
            extra.insert(0, f"the prompt ends inside a character (bytes {dist.partial.hex(' ')}): the rows complete it")
        return rows, {"unit": "char", **dist.to_dict()}, extra, dist.tolerance
    nb = state.next_byte_log_probs()
    rows = []
    for i in range(END_OF_STRING + 1):
        if nb.log_probs[i] > -math.inf:
            key, name = ("end", "<end>") if i == END_OF_STRING else (str(i), visible_byte(i))
            rows.append((key, name, float(nb.log_probs[i]), float(nb.lower[i]), float(nb.upper[i])))
    return rows, {"unit": "byte", **nb.to_dict()}, [], nb.tolerance


def cmd_next(args: argparse.Namespace) -> None:
    from ppl_tok.strings.batch import Options, walk
    from ppl_tok.strings.certified import head_caveat, uninformative_hint
    from ppl_tok.strings.chars import DEFAULT_MIN_LOG_PROB

    if dispatch(args, "next"):
        return
    _check_utf8("--prompt", args.prompt)
    if args.min_log_prob is not None and not args.chars:
        raise ValueError("--min-log-prob applies to --chars only (the next-byte table explores nothing): "
                         "add --chars or drop --min-log-prob")
    min_log_prob = DEFAULT_MIN_LOG_PROB if args.min_log_prob is None else args.min_log_prob
    config = search_config(args)
    lm = _load_lm(args)
    _check_context(argparse.Namespace(command=args.command, text=args.prompt, context=args.context), lm,
                   walk="the prompt")
    with byte_bar(args, len(args.prompt.encode("utf-8")), "next") as bar:  # the prompt, byte by byte
        state = walk(lm, args.prompt, None, Options(args.context, config), bar.update)
    prefix = state.prefix_log_prob()
    rows, payload, extra, tol = _next_rows(args, state, min_log_prob)
    shown = sorted(rows, key=lambda r: -r[2])[:args.top]
    wide = [key for key, _, _, lo, hi in shown if uninformative_hint(hi - lo, config) is not None]
    hint = (uninformative_hint(max(hi - lo for *_, lo, hi in shown), config, prefill=state.prefill,
                               prompt_bytes=len(state.data) - state.base) if wide else None)
    payload.update(model=lm.name, prompt=args.prompt, context=args.context, beam=args.beam, prune=args.prune,
                   prefix=prefix.to_dict(), prefill=state.prefill, head_bytes=state.base, informative=not wide,
                   uninformative_rows=wide, hint=hint)
    unit = "character" if args.chars else "byte"
    lines = [f"next {unit} after {args.prompt!r} ({lm.name}); log P(prompt is a prefix) in "
             f"[{prefix.lower:.4f}, {prefix.upper:.4f}]; intervals include a rounding tolerance of {tol:.1e} nats",
             f"{unit:>9} {'p':>8} {'log p':>9}   {'certified ' if not state.base else ''}log p"]
    caveat = head_caveat(state.base, f"the next {unit}'s log p")
    if caveat:
        lines.insert(1, caveat)
    payload["certified"] = caveat is None
    for key, name, lp, lo, hi in shown:
        lines.append(f"{name:>9} {math.exp(lp):>8.4f} {lp:>9.4f}   [{lo:.4f}, {hi:.4f}]"
                     + ("   uninformative" if key in wide else ""))
    lines += extra + ([hint] if hint else [])
    _emit(args, payload, lines)


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
