"""``python -m benchmarks NAME``: one subcommand per benchmark beside the package (``benchmarks/``), each with its
own flags; ``ppl-tok bench`` keeps the checks of a user's own machine (engine, memory, gpu-check).

Every benchmark reports ratios against a baseline run in the same process (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any
from pathlib import Path

from benchmarks.cli_learned import register_learned
from benchmarks.cli_lm_eval import add_lm_eval
from ppl_tok.common.arguments import POSITIVE, integer, output_file, positive, share
from ppl_tok.cli.bench import _add, _openbookqa_dev
from ppl_tok.cli.common import (_emit, _load_lm, add_extend_argument, add_search_arguments,
                                lazy_options, lm_spec, search_config)
from ppl_tok.strings.beam import StringSearchConfig


def cmd_mdd(args: argparse.Namespace) -> None:
    from benchmarks import mdd as bench

    result = bench.bench_mdd(args.data, models=args.models or list(bench.MDD_MODELS),
                             naive_bytes=args.naive_bytes, max_bytes=args.max_bytes)
    _emit(args, result, bench.format_mdd(result))


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

    if args.rescore:  # the stored runs only, with the current warning rule: no LM
        result = {**diag.analyze(diag.load_records(args.records), num_samples=args.samples), "records": args.records}
    else:
        spec = lm_spec(args)
        sizes = diag.QUICK if args.quick else {"strings": args.strings, "seeds": args.seeds,
                                               "num_samples": args.samples}
        result = diag.run(spec.model, data=_openbookqa_dev(args.data), records=args.records, **sizes,
                          **spec.options())
    _emit(args, result, diag.format_report(result))


def _splits(args: argparse.Namespace) -> None:
    """``bench perplexity --splits PATHS [--reference DIR] [--costs]``: where the found gain sits
    (:mod:`benchmarks.splits`)."""
    from benchmarks import splits
    from benchmarks.perplexity import document_parts
    from ppl_tok.lm.cards import load_vocabulary

    rows = splits.read_path_rows(args.splits)
    parts = document_parts(args.data, args.documents, args.lengths[0], args.lengths[1], args.corpus)
    kept = splits.kept_gains(args.reference) if args.reference else None
    spec = lm_spec(args)
    lm = _load_lm(args) if args.costs else None
    vocab = lm.vocab if lm is not None else load_vocabulary(spec.model)
    result = splits.split_table(rows, vocab.surfaces, {i: joins for i, (_, joins) in enumerate(parts)}, kept, lm=lm)
    _emit(args, result, splits.format_split_table(result))


def cmd_perplexity(args: argparse.Namespace) -> None:
    from benchmarks import perplexity as bench

    if args.table:
        from benchmarks import knobs

        if not args.reference:
            raise ValueError("--table compares folders against --reference DIR (the beam-8 run, say): give it")
        result = knobs.knob_table(args.table, args.reference)
        _emit(args, result, knobs.format_knob_table(result))
        return
    if args.splits is not None:
        _splits(args)
        return
    spec = lm_spec(args)
    search = StringSearchConfig(**lazy_options(args),
                                **{k: v for k, v in (("beam", args.beam), ("prune", args.prune)) if v is not None})
    common = {"data_dir": args.data, "search": search, **spec.options()}
    documents = {"documents": args.documents, "min_bytes": args.lengths[0], "max_bytes": args.lengths[1]}
    if args.lockstep:
        result = bench.bench_lockstep(spec.model, **documents, **common)
        _emit(args, result, bench.format_lockstep(result))
    elif args.prefix_bytes is not None:
        result = bench.bench_prefixes(spec.model, **documents, prefix_bytes=args.prefix_bytes,
                                      **{k: v for k, v in (("budget", args.prefix_budget),
                                                           ("tolerance", args.prefix_tolerance)) if v is not None},
                                      **common)
        _emit(args, result, bench.format_prefixes(result))
    elif args.memory_bytes is not None:
        from benchmarks import memory_document

        result = memory_document.bench_memory_document(spec.model, n_bytes=args.memory_bytes, **common)
        _emit(args, result, memory_document.format_memory_document(result))
    else:
        result = bench.bench_perplexity(spec.model, **documents, out=args.out, corpus=args.corpus, limit=args.limit,
                                        shard=args.shard, reference=args.reference, paths=args.paths,
                                        progress=sys.stderr.isatty() or args.progress, **common)
        _emit(args, result, bench.format_perplexity(result))


def cmd_strings(args: argparse.Namespace) -> None:
    from benchmarks import strings as bench

    spec = lm_spec(args)
    if args.prefill_bytes or args.prefill_prompts:
        _prefill(args, spec)
        return
    if args.genlm_python:
        result = bench.bench_genlm(args.genlm_python, spec.model, data=args.data, n_bytes=args.genlm_bytes,
                                   keep=args.genlm_keep, **spec.options())
        _emit(args, result, bench.format_genlm(result))
        return
    if args.generation_only:
        from ppl_tok.lm.cards import load_lm

        result = bench.bench_generation(load_lm(spec), args.data, StringSearchConfig.beam, args.generate_bytes,
                                        args.generate_threshold, args.generate_seeds)
        _emit(args, result, bench.format_generation(result))
        return
    result = bench.bench_strings(spec.model, data=args.data, long_bytes=args.long_bytes, prompts=args.prompts,
                                 prompt_records=args.prompt_records, prompts_only=args.prompts_only,
                                 generate_bytes=args.generate_bytes, generate_threshold=args.generate_threshold,
                                 generate_seeds=args.generate_seeds,
                                 **spec.options())
    _emit(args, result, bench.format_strings(result))


def _prefill(args: argparse.Namespace, spec: Any) -> None:
    from benchmarks import prefill as bench
    from benchmarks.strings import mid_word_prompts
    from ppl_tok.lm.cards import load_lm

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


def cmd_surprisal(args: argparse.Namespace) -> None:
    from benchmarks import surprisal as bench

    bench.held_out_items(args.text, 1)  # a bad --text is an error before the model loads
    lm = _load_lm(args)
    result = bench.bench_surprisal(lm, args.text, words=args.words, config=search_config(args),
                                   batch=args.batch_size, per_item=args.per_item, reference=args.reference)
    _emit(args, result, bench.format_surprisal(result))


def _shard(text: str) -> tuple[int, int]:
    """An argparse type: ``K/N`` with ``0 <= K < N``."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N (e.g. 0/4), got {text!r}") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"expected K/N with 0 <= K < N, got {text!r}")
    return k, n


