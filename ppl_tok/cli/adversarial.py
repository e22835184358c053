"""``ppl-tok adversarial``: the tokenization of a prompt that raises (or lowers) a target's log-probability,
with a certificate (:mod:`ppl_tok.infer.adversarial`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ppl_tok.cli.common import (_check_utf8, _emit, _load_lm, _names, _tokens, add_command, add_text_arguments,
                                refuse_ignored)
from ppl_tok.common.arguments import SEED, integer, log_prob_floor, positive, add_renamed
from ppl_tok.common.jsonout import count_fields


def _search_lines(vocab: Any, r: Any, args: argparse.Namespace) -> list[str]:
    lines = [f"{'best:      ' if r.certificate == 'exact' else 'best scored:'} {_names(vocab, r.best)}  "
             f"({r.best_log_prob:.4f}, distance {r.best_distance})",
             f"canonical:  {_names(vocab, r.canonical)}  ({r.canonical_log_prob:.4f})",
             f"certified:  {r.certified_sentence()}"]
    if not r.closed:
        lines.append(f"bracket:    {r.best_log_prob:.4f} .. {r.bound:.4f} over the whole set (stopped: {r.stopped}; "
                     f"{r.examined} of {r.size} tokenizations examined"
                     + ("; the default budget: give --exact-budget FORWARDS for more)" if r.stopped == "budget"
                        and args.exact_budget is None else ")"))
    if args.threshold is not None:
        if r.radius_exact:
            lines.append(f"threshold:  exceeded at distance {r.radius + 1} by {_names(vocab, r.above)} "
                         f"({r.above_log_prob:.4f}): robustness radius {r.radius}")
        else:
            lines.append(f"threshold:  no tokenization within distance {r.radius} exceeds {args.threshold:.4f}"
                         + (" (the whole set)" if r.closed else " (robustness radius at least this)"))
    lines.append(f"cost:       {r.forwards} token-forwards, {r.scored} scored, {r.pruned} pruned, {r.seconds:.1f} s")
    return lines


def _search_payload(vocab: Any, r: Any) -> dict[str, Any]:
    return {"best": _tokens(vocab, r.best), "best_log_prob": r.best_log_prob, "best_distance": r.best_distance,
            "canonical": _tokens(vocab, r.canonical), "canonical_log_prob": r.canonical_log_prob,
            "minimize": r.minimize, "bound": r.bound, "closed": r.closed, **count_fields(r.size, "size"),
            "certificate": r.certificate, "certified": r.certified_sentence(), "certified_low": r.certified_low,
            "certified_high": r.certified_high, **count_fields(r.certified_size, "certified_size"),
            "scored": r.scored, "pruned": r.pruned, "complete_within": r.complete_within, "stopped": r.stopped,
            "threshold": r.threshold, "above": None if r.above is None else _tokens(vocab, r.above),
            "above_log_prob": r.above_log_prob, "radius": r.radius, "radius_exact": r.radius_exact,
            "top": [{"tokens": _tokens(vocab, v), "log_prob": lp} for v, lp in r.top],
            "forwards": r.forwards, "seconds": r.seconds}


def _check_flags(args: argparse.Namespace) -> None:
    """The flags a run would ignore or cannot honour, and the request's sizes: refused before the model loads."""
    from ppl_tok.infer.adversarial import check_request

    for name in ("target", "prefix", "suffix"):
        _check_utf8(f"--{name}", getattr(args, name))
    if args.stop_above and args.threshold is None:
        raise ValueError("--stop-above would be ignored: it stops at the first distance where a tokenization "
                         "exceeds --threshold, and none was given; give --threshold NATS or leave --stop-above out")
    if args.minimize and args.threshold is not None:
        raise ValueError("--threshold asks whether some tokenization raises log p(target) above it: drop "
                         "--minimize, or drop --threshold")
    if args.samples is not None:
        refuse_ignored(args, ("--minimize", "--stop-above", "--exact-budget", "--time-budget", "--top"),
                       "--samples scores uniform draws and does not search", "leave FLAG out, or --samples")
    check_request(args.text, args.target, prefix=args.prefix, suffix=args.suffix, batch=args.batch_size,
                  budget=args.exact_budget)


def _progress(args: argparse.Namespace, budget: int) -> tuple[Any, Any]:
    """A progress line on standard error (a terminal, or ``--progress``): forwards against the budget, the
    members examined, the best so far and the distance closed; ``(callback, bar)``."""
    from tqdm.auto import tqdm

    show = args.progress or (sys.stderr.isatty() and not args.json)
    bar = tqdm(total=budget, unit="fwd", desc="adversarial", disable=not show)

    def update(forwards: int, examined: int, best: float, within: int) -> None:
        bar.update(forwards - bar.n)
        bar.set_postfix_str(f"{examined} examined, best {best:.4f}, closed within distance {within}", refresh=False)

    return update, bar


