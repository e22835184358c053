"""``ppl-tok bench``: runs the benchmarks of :mod:`ppl_tok.bench` and prints their figures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ppl_tok.cli.common import _emit
from ppl_tok.lm.spec import DEFAULT_MODEL


def cmd_bench(args: argparse.Namespace) -> None:
    from ppl_tok.bench import tokenization as bench

    lm_options = {"device": args.device, "dtype": args.dtype, "bos_id": args.bos_id}
    if args.what == "mdd":
        result = bench.bench_mdd(args.data, models=args.models or list(bench.MDD_MODELS),
                                 naive_bytes=args.naive_bytes, max_bytes=args.max_bytes)
        _emit(args, result, bench.format_mdd(result))
    elif args.what == "most-likely":
        result = bench.bench_most_likely(args.model or DEFAULT_MODEL, time_budget=args.time_budget, png=args.png,
                                         **lm_options)
        _emit(args, result, bench.format_most_likely(result))
    elif args.what == "marginal":
        quick = bench.QUICK_MARGINAL if args.quick else {}
        result = bench.bench_marginal(args.model or DEFAULT_MODEL, **{
            "sizes": tuple(args.sizes), "baseline_samples": args.baseline_samples, **quick, **lm_options})
        _emit(args, result, bench.format_marginal(result))
    elif args.what == "engine":
        data = args.data if args.data.endswith(".jsonl") else str(Path(args.data) / "openbookqa" / "dev.jsonl")
        result = bench.bench_engine(args.model or DEFAULT_MODEL, data=data, questions=args.questions,
                                    num_samples=args.samples, batch_questions=args.batch_questions,
                                    big_n=args.big_n, **lm_options)
        _emit(args, result, bench.format_engine(result))
    elif args.what == "estimators":
        result = bench.bench_estimators(args.model or DEFAULT_MODEL, num_samples=args.samples, **lm_options)
        _emit(args, result, bench.format_estimators(result))
    elif args.what == "diagnostics":
        from ppl_tok.bench import diagnostics as diag

        if args.rescore:  # the stored runs only, with the current warning rule: no LM
            result = {**diag.analyze(diag.load_records(args.records), num_samples=args.samples), "records": args.records}
        else:
            data = args.data if args.data.endswith(".jsonl") else str(Path(args.data) / "openbookqa" / "dev.jsonl")
            sizes = diag.QUICK if args.quick else {"strings": args.strings, "seeds": args.seeds,
                                                   "num_samples": args.samples}
            result = diag.run(args.model or DEFAULT_MODEL, data=data, records=args.records, **sizes, **lm_options)
        _emit(args, result, diag.format_report(result))
    elif args.what == "memory":
        result = bench.bench_memory(device=args.device)
        _emit(args, result, bench.format_memory(result))
    elif args.what == "perplexity":
        from ppl_tok.bench import perplexity as perplexity_bench

        from ppl_tok.strings.beam import StringSearchConfig

        knobs = {"search": StringSearchConfig(**{k: v for k, v in (("beam", args.beam), ("prune", args.prune))
                                                 if v is not None})}
        if args.lockstep:
            result = perplexity_bench.bench_lockstep(args.model or DEFAULT_MODEL, data_dir=args.data,
                                                     documents=args.documents, min_bytes=args.lengths[0],
                                                     max_bytes=args.lengths[1], **knobs, **lm_options)
            _emit(args, result, perplexity_bench.format_lockstep(result))
        elif args.prefix_bytes is not None:
            result = perplexity_bench.bench_prefixes(args.model or DEFAULT_MODEL, data_dir=args.data,
                                                     documents=args.documents, min_bytes=args.lengths[0],
                                                     max_bytes=args.lengths[1], prefix_bytes=args.prefix_bytes,
                                                     budget=args.prefix_budget, tolerance=args.prefix_tolerance,
                                                     **knobs, **lm_options)
            _emit(args, result, perplexity_bench.format_prefixes(result))
        elif args.memory_bytes is not None:
            result = perplexity_bench.bench_memory_document(args.model or DEFAULT_MODEL, data_dir=args.data,
                                                            n_bytes=args.memory_bytes, **knobs, **lm_options)
            _emit(args, result, perplexity_bench.format_memory_document(result))
        else:
            result = perplexity_bench.bench_perplexity(args.model or DEFAULT_MODEL, data_dir=args.data,
                                                       documents=args.documents, min_bytes=args.lengths[0],
                                                       max_bytes=args.lengths[1], out=args.out,
                                                       progress=sys.stderr.isatty() or args.progress,
                                                       **knobs, **lm_options)
            _emit(args, result, perplexity_bench.format_perplexity(result))
    elif args.what == "strings":
        from ppl_tok.bench import strings as strings_bench

        if args.genlm_python:
            result = strings_bench.bench_genlm(args.genlm_python, args.model or DEFAULT_MODEL, data=args.data,
                                               n_bytes=args.genlm_bytes, keep=args.genlm_keep, **lm_options)
            _emit(args, result, strings_bench.format_genlm(result))
            return
        result = strings_bench.bench_strings(args.model or DEFAULT_MODEL, data=args.data, long_bytes=args.long_bytes,
                                             prompts=args.prompts, prompt_records=args.prompt_records,
                                             prompts_only=args.prompts_only, **lm_options)
        _emit(args, result, strings_bench.format_strings(result))