def _add_perplexity(bench_sub: argparse._SubParsersAction) -> None:
    from benchmarks.perplexity import CORPORA

    p = _add(bench_sub, "perplexity", "perplexity over strings: marginal against canonical scoring, token-forwards "
             "per byte, on documents of the shared data", cmd_perplexity, data="the data folder")
    p.add_argument("--documents", type=POSITIVE, default=50, help="documents (default 50)")
    p.add_argument("--lengths", type=POSITIVE, nargs=2, default=[300, 2000], metavar=("MIN", "MAX"),
                   help="document lengths in bytes, spread evenly (default 300 2000)")
    p.add_argument("--beam", type=POSITIVE, help=f"the beam's width (default {StringSearchConfig.beam})")
    p.add_argument("--prune", type=positive, help=f"the beam's prune, nats (default {StringSearchConfig.prune:g})")
    add_extend_argument(p)
    p.add_argument("--out", metavar="DIR", help="keep each document's row in this folder as it is measured; "
                   "a rerun resumes")
    p.add_argument("--corpus", choices=CORPORA, default="mixed",
                   help="mixed: HellaSwag and OpenBookQA (default); socialiqa: SocialIQA dev, a held-out corpus")
    p.add_argument("--limit", type=POSITIVE, metavar="N",
                   help="only the first N documents of the measuring order (ends first: 0, last, 1, ...)")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="K/N",
                   help="measure every N-th of those documents from the K-th (0-based; parallel processes, each "
                        "with its own --out; concatenate their documents.jsonl to report on all)")
    p.add_argument("--reference", metavar="DIR",
                   help="a folder of this benchmark (e.g. beam 8) on the same documents: report the share of its "
                        "gain kept and whether the certified brackets meet")
    p.add_argument("--paths", action="store_true",
                   help="keep every tokenization each document's search found in its row, and report what its gain "
                        "would cost an oracle that knew them in advance (benchmarks.oracle)")
    p.add_argument("--costs", action="store_true",
                   help="--splits: also each split's own cost and what the text after it gains, from one forward of "
                        "each best path and its canonical one (loads the model)")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--table", nargs="+", metavar="DIR",
                      help="instead, the knob table of these folders against --reference (no model is loaded)")
    mode.add_argument("--splits", metavar="PATHS",
                      help="instead, where the found gain sits: each document's best path's splits against the "
                           "canonical path, by kind, from rows kept with --paths (a folder, or a JSON Lines file, .gz "
                           "read as gzip), on the --documents, --lengths and --corpus they were measured on; with "
                           "--reference DIR, the gain that run kept in each class (the vocabulary is loaded, not the "
                           "model)")
    mode.add_argument("--memory-bytes", type=POSITIVE, metavar="BYTES",
                      help="instead, the peak RSS of the marginal of one document of BYTES bytes (progress lines "
                           "on stderr)")
    mode.add_argument("--lockstep", action="store_true",
                      help="instead, the marginals of --documents documents one at a time against swept in "
                           "lockstep (one batched forward per step)")
    mode.add_argument("--prefix-bytes", type=POSITIVE, nargs="+", metavar="BYTES",
                      help="instead, the beam's floor on the documents' first BYTES bytes against best-first "
                           "search's bracket, where that closes to --prefix-tolerance")
    p.add_argument("--prefix-budget", type=POSITIVE,
                   help="--prefix-bytes: forwards per prefix for the bracket (default 5000)")
    p.add_argument("--prefix-tolerance", type=positive,
                   help="--prefix-bytes: the bracket's width, nats, at which it counts as closed (default 1e-3)")


