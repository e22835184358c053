"""``python -m benchmarks lm-eval``: the lm-eval model's string answers against their token baselines (:mod:`benchmarks.lm_eval`)."""

from __future__ import annotations

import argparse

from benchmarks import cli_flags

from ppl_tok.cli.common import _emit, _load_lm
from ppl_tok.common.arguments import POSITIVE, integer, share


def cmd_lm_eval(args: argparse.Namespace) -> None:
    from benchmarks import lm_eval as bench
    from ppl_tok.datasets import data_file, load_questions, read_multiple_choice

    path = args.data if args.data.endswith(".jsonl") else str(data_file("openbookqa", "dev", args.data))
    try:
        questions = load_questions(path)
    except ValueError:
        questions = read_multiple_choice(path)  # the generic format (context, choices, label)
    lm = _load_lm(args)
    result = {"loglikelihood": bench.bench_loglikelihood(lm, questions[:args.questions], batch=args.batch_size,
                                                         extend_threshold=args.extend_threshold,
                                                         reference=args.reference)}
    if args.prompts:
        result["generate_until"] = bench.bench_generate_until(lm, questions[:args.prompts],
                                                              max_gen_toks=args.max_gen_toks)
    _emit(args, result, bench.format_lm_eval(result))


def add_lm_eval(bench_sub: argparse._SubParsersAction, add) -> None:
    """``python -m benchmarks lm-eval`` (``add``: :func:`ppl_tok.cli.bench.add_benchmark`, which gives the LM
    flags, ``--data-dir`` and ``--json``)."""
    from ppl_tok.strings.conditional import CONDITIONAL_EXTEND_THRESHOLD

    p = add(bench_sub, "lm-eval", "lm-eval loglikelihood under scoring=conditional against canonical (time ratio, "
            "requests moved, accuracy with a bootstrap interval), and generate_until over strings against token "
            "sampling", cmd_lm_eval, data="a data folder (its openbookqa/dev.jsonl) or a JSON Lines file",
            check=cli_flags.lm_eval)
    p.add_argument("--questions", type=POSITIVE, default=50, help="questions; 4 requests each on OpenBookQA "
                   "(default 50: 200 requests)")
    p.add_argument("--batch-size", type=POSITIVE, default=32, help="requests scored together, as the model's "
                   "batch_size (default 32)")
    p.add_argument("--extend-threshold", type=share, default=CONDITIONAL_EXTEND_THRESHOLD, metavar="SHARE",
                   help="conditional's lazy extension, as the model argument extend_threshold (default "
                        f"{CONDITIONAL_EXTEND_THRESHOLD:g}; 0: the exhaustive beam)")
    p.add_argument("--reference", action="store_true", help="also the exhaustive beam (extend threshold 0) on the "
                   "same requests: its time and the default's per-request error against it")
    p.add_argument("--prompts", type=integer(0), default=8, help="generate_until prompts (default 8; 0: skip it)")
    p.add_argument("--max-gen-toks", type=POSITIVE, default=16, help="generate_until's max_gen_toks (default 16: "
                   "64 bytes)")
