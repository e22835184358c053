"""The ``ppl-tok`` command line.

Every subcommand takes ``--model NAME`` (a card, a local folder or a hub id;
default ``smollm2-135m``); those that need only a vocabulary also take
``--tokenizer PATH`` (a SentencePiece ``.model`` file or a tokenizer folder).
``--json`` prints one machine-readable JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from .cards import DEFAULT_MODEL, load_lm, load_vocabulary
from .mdd import compile_mdd


def _emit(args: argparse.Namespace, payload: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print(json.dumps(payload, ensure_ascii=False))
    else:
        print("\n".join(lines))


def _vocab(args: argparse.Namespace):
    return load_vocabulary(args.tokenizer or args.model)


def _tokens(vocab, ids: Sequence[int]) -> list[dict[str, Any]]:
    return [{"id": int(t), "token": vocab.token_name(t)} for t in ids]


def cmd_tokenize(args: argparse.Namespace) -> None:
    vocab = _vocab(args)
    mdd = compile_mdd(args.text, vocab)
    canon = mdd.canonical()
    _emit(args, {"text": args.text, "canonical": _tokens(vocab, canon), "count": mdd.count()},
          [f"canonical: {' '.join(f'{vocab.token_name(t)}({t})' for t in canon)}",
           f"tokenizations: {mdd.count()}"])


def cmd_count(args: argparse.Namespace) -> None:
    mdd = compile_mdd(args.text, _vocab(args))
    _emit(args, {"text": args.text, "count": mdd.count()}, [str(mdd.count())])


def cmd_mdd(args: argparse.Namespace) -> None:
    if not (args.dot or args.png):
        raise ValueError("give --dot FILE and/or --png FILE")
    mdd = compile_mdd(args.text, _vocab(args))
    if args.dot:
        mdd.to_dot(args.dot)
    if args.png:
        mdd.draw(args.png)
    _emit(args, {"text": args.text, "nodes": mdd.number_of_nodes(), "edges": mdd.number_of_edges(),
                 "count": mdd.count(), "dot": args.dot, "png": args.png},
          [f"{mdd.number_of_nodes()} nodes, {mdd.number_of_edges()} edges, {mdd.count()} tokenizations"]
          + [f"wrote {p}" for p in (args.dot, args.png) if p])


def cmd_score(args: argparse.Namespace) -> None:
    lm = load_lm(args.model)
    canon = lm.canonical(args.text)
    lp = lm.log_prob(canon, args.context)
    _emit(args, {"text": args.text, "context": args.context, "canonical": _tokens(lm.vocab, canon),
                 "canonical_log_prob": lp},
          [f"canonical: {' '.join(lm.vocab.token_name(t) for t in canon)}",
           f"log p(canonical | context) = {lp:.4f}"])


def _names(vocab, ids: Sequence[int]) -> str:
    return " ".join(vocab.token_name(t) for t in ids)


def cmd_marginal(args: argparse.Namespace) -> None:
    from .importance import marginal
    from .exact import exact_marginal
    from .search import marginal_bounds

    lm = load_lm(args.model)
    mdd = compile_mdd(args.text, lm.vocab)
    result = marginal(args.text, lm, args.samples, guide=args.proposal, context=args.context, seed=args.seed, mdd=mdd)
    payload: dict[str, Any] = {
        "text": args.text, "context": args.context, "model": lm.name, "count": mdd.count(),
        "proposal": result.proposal, "num_samples": result.num_samples, "seed": args.seed,
        "log_marginal": result.log_marginal, "canonical_log_prob": result.canonical_log_prob,
        "canonical": _tokens(lm.vocab, result.canonical), "ess": result.ess,
        "canonical_estimate": result.canonical_estimate, "noncanonical_estimate": result.noncanonical_estimate,
        "acceptance_rate": result.acceptance_rate, "forwards": result.forwards, "seconds": result.seconds,
    }
    lines = [
        f"text: {args.text!r}   context: {args.context!r}   model: {lm.name}",
        f"tokenizations:             {mdd.count()}",
        f"canonical:                 {_names(lm.vocab, result.canonical)}",
        f"log p(canonical):          {result.canonical_log_prob:.4f}",
        f"log p(text), {result.proposal} IS, N={result.num_samples}: {result.log_marginal:.4f}"
        f"   (ESS {result.ess:.1f}, {result.forwards} LM forwards, {result.seconds:.1f} s)",
        f"  canonical part:          {result.canonical_estimate:.4f}",
        f"  non-canonical part:      {result.noncanonical_estimate:.4f}",
    ]
    if result.proposal == "prior":
        lines.append(f"  acceptance rate:         {result.acceptance_rate:.3f}")
    if args.exact:
        exact = exact_marginal(args.text, lm, context=args.context, max_paths=args.max_paths, mdd=mdd)
        payload.update(exact_log_marginal=exact.log_marginal, most_likely=_tokens(lm.vocab, exact.most_likely),
                       most_likely_log_prob=float(exact.log_probs[0]), canonical_share=exact.canonical_share)
        lines += [f"log p(text), exact:        {exact.log_marginal:.4f}   (canonical share {exact.canonical_share:.4f})",
                  f"most likely:               {_names(lm.vocab, exact.most_likely)} ({float(exact.log_probs[0]):.4f})"]
    if args.bounds is not None:
        b = marginal_bounds(args.text, lm, context=args.context, tolerance=args.bounds, budget=args.budget, mdd=mdd)
        payload.update(lower=b.lower, upper=b.upper, bounds_closed=b.closed, bounds_forwards=b.forwards)
        lines.append(f"certified bracket:         [{b.lower:.4f}, {b.upper:.4f}]   "
                     f"({'closed' if b.closed else 'open'} at {args.bounds:g} nats, {b.forwards} forwards)")
    _emit(args, payload, lines)


def cmd_distribution(args: argparse.Namespace) -> None:
    from .exact import exact_marginal

    lm = load_lm(args.model)
    result = exact_marginal(args.text, lm, context=args.context, max_paths=args.max_paths)
    post = result.posterior().tolist()
    if args.png:
        from .plots import plot_distribution

        plot_distribution(result, lm.vocab, args.png, top=args.top)
    rows = [{"tokens": _tokens(lm.vocab, v), "log_prob": float(lp), "posterior": p, "canonical": v == result.canonical}
            for v, lp, p in zip(result.tokenizations[: args.top], result.log_probs.tolist(), post)]
    _emit(args, {"text": args.text, "count": result.count, "log_marginal": result.log_marginal,
                 "canonical_log_prob": result.canonical_log_prob, "top": rows, "png": args.png},
          [f"{result.count} tokenizations, log p(text) = {result.log_marginal:.4f}"] +
          [f"{r['posterior']:.6f}  {'*' if r['canonical'] else ' '} {_names(lm.vocab, v)}"
           for r, v in zip(rows, result.tokenizations)] + ([f"wrote {args.png}"] if args.png else []))


def cmd_canonicity(args: argparse.Namespace) -> None:
    from .canonicity import canonicity

    lm = load_lm(args.model)
    result = canonicity(lm, args.samples, args.max_tokens, seed=args.seed)
    if args.png:
        from .plots import plot_canonicity

        plot_canonicity(result, args.png, label=lm.name)
    _emit(args, {"model": lm.name, "lengths": result.lengths, "canonical": result.canonical,
                 "undecodable": result.undecodable, "png": args.png},
          [f"{'tokens':>6} {'% canonical':>12}"] +
          [f"{n:>6} {100 * c:>11.1f}%" for n, c in zip(result.lengths, result.canonical)])


def cmd_most_likely(args: argparse.Namespace) -> None:
    from .search import most_likely

    lm = load_lm(args.model)
    r = most_likely(args.text, lm, context=args.context, time_budget=args.time_budget, top_k=args.top_k)
    _emit(args, {"text": args.text, "context": args.context, "tokens": _tokens(lm.vocab, r.tokens),
                 "log_prob": r.log_prob, "canonical": _tokens(lm.vocab, r.canonical),
                 "canonical_log_prob": r.canonical_log_prob, "optimal": r.optimal,
                 "top_k": [{"tokens": _tokens(lm.vocab, v), "log_prob": lp} for v, lp in r.top_k],
                 "expanded": r.expanded, "forwards": r.forwards, "seconds": r.seconds},
          [f"most likely:  {_names(lm.vocab, r.tokens)}  ({r.log_prob:.4f})",
           f"canonical:    {_names(lm.vocab, r.canonical)}  ({r.canonical_log_prob:.4f})",
           f"optimal:      {'proven' if r.optimal else 'not proven within the time budget'}"
           f"  ({r.expanded} prefixes expanded, {r.seconds:.1f} s)"])


def cmd_sat(args: argparse.Namespace) -> None:
    from .exact import exact_marginal
    from .sat import CNF, mlt_reduction, model_count, msp_reduction, read_assignment
    from .search import most_likely

    cnf = CNF.read(args.file)
    if args.problem == "mlt":
        red = mlt_reduction(cnf)
        r = most_likely(red.text, red.lm)
        satisfiable = r.log_prob > red.log_threshold
        assignment = read_assignment(cnf, r.tokens) if satisfiable else None
        payload = {"problem": "mlt", "string": red.text, "threshold": red.threshold,
                   "log_threshold": red.log_threshold, "satisfiable": satisfiable,
                   "most_likely": [red.lm.vocab.token_name(t) for t in r.tokens], "log_prob": r.log_prob,
                   "optimal": r.optimal,
                   "assignment": None if assignment is None else {str(j + 1): v for j, v in enumerate(assignment)}}
        lines = [f"string: {red.text}", f"most likely tokenization: {' '.join(payload['most_likely'])} "
                 f"(p = {math.exp(r.log_prob):.4g}, threshold {red.threshold:.4g})",
                 f"satisfiable: {satisfiable}"]
        if assignment is not None:
            lines.append("assignment: " + " ".join(f"{j + 1}={int(v)}" for j, v in enumerate(assignment)))
    else:
        red = msp_reduction(cnf)
        exact = exact_marginal(red.text, red.lm, max_paths=args.max_paths)
        count = model_count(exact.log_marginal, red)
        payload = {"problem": "msp", "string": red.text, "unit": red.threshold, "log_marginal": exact.log_marginal,
                   "model_count": count, "satisfiable": count > 0}
        lines = [f"string: {red.text}", f"log p(string) = {exact.log_marginal:.6f}",
                 f"model count: {count}   (p / (0.45^n 0.9^n) = {math.exp(exact.log_marginal - red.log_threshold):.6f})"]
    _emit(args, payload, lines)


def cmd_bench(args: argparse.Namespace) -> None:
    from . import bench

    if args.what == "mdd":
        result = bench.bench_mdd(args.data, models=args.models, naive_bytes=args.naive_bytes,
                                 max_bytes=args.max_bytes)
        _emit(args, result, bench.format_mdd(result))
    elif args.what == "most-likely":
        result = bench.bench_most_likely(args.model, time_budget=args.time_budget, png=args.png)
        _emit(args, result, bench.format_most_likely(result))
    elif args.what == "marginal":
        result = bench.bench_marginal(args.model, sizes=tuple(args.sizes), baseline_samples=args.baseline_samples)
        _emit(args, result, bench.format_marginal(result))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ppl-tok", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help: str, vocab_only: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--model", default=DEFAULT_MODEL, help=f"model card, folder or hub id (default {DEFAULT_MODEL})")
        if vocab_only:
            p.add_argument("--tokenizer", help="a SentencePiece .model file or tokenizer folder (overrides --model)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        return p

    p = add("tokenize", "canonical tokens and the number of tokenizations", vocab_only=True)
    p.add_argument("text")
    p.set_defaults(func=cmd_tokenize)
    p = add("count", "the exact number of tokenizations", vocab_only=True)
    p.add_argument("text")
    p.set_defaults(func=cmd_count)
    p = add("mdd", "export the MDD of all tokenizations (DOT text, PNG drawing)", vocab_only=True)
    p.add_argument("text")
    p.add_argument("--dot", help="write Graphviz DOT here")
    p.add_argument("--png", help="draw a PNG here (small MDDs)")
    p.set_defaults(func=cmd_mdd)
    p = add("score", "log-probability of the canonical tokenization")
    p.add_argument("text")
    p.add_argument("--context", default="", help="text the string continues")
    p.set_defaults(func=cmd_score)
    p = add("marginal", "marginal probability of a string over all its tokenizations")
    p.add_argument("text")
    p.add_argument("--context", default="", help="text the string continues")
    p.add_argument("--samples", type=int, default=64, help="importance samples (default 64)")
    p.add_argument("--proposal", default="lookahead", choices=["lookahead", "uniform", "prior", "stratified"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exact", action="store_true", help="also enumerate every tokenization (short strings)")
    p.add_argument("--max-paths", type=int, default=100_000, help="refuse --exact above this many tokenizations")
    p.add_argument("--bounds", type=float, metavar="TOL", help="also a certified bracket, to TOL nats")
    p.add_argument("--budget", type=int, default=10_000, help="LM forwards for --bounds (default 10000)")
    p.set_defaults(func=cmd_marginal)
    p = add("distribution", "the exact distribution over tokenizations (the paper's Fig. 2)")
    p.add_argument("text")
    p.add_argument("--context", default="")
    p.add_argument("--png", help="plot the distribution here")
    p.add_argument("--top", type=int, default=20, help="how many tokenizations to list and plot")
    p.add_argument("--max-paths", type=int, default=100_000)
    p.set_defaults(func=cmd_distribution)
    p = add("canonicity", "fraction of canonical generations against length (the paper's Fig. 3)")
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--png", help="plot the curve here")
    p.set_defaults(func=cmd_canonicity)
    p = add("most-likely", "the most likely tokenization by branch and bound")
    p.add_argument("text")
    p.add_argument("--context", default="")
    p.add_argument("--time-budget", type=float, help="seconds (default: until optimality is proven)")
    p.add_argument("--top-k", type=int, default=1)
    p.set_defaults(func=cmd_most_likely)
    p = add("sat", "decide SAT (mlt) or count models (msp) through the paper's reductions")
    p.add_argument("file", help="a DIMACS .cnf file")
    p.add_argument("--problem", choices=["mlt", "msp"], default="mlt")
    p.add_argument("--max-paths", type=int, default=1 << 20)
    p.set_defaults(func=cmd_sat)
    p = add("bench", "speed benchmarks (ratios against baselines run in the same process)")
    p.add_argument("what", choices=["mdd", "marginal", "most-likely"])
    p.add_argument("--data", default="../shared/data", help="a data folder or a text file (default ../shared/data)")
    p.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    p.add_argument("--max-bytes", type=int, default=2_000_000, help="texts compiled by the trie compiler")
    p.add_argument("--naive-bytes", type=int, default=1_000, help="texts compiled by the naive compiler")
    p.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256], help="marginal: numbers of samples")
    p.add_argument("--baseline-samples", type=int, default=64, help="marginal: N of the sequential baseline")
    p.add_argument("--time-budget", type=float, default=60.0, help="most-likely: seconds per prefix")
    p.add_argument("--png", help="most-likely: plot the curve here")
    p.set_defaults(func=cmd_bench)
    from .qa.cli import register as register_qa

    register_qa(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, LookupError, OSError) as err:
        print(f"ppl-tok {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