def _add_strings(bench_sub: argparse._SubParsersAction) -> None:
    p = _add(bench_sub, "strings", "the LM over strings: cost per byte, prompt boundaries, generation, next-byte "
             "walks against genlm-bytes", cmd_strings, data="the data folder")
    p.add_argument("--long-bytes", type=integer(0), default=2000,
                   help="bytes of the long running text (0: none; default 2000)")
    p.add_argument("--prompts", type=integer(0), default=50,
                   help="mid-word prompts of the prompt-boundary part (0: none; default 50)")
    p.add_argument("--prompt-records", type=output_file, metavar="FILE",
                   help="append each prompt's numbers to this JSON Lines file, and resume from it")
    p.add_argument("--prompts-only", action="store_true", help="the prompt-boundary part alone")
    p.add_argument("--generation-only", action="store_true",
                   help="the generation part alone: byte and tokens modes against token sampling after the same "
                        "prompt (40 bytes, 2 kB), bytes/s ratios and forwards per byte")
    p.add_argument("--generate-bytes", type=POSITIVE, default=200, help="bytes per generation (default 200)")
    p.add_argument("--generate-seeds", type=POSITIVE, default=5,
                   help="draws per generation row, the token sampler's included, at seeds 0..N-1: one draw's "
                        "tokens per byte moves its bytes/s by 15%% or more (default 5)")
    p.add_argument("--generate-threshold", type=share, default=0.1, metavar="SHARE",
                   help="the lazy byte-mode rows' extend threshold (default 0.1)")
    p.add_argument("--prefill-bytes", type=POSITIVE, nargs="+", metavar="N",
                   help="only the prefill part: prompts of N bytes of held-out text, canonical scoring against "
                        "canonical-head and (N <= 400) exact conditioning (e.g. 100 400 2000 8000)")
    p.add_argument("--prefill-prompts", type=integer(0), default=0, metavar="N",
                   help="prefill part: also the first N mid-word prompts, canonical-head against exact (exact's "
                        "figures from --prompt-records when it holds them)")
    p.add_argument("--prefill-tail", type=POSITIVE, metavar="BYTES",
                   help="prefill part: the fewest bytes the beam walks (default: none beyond the reach of the "
                        "tokens that can run past the prompt's end)")
    p.add_argument("--genlm-python", metavar="PYTHON",
                   help="only the comparison with genlm-bytes, run by this interpreter (its own environment)")
    p.add_argument("--genlm-bytes", type=POSITIVE, default=1000,
                   help="--genlm-python: bytes of OpenBookQA test questions walked (default 1000)")
    p.add_argument("--genlm-keep", metavar="DIR",
                   help="--genlm-python: write each walk's JSON into this folder as it finishes")

