"""``python -m benchmarks NAME``: one subcommand per benchmark beside the package (``benchmarks/``), each with its
own flags; ``ppl-tok bench`` keeps the checks of a user's own machine (engine, memory, gpu-check).

Every benchmark reports ratios against a baseline run in the same process (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse

from benchmarks.cli_learned import register_defensive, register_learned
from benchmarks.cli_lm_eval import add_lm_eval
from ppl_tok.common.arguments import POSITIVE, integer, output_file, positive
from benchmarks import cli_flags, cli_perplexity, cli_strings
from ppl_tok.cli.bench import _openbookqa_dev, add_benchmark, add_parts
from ppl_tok.cli.common import (_emit, _load_lm, add_search_arguments,
                                lm_spec, search_config)


def cmd_mdd(args: argparse.Namespace) -> None:
    from benchmarks import mdd as bench

    result = bench.bench_mdd(args.data, models=args.models or list(bench.MDD_MODELS),
                             naive_bytes=args.naive_bytes, max_bytes=args.max_bytes,
                             baseline_texts=args.baseline_texts)
    _emit(args, result, bench.format_mdd(result))


def cmd_canonical_step(args: argparse.Namespace) -> None:
    from benchmarks import canonical_step as bench

    result = bench.bench_canonical_step(args.models or list(bench.MODELS), rounds=args.runs)
    _emit(args, result, bench.format_canonical_step(result))


def cmd_most_likely(args: argparse.Namespace) -> None:
    from benchmarks import most_likely as bench

    spec = lm_spec(args)
    result = bench.bench_most_likely(spec.model, time_budget=args.time_budget, png=args.png, **spec.options())
    _emit(args, result, bench.format_most_likely(result))


def cmd_marginal(args: argparse.Namespace) -> None:
    from benchmarks import marginal as bench

    spec = lm_spec(args)
    quick = bench.QUICK_MARGINAL if args.quick else {}
    result = bench.bench_marginal(spec.model, **{"sizes": tuple(args.sizes), "baseline_samples": args.baseline_samples,
                                                 **quick, **spec.options()})
    _emit(args, result, bench.format_marginal(result))


def cmd_estimators(args: argparse.Namespace) -> None:
    from benchmarks import marginal as bench

    spec = lm_spec(args)
    result = bench.bench_estimators(spec.model, num_samples=args.samples, **spec.options())
    _emit(args, result, bench.format_estimators(result))


def cmd_diagnostics(args: argparse.Namespace) -> None:
    from benchmarks import diagnostics as diag

    spec = lm_spec(args)
    sizes = diag.QUICK if args.quick else {"strings": args.strings, "seeds": args.seeds, "num_samples": args.samples}
    result = diag.run(spec.model, data=_openbookqa_dev(args.data), records=args.records, **sizes, **spec.options(),
                      proposal_file=args.proposal_file)
    _emit(args, result, diag.format_report(result))


def cmd_rescore(args: argparse.Namespace) -> None:
    """The stored runs only, with the current warning rule: no LM."""
    from benchmarks import diagnostics as diag

    result = {**diag.analyze(diag.load_records(args.records), num_samples=args.samples), "records": args.records}
    _emit(args, result, diag.format_report(result))


def cmd_surprisal(args: argparse.Namespace) -> None:
    from benchmarks import surprisal as bench

    bench.held_out_items(args.text, 1)  # a bad --text is an error before the model loads
    lm = _load_lm(args)
    result = bench.bench_surprisal(lm, args.text, words=args.words, config=search_config(args),
                                   batch=args.batch_size, per_item=args.per_item, reference=args.reference)
    _emit(args, result, bench.format_surprisal(result))


def cmd_startup(args: argparse.Namespace) -> None:
    from benchmarks import startup as bench

    result = bench.bench_startup(runs=args.runs)
    _emit(args, result, bench.format_startup(result))


def register(bench_sub: argparse._SubParsersAction) -> None:
    """Add one subcommand per benchmark of ``benchmarks/`` to ``bench_sub`` (a benchmark with parts: one
    subcommand per part, :mod:`benchmarks.cli_perplexity`, :mod:`benchmarks.cli_strings`)."""
    p = add_benchmark(bench_sub, "mdd", "MDD compilation: bytes per second of the trie compiler against the naive "
                      "one", cmd_mdd, lm=False, data="a data folder or a text file")
    p.add_argument("--models", nargs="+", help="the vocabularies (default smollm2-135m gemma3-270m)")
    p.add_argument("--max-bytes", type=integer(0), default=2_000_000, help="texts compiled by the trie compiler")
    p.add_argument("--naive-bytes", type=POSITIVE, default=1_000, help="texts compiled by the naive compiler")
    p.add_argument("--baseline-texts", type=integer(0), default=300,
                   help="texts per data set compiled by the e9ead21 compiler and today's (0: none)")
    p = add_benchmark(bench_sub, "canonical-step", "the canonical step masks' merge tables: CPU seconds to build them "
                      "and the first mask against the 379ac78 build, and whether both agree", cmd_canonical_step,
                      lm=False)
    p.add_argument("--models", nargs="+", help="the vocabularies (default gemma3-270m smollm2-135m)")
    p.add_argument("--runs", type=POSITIVE, default=3, help="builds of each (default 3; the median)")
    p = add_benchmark(bench_sub, "marginal", "importance sampling: the vectorised marginal against sequential Pyro",
                      cmd_marginal, check=cli_flags.marginal)
    p.add_argument("--sizes", type=POSITIVE, nargs="+", default=[16, 64, 256], help="numbers of samples")
    p.add_argument("--baseline-samples", type=POSITIVE, default=64, help="N of the sequential baseline")
    p.add_argument("--quick", action="store_true", help="one small run of each part (a smoke test)")
    p = add_benchmark(bench_sub, "most-likely", "branch and bound: the incumbent against time", cmd_most_likely)
    p.add_argument("--time-budget", type=positive, default=60.0, help="seconds per prefix (default 60)")
    p.add_argument("--png", type=output_file, help="plot the curve here")
    p = add_benchmark(bench_sub, "estimators", "the marginal's estimators against the exact answer at equal cost",
                      cmd_estimators)
    p.add_argument("--samples", type=POSITIVE, default=64, help="particles (default 64)")
    p = add_benchmark(bench_sub, "startup", "start-up: CPU seconds of ppl-tok --help and import ppl_tok against the "
                      "bare interpreter, and the heavy modules they import", cmd_startup, lm=False)
    p.add_argument("--runs", type=POSITIVE, default=5, help="fresh processes per command (default 5; the median)")
    _add_diagnostics(bench_sub)
    cli_strings.register(bench_sub)
    cli_perplexity.register(bench_sub)
    add_lm_eval(bench_sub, add_benchmark)
    register_learned(bench_sub)
    register_defensive(bench_sub)
    p = add_benchmark(bench_sub, "surprisal", "word surprisal over strings against canonical-token surprisal of the "
                      "same words: words per second, the ratio, forwards per word", cmd_surprisal,
                      check=cli_flags.surprisal)
    p.add_argument("--text", required=True, metavar="FILE",
                   help="held-out text: a text file (one item per line) or a HellaSwag, SocialIQA or OpenBookQA "
                        "data file (its contexts), e.g. ../shared/data/hellaswag/hellaswag_val.jsonl.gz")
    p.add_argument("--words", type=POSITIVE, default=1000, help="words scored (default 1000)")
    p.add_argument("--batch-size", type=POSITIVE, default=16, metavar="N",
                   help="items scored together: per forward (canonical), walked in lockstep (strings) (default 16, as "
                        "ppl-tok surprisal)")
    p.add_argument("--per-item", action="store_true",
                   help="also the strings column one item at a time (slow: one LM call per byte of every item)")
    p.add_argument("--reference", action="store_true",
                   help="with --extend-threshold: also the strings column without lazy extension, and each word's "
                        "difference from it (median, p95, max bits)")
    add_search_arguments(p, prefill=False)


def _add_diagnostics(bench_sub: argparse._SubParsersAction) -> None:
    help = "precision and recall of the estimates' warnings against exact answers: run, rescore"
    parts = add_parts(bench_sub, "diagnostics", help)
    records = "the per-run JSON lines, {} (default diagnostics-runs.jsonl)"
    p = add_benchmark(parts, "run", "run the estimators on strings with exact truth, appending each run to --records",
                      cmd_diagnostics, data="a data folder (its openbookqa/dev.jsonl) or a JSON Lines file",
                      check=cli_flags.diagnostics)
    p.add_argument("--strings", type=POSITIVE, default=30, help="strings with exact truth (default 30)")
    p.add_argument("--seeds", type=POSITIVE, default=5, help="seeds per string and method (default 5)")
    p.add_argument("--samples", type=POSITIVE, default=64, help="particles (default 64)")
    p.add_argument("--records", default="diagnostics-runs.jsonl", help=records.format("appended and resumed"))
    p.add_argument("--proposal-file", metavar="FILE",
                   help="also run this learned proposal (ppl-tok learn-proposal --out; trained on other strings)")
    p.add_argument("--quick", action="store_true", help="one small run (a smoke test)")
    p = add_benchmark(parts, "rescore", "score the stored --records with the current warning rule, without the LM",
                      cmd_rescore, lm=False)
    p.add_argument("--samples", type=POSITIVE, default=64, help="particles of the stored runs (default 64)")
    p.add_argument("--records", default="diagnostics-runs.jsonl", help=records.format("read"))
