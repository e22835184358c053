"""``python -m benchmarks learned``: the learned proposal's benchmark (:mod:`benchmarks.learned`), registered by
:mod:`benchmarks.cli`."""

from __future__ import annotations

import argparse

from benchmarks import cli_flags
from ppl_tok.cli.bench_flags import checked
from ppl_tok.cli.common import _emit, add_data_dir_argument, add_json_argument, add_lm_arguments, lm_spec, transformers_backend_only
from ppl_tok.common.arguments import POSITIVE, SEED
from ppl_tok.datasets import DATA_ROOT


def cmd_learned(args: argparse.Namespace) -> None:
    from benchmarks import learned as bench

    spec = lm_spec(args)
    sizes = bench.QUICK if args.quick else {"train": args.train, "heldout": args.heldout, "steps": args.steps,
                                            "sizes": tuple(args.sizes)}
    result = bench.bench_learned(spec.model, **sizes, particles=args.particles, seed=args.seed, data=args.data,
                                 proposal_file=args.proposal_file, max_paths=args.max_paths, **spec.options())
    _emit(args, result, bench.format_learned(result))


def register_learned(bench_sub: argparse._SubParsersAction) -> None:
    """Add ``python -m benchmarks learned``."""
    help = ("a proposal learned on SocialIQA answers against the look-ahead and the stratified one on held-out "
            "OpenBookQA answers (error against the exact marginal, forwards)")
    p = bench_sub.add_parser("learned", help=help, description=help)
    add_lm_arguments(p)
    add_data_dir_argument(p, str(DATA_ROOT), "the data folder")
    add_json_argument(p)
    p.add_argument("--train", type=POSITIVE, default=10, help="training strings (default 10)")
    p.add_argument("--heldout", type=POSITIVE, default=30, help="held-out strings with exact truth (default 30)")
    p.add_argument("--steps", type=POSITIVE, default=20, help="training steps (default 20)")
    p.add_argument("--particles", type=POSITIVE, default=16, help="draws per training step (default 16)")
    p.add_argument("--sizes", type=POSITIVE, nargs="+", default=[64, 256], help="numbers of samples (default 64 256)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    p.add_argument("--proposal-file", metavar="FILE", help="keep the trained proposal here (an existing one resumes)")
    p.add_argument("--max-paths", type=POSITIVE, default=3000,
                   help="the most tokenizations of a held-out string (default 3000)")
    p.add_argument("--quick", action="store_true", help="one small run (a smoke test)")
    p.set_defaults(func=transformers_backend_only(checked(cli_flags.learned, cmd_learned)))


def cmd_defensive(args: argparse.Namespace) -> None:
    from benchmarks import learned as bench

    spec = lm_spec(args)
    result = bench.bench_defensive(spec.model, train=args.train, steps=args.steps, particles=args.particles,
                                   tune=args.tune, heldout=args.heldout, grid=tuple(args.grid),
                                   sizes=tuple(args.sizes), seed=args.seed, max_paths=args.max_paths,
                                   records=args.records, proposal_file=args.proposal_file, data=args.data,
                                   **spec.options())
    _emit(args, result, bench.format_defensive(result))


def register_defensive(bench_sub: argparse._SubParsersAction) -> None:
    """Add ``python -m benchmarks learned-defensive``."""
    help = ("the learned proposal's defensive share a: chosen on OpenBookQA dev answers, reported on OpenBookQA "
            "test answers (error against the exact marginal, forwards, unwarned runs off by more than 1 nat)")
    p = bench_sub.add_parser("learned-defensive", help=help, description=help)
    add_lm_arguments(p)
    add_data_dir_argument(p, str(DATA_ROOT), "the data folder")
    add_json_argument(p)
    p.add_argument("--train", type=POSITIVE, default=60, help="SocialIQA training strings (default 60)")
    p.add_argument("--steps", type=POSITIVE, default=60, help="training steps (default 60)")
    p.add_argument("--particles", type=POSITIVE, default=16, help="draws per training step (default 16)")
    p.add_argument("--tune", type=POSITIVE, default=6, help="tuning strings, OpenBookQA dev (default 6)")
    p.add_argument("--heldout", type=POSITIVE, default=15, help="held-out strings, OpenBookQA test (default 15)")
    p.add_argument("--grid", type=float, nargs="+", default=[0.0, 0.1, 0.3], help="the shares a tried (default "
                   "0 0.1 0.3)")
    p.add_argument("--sizes", type=POSITIVE, nargs="+", default=[64, 256], help="numbers of samples (default 64 256)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    p.add_argument("--max-paths", type=POSITIVE, default=3000,
                   help="the most tokenizations of a string (default 3000)")
    p.add_argument("--records", default="defensive-runs.jsonl", help="the per-run JSON lines, appended and resumed")
    p.add_argument("--proposal-file", metavar="FILE", help="keep the trained proposal here (an existing one resumes)")
    p.set_defaults(func=transformers_backend_only(cmd_defensive))