def register(bench_sub: argparse._SubParsersAction) -> None:
    """Add one subcommand per benchmark of ``benchmarks/`` to ``bench_sub``."""
    p = _add(bench_sub, "mdd", "MDD compilation: bytes per second of the trie compiler against the naive one",
             cmd_mdd, lm=False, data="a data folder or a text file")
    p.add_argument("--models", nargs="+", help="the vocabularies (default smollm2-135m gemma3-270m)")
    p.add_argument("--max-bytes", type=integer(0), default=2_000_000, help="texts compiled by the trie compiler")
    p.add_argument("--naive-bytes", type=POSITIVE, default=1_000, help="texts compiled by the naive compiler")
    p = _add(bench_sub, "marginal", "importance sampling: the vectorised marginal against sequential Pyro",
             cmd_marginal)
    p.add_argument("--sizes", type=POSITIVE, nargs="+", default=[16, 64, 256], help="numbers of samples")
    p.add_argument("--baseline-samples", type=POSITIVE, default=64, help="N of the sequential baseline")
    p.add_argument("--quick", action="store_true", help="one small run of each part (a smoke test)")
    p = _add(bench_sub, "most-likely", "branch and bound: the incumbent against time", cmd_most_likely)
    p.add_argument("--time-budget", type=positive, default=60.0, help="seconds per prefix (default 60)")
    p.add_argument("--png", type=output_file, help="plot the curve here")
    p = _add(bench_sub, "estimators", "the marginal's estimators against the exact answer at equal cost",
             cmd_estimators)
    p.add_argument("--samples", type=POSITIVE, default=64, help="particles (default 64)")
    p = _add(bench_sub, "diagnostics", "precision and recall of the estimates' warnings against exact answers",
             cmd_diagnostics, data="a data folder (its openbookqa/dev.jsonl) or a JSON Lines file")
    p.add_argument("--strings", type=POSITIVE, default=30, help="strings with exact truth (default 30)")
    p.add_argument("--seeds", type=POSITIVE, default=5, help="seeds per string and method (default 5)")
    p.add_argument("--samples", type=POSITIVE, default=64, help="particles (default 64)")
    p.add_argument("--records", default="diagnostics-runs.jsonl",
                   help="the per-run JSON lines, appended and resumed (default diagnostics-runs.jsonl)")
    p.add_argument("--rescore", action="store_true",
                   help="score the stored --records with the current warning rule, without the LM")
    p.add_argument("--quick", action="store_true", help="one small run (a smoke test)")
    _add_strings(bench_sub)
    _add_perplexity(bench_sub)
    add_lm_eval(bench_sub, _add)
    register_learned(bench_sub)
    p = _add(bench_sub, "surprisal", "word surprisal over strings against canonical-token surprisal of the same "
             "words: words per second, the ratio, forwards per word", cmd_surprisal)
    p.add_argument("--text", required=True, metavar="FILE",
                   help="held-out text: a text file (one item per line) or a HellaSwag, SocialIQA or OpenBookQA "
                        "data file (its contexts), e.g. ../shared/data/hellaswag/hellaswag_val.jsonl.gz")
    p.add_argument("--words", type=POSITIVE, default=1000, help="words scored (default 1000)")
    p.add_argument("--batch-size", type=POSITIVE, default=16, metavar="N",
                   help="items per forward (canonical) and walked in lockstep (strings) (default 16, as "
                        "ppl-tok surprisal)")
    p.add_argument("--per-item", action="store_true",
                   help="also the strings column one item at a time (slow: one LM call per byte of every item)")
    p.add_argument("--reference", action="store_true",
                   help="with --extend-threshold: also the strings column without lazy extension, and each word's "
                        "difference from it (median, p95, max bits)")
    add_search_arguments(p, prefill=False)
