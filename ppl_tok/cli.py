"""The ``ppl-tok`` command line.

Every subcommand takes ``--model NAME`` (a card, a local folder or a hub id;
default ``smollm2-135m``); those that need only a vocabulary also take
``--tokenizer PATH`` (a SentencePiece ``.model`` file or a tokenizer folder).
``--json`` prints one machine-readable JSON object.
"""

from __future__ import annotations

import argparse
import json
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


def cmd_marginal(args: argparse.Namespace) -> None:
    from .marginal import exact_marginal

    if not args.exact:
        raise ValueError("only the exact marginal is available so far: add --exact "
                         "(importance sampling is not implemented yet)")
    lm = load_lm(args.model)
    result = exact_marginal(args.text, lm, context=args.context, max_paths=args.max_paths)
    names = lm.vocab.token_name
    _emit(args, {
        "text": args.text, "context": args.context, "count": result.count,
        "exact_log_marginal": result.log_marginal,
        "log_marginal": result.log_marginal, "canonical_log_prob": result.canonical_log_prob,
        "canonical": _tokens(lm.vocab, result.canonical), "canonical_share": result.canonical_share,
        "most_likely": _tokens(lm.vocab, result.most_likely), "most_likely_log_prob": float(result.log_probs[0]),
        "forwards": result.forwards,
    }, [
        f"text: {args.text!r}   context: {args.context!r}   model: {lm.name}",
        f"tokenizations:            {result.count}",
        f"canonical:                {' '.join(names(t) for t in result.canonical)}",
        f"log p(canonical):         {result.canonical_log_prob:.4f}",
        f"log p(text) (exact):      {result.log_marginal:.4f}",
        f"canonical share of p:     {result.canonical_share:.4f}",
        f"most likely:              {' '.join(names(t) for t in result.most_likely)} "
        f"({float(result.log_probs[0]):.4f})",
        f"LM token-forwards:        {result.forwards}",
    ])


def cmd_bench(args: argparse.Namespace) -> None:
    from . import bench

    if args.what == "mdd":
        result = bench.bench_mdd(args.data, models=args.models, naive_bytes=args.naive_bytes,
                                 max_bytes=args.max_bytes)
        _emit(args, result, bench.format_mdd(result))


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
    p.add_argument("--exact", action="store_true", help="enumerate every tokenization (short strings)")
    p.add_argument("--max-paths", type=int, default=100_000, help="refuse --exact above this many tokenizations")
    p.set_defaults(func=cmd_marginal)
    p = add("bench", "speed benchmarks (ratios against baselines run in the same process)")
    p.add_argument("what", choices=["mdd"])
    p.add_argument("--data", default="../shared/data", help="a data folder or a text file (default ../shared/data)")
    p.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    p.add_argument("--max-bytes", type=int, default=2_000_000, help="texts compiled by the trie compiler")
    p.add_argument("--naive-bytes", type=int, default=1_000, help="texts compiled by the naive compiler")
    p.set_defaults(func=cmd_bench)
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
