"""``python -m benchmarks perplexity PART``: perplexity over strings on documents of the shared data, one
subcommand per part, each with only its own flags.

- ``run``: the marginal against canonical scoring over documents (rows kept in ``--out``, resumable);
- ``table DIR...``: the knob table of stored runs against ``--reference`` (no model);
- ``splits PATHS``: where the found gain sits, from rows kept with ``run --paths`` (the vocabulary, no model);
- ``memory``: the peak RSS of one long document's marginal;
- ``lockstep``: the documents one at a time against swept in lockstep;
- ``prefixes``: the beam's floor on the documents' first bytes against best-first search's bracket.
"""

from __future__ import annotations

import argparse
import sys

from ppl_tok.cli.bench import add_benchmark, add_parts
from ppl_tok.cli.common import _emit, _load_lm, add_extend_argument, lazy_options, lm_spec
from ppl_tok.common.arguments import POSITIVE, add_renamed, positive
from ppl_tok.strings.beam import StringSearchConfig


def _search(args: argparse.Namespace) -> StringSearchConfig:
    return StringSearchConfig(**lazy_options(args),
                              **{k: v for k, v in (("beam", args.beam), ("prune", args.prune)) if v is not None})


def _documents(args: argparse.Namespace) -> dict:
    return {"documents": args.documents, "min_bytes": args.lengths[0], "max_bytes": args.lengths[1]}


def cmd_run(args: argparse.Namespace) -> None:
    from benchmarks import perplexity as bench

    spec = lm_spec(args)
    result = bench.bench_perplexity(spec.model, **_documents(args), out=args.out, corpus=args.corpus,
                                    limit=args.limit, shard=args.shard, reference=args.reference, paths=args.paths,
                                    progress=sys.stderr.isatty() or args.progress, data_dir=args.data,
                                    search=_search(args), **spec.options())
    _emit(args, result, bench.format_perplexity(result))


def cmd_table(args: argparse.Namespace) -> None:
    from benchmarks import knobs

    result = knobs.knob_table(args.folders, args.reference)
    _emit(args, result, knobs.format_knob_table(result))


def cmd_splits(args: argparse.Namespace) -> None:
    """Where the found gain sits (:mod:`benchmarks.splits`)."""
    from benchmarks import splits
    from benchmarks.perplexity import document_parts
    from ppl_tok.lm.cards import load_vocabulary

    rows = splits.read_path_rows(args.paths_file)
    parts = document_parts(args.data, args.documents, args.lengths[0], args.lengths[1], args.corpus)
    kept = splits.kept_gains(args.reference) if args.reference else None
    spec = lm_spec(args)
    lm = _load_lm(args) if args.costs else None
    vocab = lm.vocab if lm is not None else load_vocabulary(spec.model)
    result = splits.split_table(rows, vocab.surfaces, {i: joins for i, (_, joins) in enumerate(parts)}, kept, lm=lm)
    _emit(args, result, splits.format_split_table(result))


def cmd_memory(args: argparse.Namespace) -> None:
    from benchmarks import memory_document

    spec = lm_spec(args)
    result = memory_document.bench_memory_document(spec.model, n_bytes=args.bytes, data_dir=args.data,
                                                   search=_search(args), **spec.options())
    _emit(args, result, memory_document.format_memory_document(result))


def cmd_lockstep(args: argparse.Namespace) -> None:
    from benchmarks import perplexity as bench

    spec = lm_spec(args)
    result = bench.bench_lockstep(spec.model, **_documents(args), data_dir=args.data, search=_search(args),
                                  **spec.options())
    _emit(args, result, bench.format_lockstep(result))


def cmd_prefixes(args: argparse.Namespace) -> None:
    from benchmarks import perplexity as bench

    spec = lm_spec(args)
    result = bench.bench_prefixes(spec.model, **_documents(args), prefix_bytes=args.bytes,
                                  **{k: v for k, v in (("budget", args.exact_budget),
                                                       ("tolerance", args.exact_tolerance)) if v is not None},
                                  data_dir=args.data, search=_search(args), **spec.options())
    _emit(args, result, bench.format_prefixes(result))


