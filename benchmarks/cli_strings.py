"""``python -m benchmarks strings PART``: the LM over strings, one subcommand per part, each with only its own
flags.

- ``all``: every part below but prefill and genlm (cost per byte on a long running text, the prompt
  boundary, generation);
- ``prompts``: the prompt-boundary part alone (mid-word prompts, resumable records);
- ``generation``: byte and token modes against token sampling after the same prompt;
- ``prefill``: canonical scoring against canonical-head and exact conditioning on long prompts;
- ``genlm``: next-byte walks against genlm-bytes, run by its own interpreter.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from ppl_tok.cli.bench import add_benchmark, add_parts
from ppl_tok.cli.common import _emit, lm_spec
from ppl_tok.common.arguments import POSITIVE, integer, output_file, share
from ppl_tok.strings.beam import StringSearchConfig


def cmd_all(args: argparse.Namespace) -> None:
    from benchmarks import strings as bench

    spec = lm_spec(args)
    result = bench.bench_strings(spec.model, data=args.data, long_bytes=args.long_bytes, prompts=args.prompts,
                                 prompt_records=args.prompt_records, generate_bytes=args.generate_bytes,
                                 generate_threshold=args.generate_threshold, generate_seeds=args.generate_seeds,
                                 **spec.options())
    _emit(args, result, bench.format_strings(result))


def cmd_prompts(args: argparse.Namespace) -> None:
    from benchmarks import strings as bench

    spec = lm_spec(args)
    result = bench.bench_strings(spec.model, data=args.data, prompts=args.prompts, prompt_records=args.prompt_records,
                                 prompts_only=True, **spec.options())
    _emit(args, result, bench.format_strings(result))


def cmd_generation(args: argparse.Namespace) -> None:
    from benchmarks import strings as bench
    from ppl_tok.lm.cards import load_lm

    result = bench.bench_generation(load_lm(lm_spec(args)), args.data, StringSearchConfig.beam, args.generate_bytes,
                                    args.generate_threshold, args.generate_seeds)
    _emit(args, result, bench.format_generation(result))


def cmd_genlm(args: argparse.Namespace) -> None:
    from benchmarks import strings as bench

    spec = lm_spec(args)
    result = bench.bench_genlm(args.python, spec.model, data=args.data, n_bytes=args.genlm_bytes,
                               keep=args.genlm_keep, **spec.options())
    _emit(args, result, bench.format_genlm(result))


def cmd_prefill(args: argparse.Namespace) -> None:
    from benchmarks import prefill as bench
    from benchmarks.strings import mid_word_prompts
    from ppl_tok.lm.cards import load_lm

    if not (args.prefill_bytes or args.prefill_prompts):
        raise ValueError("give --prefill-bytes N ... and/or --prefill-prompts N: the prefill part has nothing to run")
    spec = lm_spec(args)
    lm = load_lm(spec.model, **spec.options())
    config = StringSearchConfig(prefill_tail=args.prefill_tail)
    result: dict[str, Any] = {"model": spec.model, "beam": config.beam, "prefill_tail": args.prefill_tail}
    lines: list[str] = []
    if args.prefill_bytes:
        result["prefill"] = bench.prefill_sizes(lm, args.prefill_bytes, args.data, config=config)
        lines += bench.format_prefill(result["prefill"])
    if args.prefill_prompts:
        pairs = mid_word_prompts(Path(args.data), args.prefill_prompts)
        result["midword"] = m = bench.midword_difference(lm, pairs, replace(config, prefill="exact"),
                                                         args.prompt_records)
        lines.append(f"mid-word prompts: {m['prompts']} ({m['with_a_head']} with a head): |canonical-head - exact| "
                     f"median {m['median_abs_diff']:.4g}, 95th percentile {m['p95_abs_diff']:.4g} nats; mean gain over "
                     f"canonical tokens {m['mean_gain_canonical_head']:.2f} nats (exact {m['mean_gain_exact']:.2f})")
    _emit(args, result, lines)


def _add_prompts(p: argparse.ArgumentParser, records: str) -> None:
    p.add_argument("--prompts", type=integer(0), default=50,
                   help="mid-word prompts of the prompt-boundary part (0: none; default 50)")
    p.add_argument("--prompt-records", type=output_file, metavar="FILE", help=records)


def _add_generation(p: argparse.ArgumentParser) -> None:
    p.add_argument("--generate-bytes", type=POSITIVE, default=200, help="bytes per generation (default 200)")
    p.add_argument("--generate-seeds", type=POSITIVE, default=5,
                   help="draws per generation row, the token sampler's included, at seeds 0..N-1: one draw's "
                        "tokens per byte moves its bytes/s by 15%% or more (default 5)")
    p.add_argument("--generate-threshold", type=share, default=0.1, metavar="SHARE",
                   help="the lazy byte-mode rows' extend threshold (default 0.1)")


RECORDS = "append each prompt's numbers to this JSON Lines file, and resume from it"


def register(bench_sub: argparse._SubParsersAction) -> None:
    """``python -m benchmarks strings PART``."""
    help = ("the LM over strings: all, prompts, generation, prefill, genlm (python -m benchmarks strings PART "
            "--help)")
    parts = add_parts(bench_sub, "strings", help, "\n\n".join(__doc__.split("\n\n")[:2]))
    data = "the data folder"
    p = add_benchmark(parts, "all", "cost per byte on a long running text, the prompt boundary, generation",
                      cmd_all, data=data)
    p.add_argument("--long-bytes", type=integer(0), default=2000,
                   help="bytes of the long running text (0: none; default 2000)")
    _add_prompts(p, RECORDS)
    _add_generation(p)
    p = add_benchmark(parts, "prompts", "the prompt-boundary part alone: mid-word prompts", cmd_prompts, data=data)
    _add_prompts(p, RECORDS)
    p = add_benchmark(parts, "generation", "byte and tokens modes against token sampling after the same prompt "
                      "(40 bytes, 2 kB), bytes/s ratios and forwards per byte", cmd_generation, data=data)
    _add_generation(p)
    p = add_benchmark(parts, "prefill", "prompts of N bytes of held-out text: canonical scoring against "
                      "canonical-head and (N <= 400) exact conditioning; mid-word prompts, canonical-head against "
                      "exact", cmd_prefill, data=data)
    p.add_argument("--prefill-bytes", type=POSITIVE, nargs="+", metavar="N",
                   help="prompt lengths in bytes (e.g. 100 400 2000 8000)")
    p.add_argument("--prefill-prompts", type=integer(0), default=0, metavar="N",
                   help="also the first N mid-word prompts, canonical-head against exact (exact's figures from "
                        "--prompt-records when it holds them)")
    p.add_argument("--prefill-tail", type=POSITIVE, metavar="BYTES",
                   help="the fewest bytes the beam walks (default: none beyond the reach of the tokens that can run "
                        "past the prompt's end)")
    p.add_argument("--prompt-records", type=output_file, metavar="FILE", help=RECORDS)
    p = add_benchmark(parts, "genlm", "next-byte walks against genlm-bytes, run by PYTHON (its own environment)",
                      cmd_genlm, data=data)
    p.add_argument("python", metavar="PYTHON", help="the interpreter of genlm-bytes' environment")
    p.add_argument("--genlm-bytes", type=POSITIVE, default=1000,
                   help="bytes of OpenBookQA test questions walked (default 1000)")
    p.add_argument("--genlm-keep", metavar="DIR", help="write each walk's JSON into this folder as it finishes")