def cmd_adversarial(args: argparse.Namespace) -> None:
    from ppl_tok.infer.adversarial import DEFAULT_BUDGET, adversarial_sample, adversarial_search, problem

    _check_flags(args)
    lm = _load_lm(args)
    common = dict(prefix=args.prefix, suffix=args.suffix, distance=args.distance, extra=args.extra)
    problem(lm, args.text, args.target, **common)  # every input error before any LM call
    head = {"prompt": args.text, "target": args.target, **common}
    if args.samples is not None:
        r = adversarial_sample(lm, args.text, args.target, samples=args.samples, threshold=args.threshold,
                               seed=args.seed, batch=args.batch_size, **common)
        lines = [f"best of {r.samples} uniform draws ({r.distinct} distinct of {r.size}): "
                 f"{_names(lm.vocab, r.best)}  ({r.best_log_prob:.4f})",
                 "certified:  " + ("the draws cover the set: this is its max" if r.covered else
                                   "nothing (a sample is a lower end of the max only)")]
        if r.fraction_above is not None:
            lines.append(f"above {args.threshold:.4f}: {100 * r.fraction_above:.1f}% of the draws")
        lines.append(f"cost:       {r.forwards} token-forwards, {r.seconds:.1f} s")
        _emit(args, {**head, "mode": "sample", "best": _tokens(lm.vocab, r.best), "best_log_prob": r.best_log_prob,
                     "samples": r.samples, "distinct": r.distinct, **count_fields(r.size, "size"),
                     "covered": r.covered, "fraction_above": r.fraction_above, "forwards": r.forwards,
                     "seconds": r.seconds}, lines)
        return
    budget = args.exact_budget if args.exact_budget is not None else DEFAULT_BUDGET
    update, bar = _progress(args, budget)
    with bar:
        r = adversarial_search(lm, args.text, args.target, minimize=args.minimize, threshold=args.threshold,
                               stop_above=args.stop_above, budget=budget, time_budget=args.time_budget,
                               batch=args.batch_size, top_k=args.top, progress=update, **common)
    _emit(args, {**head, "mode": "search", **_search_payload(lm.vocab, r)}, _search_lines(lm.vocab, r, args))


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``adversarial`` to the ``ppl-tok`` subcommands."""
    p = add_command(sub, "adversarial", "the tokenization of a prompt that maximises (or minimises) log p(target | "
                    "prefix, prompt, suffix), with a certificate", "lm")
    add_text_arguments(p, context=False)
    p.add_argument("--target", required=True, help="the response string scored in its canonical tokens")
    p.add_argument("--prefix", default="", help="text before the prompt, kept in canonical tokens (e.g. a chat "
                   "template's head; default: none, only BOS)")
    p.add_argument("--suffix", default="", help="text between the prompt and the target, kept canonical")
    p.add_argument("--distance", type=integer(0), metavar="D",
                   help="only tokenizations within token edit distance D of canonical (default: all)")
    p.add_argument("--extra", type=integer(0), metavar="K",
                   help="only tokenizations with at most K tokens more than canonical (default: any)")
    p.add_argument("--minimize", action="store_true", help="lower log p(target) instead of raising it")
    p.add_argument("--threshold", type=log_prob_floor, metavar="NATS",
                   help="also decide whether any tokenization raises log p(target) above NATS, and the "
                        "robustness radius (the largest distance within which none does)")
    p.add_argument("--stop-above", action="store_true", help="stop at the first distance where one exceeds "
                   "--threshold")
    add_renamed(p, "--exact-budget", "--budget", type=integer(1), metavar="FORWARDS",
                help="the certified search's token forwards at most (default 20,000: the search then says what "
                     "it certified, the interval over the distance it closed, or nothing)")
    p.add_argument("--time-budget", type=positive, metavar="SECONDS", help="stop after this long (between batches)")
    add_renamed(p, "--batch-size", "--batch", type=integer(1), default=32,
                help="tokenizations scored together (default 32)")
    p.add_argument("--top", type=integer(1), default=5, help="list the best few found (default 5)")
    p.add_argument("--samples", type=integer(1), metavar="N",
                   help="sampled mode: score N tokenizations drawn uniformly from the set instead of searching")
    p.add_argument("--seed", type=SEED, default=0, help="random seed of --samples (default 0)")
    p.add_argument("--progress", action="store_true", help="show the progress line even when standard error is "
                   "not a terminal (or with --json)")
    p.set_defaults(func=cmd_adversarial)