def _shard(text: str) -> tuple[int, int]:
    """An argparse type: ``K/N`` with ``0 <= K < N``."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N (e.g. 0/4), got {text!r}") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"expected K/N with 0 <= K < N, got {text!r}")
    return k, n


def _add_documents(p: argparse.ArgumentParser, corpus: bool = True) -> None:
    from benchmarks.perplexity import CORPORA

    p.add_argument("--documents", type=POSITIVE, default=50, help="documents (default 50)")
    p.add_argument("--lengths", type=POSITIVE, nargs=2, default=[300, 2000], metavar=("MIN", "MAX"),
                   help="document lengths in bytes, spread evenly (default 300 2000)")
    if corpus:
        p.add_argument("--corpus", choices=CORPORA, default="mixed",
                       help="mixed: HellaSwag and OpenBookQA (default); socialiqa: SocialIQA dev, a held-out corpus")


def _add_beam(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=POSITIVE, help=f"the beam's width (default {StringSearchConfig.beam})")
    p.add_argument("--prune", type=positive, help=f"the beam's prune, nats (default {StringSearchConfig.prune:g})")
    add_extend_argument(p)


def register(bench_sub: argparse._SubParsersAction) -> None:
    """``python -m benchmarks perplexity PART``."""
    help = ("perplexity over strings on documents of the shared data: run, table, splits, memory, lockstep, "
            "prefixes (python -m benchmarks perplexity PART --help)")
    parts = add_parts(bench_sub, "perplexity", help, "\n\n".join(__doc__.split("\n\n")[:2]))
    data = "the data folder"
    p = add_benchmark(parts, "run", "the marginal against canonical scoring, token-forwards per byte, over documents",
                      cmd_run, data=data)
    _add_documents(p)
    _add_beam(p)
    p.add_argument("--out", metavar="DIR", help="keep each document's row in this folder as it is measured; "
                   "a rerun resumes")
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
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    p = add_benchmark(parts, "table", "the knob table of stored runs against a reference run (no model is loaded)",
                      cmd_table, lm=False)
    p.add_argument("folders", nargs="+", metavar="DIR", help="folders of perplexity run --out")
    p.add_argument("--reference", metavar="DIR", required=True, help="the run they are compared with (beam 8, say)")
    p = add_benchmark(parts, "splits", "where the found gain sits: each document's best path's splits against the "
                      "canonical path, by kind, from rows kept with run --paths (the vocabulary is loaded, not the "
                      "model, unless --costs)", cmd_splits, data=data)
    p.add_argument("paths_file", metavar="PATHS", help="a folder of run --paths, or a JSON Lines file (.gz read as "
                   "gzip), on the --documents, --lengths and --corpus they were measured on")
    _add_documents(p)
    p.add_argument("--reference", metavar="DIR", help="also the gain that run kept in each class")
    p.add_argument("--costs", action="store_true",
                   help="also each split's own cost and what the text after it gains, from one forward of each best "
                        "path and its canonical one (loads the model)")
    p = add_benchmark(parts, "memory", "the peak RSS of the marginal of one document of --bytes bytes (progress lines "
                      "on stderr)", cmd_memory, data=data)
    p.add_argument("--bytes", type=POSITIVE, required=True, metavar="BYTES", help="the document's length in bytes")
    _add_beam(p)
    p = add_benchmark(parts, "lockstep", "the marginals of --documents documents one at a time against swept in "
                      "lockstep (one batched forward per step)", cmd_lockstep, data=data)
    _add_documents(p, corpus=False)
    _add_beam(p)
    p = add_benchmark(parts, "prefixes", "the beam's floor on the documents' first --bytes bytes against "
                      "best-first search's bracket, where that closes to --exact-tolerance", cmd_prefixes, data=data)
    p.add_argument("--bytes", type=POSITIVE, nargs="+", required=True, metavar="BYTES", help="prefix lengths")
    add_renamed(p, "--exact-budget", "--budget", type=POSITIVE, metavar="FORWARDS",
                help="the certified search's forwards at most, per prefix, for the bracket (default 5000)")
    add_renamed(p, "--exact-tolerance", "--tolerance", type=positive, metavar="NATS",
                help="the bracket's width, nats, at which it counts as closed (default 1e-3)")
    _add_documents(p, corpus=False)
    _add_beam(p)
