"""``ppl-tok perplexity FILE|-``: bits per byte, byte and word perplexity of a corpus, per document and in all."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ppl_tok.common.arguments import (POSITIVE, SEED, LaterChoices, add_renamed, integer, output_file, positive,
                                      run_folder)
from ppl_tok.common.params import add_flags_later
from ppl_tok.cli.common import (_emit, _vocab, add_command, add_json_argument, add_lm_arguments,
                                add_proposal_arguments, add_ray_arguments, lm_spec, ray_address, refuse_ignored)
from ppl_tok.cli.proposals import proposal_values
from ppl_tok.perplexity.corpus import SPLITS
from ppl_tok.scorings.registry import DOCUMENT, accepted, scoring as find_scoring

#: documents listed one per line in the text output (the JSON output lists all)
SHOWN = 20


def _fmt(x: float) -> str:
    return f"{x:.4f}" if abs(x) < 1e6 else f"{x:.4g}"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    s = summary
    scoring = find_scoring(s["scoring"], DOCUMENT)
    label = f"{scoring.canonical_label}:".ljust(12)
    lines = [f"{s['documents']} documents, {s['bytes']} bytes, {s['words']} words, {s['tokens']} canonical tokens",
             f"{label} bits/byte {_fmt(s['canonical']['bits_per_byte'])}   byte perplexity "
             f"{_fmt(s['canonical']['byte_perplexity'])}   word perplexity {_fmt(s['canonical']['word_perplexity'])}"]
    if not scoring.baseline:
        lines.append(f"{s['scoring']}: bits/byte {_fmt(s['bits_per_byte'])}   byte perplexity "
                     f"{_fmt(s['byte_perplexity'])}   word perplexity {_fmt(s['word_perplexity'])}")
        cert = s.get("certified")
        if cert is not None:
            lines.append(f"  certified: bits/byte <= {_fmt(cert['bits_per_byte_ceiling'])}   byte perplexity <= "
                         f"{_fmt(cert['byte_perplexity_ceiling'])}   word perplexity <= "
                         f"{_fmt(cert['word_perplexity_ceiling'])}")
        gain = s["gain_bits_per_byte"]
        lines.append(f"  gain over canonical: {gain['value']:.5f} bits/byte "
                     f"(95% bootstrap {gain['low']:.5f} .. {gain['high']:.5f})"
                     + (f"; certified at least {s['certified_gain_bits_per_byte']['value']:.5f}"
                        if "certified_gain_bits_per_byte" in s else ""))
    lines.append(f"LM token-forwards per byte: {s['forwards_per_byte']:.3f}")
    return lines


def document_params() -> dict[str, type]:
    """Each document-level scoring's own parameters (:attr:`ppl_tok.scorings.Scoring.params`), by name: the flags
    ``ppl-tok perplexity`` takes beside the shared ones (:func:`ppl_tok.common.params.add_flags`)."""
    from ppl_tok.scorings.registry import SCORINGS

    return {s.name: s.params for s in SCORINGS.values() if DOCUMENT in s.levels}


def refuse_ignored_flags(args: argparse.Namespace) -> None:
    """The flags that ``--scoring`` would ignore, refused (one line naming the flag, the scoring and the flags it
    takes) before anything is read: another scoring's parameters, ``--proposal`` where the scoring draws no
    particles, ``--checkpoint-every`` without ``--out``."""
    from ppl_tok.common.params import given, refuse_foreign, specs
    from ppl_tok.scorings.registry import check_limits

    chosen = find_scoring(args.scoring, DOCUMENT)
    every = {s.name: s for cls in document_params().values() for s in specs(cls)}
    check_limits(every.values(), given(args), lambda spec: spec.flag)  # a flag past its limit, whoever reads it
    refuse_foreign(args, {args.scoring: chosen.params}, document_params(), "--scoring")
    if (args.proposal is not None or args.proposal_file is not None
            or args.proposal_param) and "proposal" not in {
            s.name for s in specs(chosen.params)}:
        takers = [name for name, cls in document_params().items() if "proposal" in {s.name for s in specs(cls)}]
        raise ValueError(f"--proposal {args.proposal} is the importance proposal of --scoring {', '.join(takers)}, "
                         f"not of {args.scoring}: drop it, or score {'that' if len(takers) == 1 else 'one of those'}")
    if args.out is None:
        refuse_ignored(args, ("--checkpoint-every",), "it saves the documents in progress into the run folder of "
                       "--out, and there is none", "give --out DIR, or leave FLAG out")


def scoring_config(args: argparse.Namespace) -> Any:
    """The :class:`~ppl_tok.scorings.ScoringConfig` of the flags: ``--scoring``, ``--window`` and the scoring's
    own parameters given (the others: their defaults), the proposal's record where it takes one."""
    from ppl_tok.common.params import from_args, specs
    from ppl_tok.scorings.registry import ScoringConfig

    chosen = find_scoring(args.scoring, DOCUMENT)
    values = {s.name: getattr(from_args(chosen.params, args), s.name) for s in specs(chosen.params)}
    if "proposal" in values:
        from ppl_tok.scorings.registry import proposal_value

        values["proposal"] = proposal_value(args.proposal, args.proposal_file, proposal_values(args))
    return ScoringConfig(chosen.name, window=args.window, **values)


def cmd_perplexity(args: argparse.Namespace) -> None:
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.perplexity.corpus import read_corpus
    from ppl_tok.perplexity.report import corpus_summary, document_row
    from ppl_tok.perplexity.run import run_perplexity
    from ppl_tok.scorings.documents import cap_prefix_cache

    refuse_ignored_flags(args)
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {args.out} is a file, not a run folder: give a new folder or a run's folder")
    address = ray_address(args)  # --ray needs --out; --workers needs --ray
    if args.out is not None:
        from ppl_tok.perplexity.store import PerplexityStore

        PerplexityStore.check_settings_present(args.out)  # records without run.json: refused before the model loads
    corpus = read_corpus(args.file, field=args.field, split=args.split)  # every input check before the model loads
    if args.limit is not None:
        from ppl_tok.perplexity.corpus import Corpus

        corpus = Corpus(corpus.source, corpus.documents[: args.limit], corpus.sha256)
    config, spec = scoring_config(args), lm_spec(args)  # the spec's model: the card's name, however spelled
    progress = not args.json and sys.stderr.isatty() or args.progress
    if address is not None:
        from ppl_tok.lm.loader import LMLoader
        from ppl_tok.perplexity.distributed import run_perplexity_ray

        scores = run_perplexity_ray(LMLoader.from_spec(spec), corpus, config, out=args.out, model=spec.model,
                                    workers=args.workers, address=address or None, batch_docs=args.batch_size,
                                    field=args.field, split=args.split, progress=progress)
    else:
        lm = load_lm(spec)
        cap_prefix_cache(lm)  # every scoring: a canonical call caches each position's row, never read again
        scores = run_perplexity(lm, corpus, config, out=args.out, model=spec.model, batch_docs=args.batch_size,
                                field=args.field, split=args.split, progress=progress,
                                checkpoint_every=args.checkpoint_every)
    summary = corpus_summary(scores, config.scoring)
    rows = [document_row(s) for s in scores]
    if args.json:
        from ppl_tok.common.jsonout import to_json

        print(to_json({"model": args.model, "source": corpus.source, "out": args.out, **summary,
                       "per_document": rows}))
        return
    for doc, row in list(zip(corpus.documents, rows))[:SHOWN]:
        extra = f"  (certified <= {row['bits_per_byte_ceiling']:.4f})" if "bits_per_byte_ceiling" in row else ""
        print(f"{doc.where}: {row['bytes']} bytes  bits/byte {row['bits_per_byte']:.4f}  canonical "
              f"{row['canonical_bits_per_byte']:.4f}{extra}")
    if len(rows) > SHOWN:
        print(f"... {len(rows) - SHOWN} more documents (--json lists all)")
    print("\n".join(summary_lines(summary)))
    if args.out is not None:
        print(f"stored in {args.out} (resumable)")


def cmd_report(args: argparse.Namespace) -> None:
    """The study figures of a run folder as JSON; ``--compare``: runs on the documents they share;
    ``--importance``: the folder (a beam run) against a canonical+rest run's importance estimates."""
    import json

    from ppl_tok.perplexity.report import compare_runs, importance_against_floor, study_report

    for folder in (args.dir, *(args.compare or ()), *([args.importance] if args.importance else [])):
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a run folder (no such folder)")
    if args.importance:
        out = importance_against_floor(args.importance, args.dir)
    elif args.compare:
        out = compare_runs([args.dir, *args.compare])
    else:
        from ppl_tok.lm.cards import load_vocabulary
        from ppl_tok.perplexity.store import PerplexityStore

        vocab = load_vocabulary(PerplexityStore.read_settings(args.dir)["model"])
        out = study_report(args.dir, resamples=args.resamples, seed=args.seed, png=args.png, spans_png=args.spans_png,
                           vocab=vocab)
    if args.json:
        print(json.dumps(out, indent=1, allow_nan=False))
        return
    print("\n".join(readable(out)))


def _number(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "-"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def readable(obj: Any, indent: int = 0) -> list[str]:
    """A report's JSON object as indented ``key: value`` lines (lists of objects as one line each); ``--json``
    prints the object itself."""
    pad, lines = "  " * indent, []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for key, v in items:
        if isinstance(v, dict) and all(not isinstance(x, (dict, list)) for x in v.values()) and len(v) <= 6:
            lines.append(f"{pad}{key}: " + ", ".join(f"{k} {_number(x)}" for k, x in v.items()))
        elif isinstance(v, dict):
            lines.append(f"{pad}{key}:")
            lines += readable(v, indent + 1)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            lines.append(f"{pad}{key}:")
            lines += [f"{pad}  " + ", ".join(f"{k} {_number(x)}" for k, x in row.items()) for row in v]
        elif isinstance(v, list):
            lines.append(f"{pad}{key}: " + ", ".join(_number(x) for x in v))
        else:
            lines.append(f"{pad}{key}: {_number(v)}")
    return lines


def cmd_compare(args: argparse.Namespace) -> None:
    """Runs of several LMs on one corpus, per scoring: bits per byte and paired bootstrap differences."""
    from ppl_tok.perplexity.compare import compare_models, format_comparison

    for folder in args.dirs:
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a run folder (no such folder)")
    report = compare_models(args.dirs, resamples=args.resamples, seed=args.seed)
    if args.json:
        from ppl_tok.common.jsonout import to_json

        print(to_json(report))
        return
    print("\n".join(format_comparison(report)))


def cmd_byte_audit(args: argparse.Namespace) -> None:
    from ppl_tok.perplexity.audit import audit_bytes, check_table_size, read_byte_table
    from ppl_tok.perplexity.corpus import read_corpus

    corpus = read_corpus(args.file, field=args.field, split=args.split)
    table = read_byte_table(args.table) if args.table else None  # every entry checked before the LM loads
    lm = None
    if args.bits:
        from ppl_tok.lm.cards import load_lm

        lm = load_lm(args.model, device=args.device)
    vocab = lm.vocab if lm is not None else _vocab(args)
    if table is not None:
        check_table_size(args.table, table, len(vocab))
    audit = audit_bytes(vocab, [d.text for d in corpus.documents], table, lm=lm, bos_id=args.bos_id)
    d = audit.to_dict()
    lines = [f"{corpus.source}: {audit.documents} documents, {audit.tokens} tokens under {vocab.name}",
             f"exact UTF-8 bytes:   {audit.exact_bytes}"]
    if audit.claimed_bytes is not None:
        lines.append(f"the table claims:    {audit.claimed_bytes} ({d['difference']:+d} bytes, "
                     f"{100 * d['difference'] / audit.exact_bytes:+.2f}%): "
                     + ("FLAGGED" if audit.flagged else "agrees to the byte"))
        for cause, diff in audit.by_cause.items():
            shown = ", ".join(f"{n!r} {c} for {t}" for n, c, t in audit.examples[cause])
            lines.append(f"  {cause:14s} {diff:+d} bytes (e.g. {shown})")
    if audit.bits_per_byte is not None:
        lines.append(f"canonical bits per byte: {audit.bits_per_byte:.4f} over the exact bytes"
                     + ("" if audit.claimed_bits_per_byte is None else
                        f", {audit.claimed_bits_per_byte:.4f} over the table's"))
    _emit(args, {"model": args.tokenizer or args.model, "source": corpus.source, **d}, lines)


def _register_byte_audit(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "byte-audit", "the exact UTF-8 bytes of a corpus against a per-token byte table's claim "
                    "(the difference by cause: leading-space marker, byte fallback, partial UTF-8, special tokens), "
                    "and canonical bits per byte over exact bytes with --bits (docs/perplexity.md)", "vocab")
    p.add_argument("file", metavar="FILE", help="a UTF-8 text file, a JSON Lines file (with --field), or - (stdin)")
    p.add_argument("--field", help="JSON Lines: the field holding each document's text")
    p.add_argument("--split", choices=SPLITS, default="none", help="text input: documents as for ppl-tok perplexity")
    p.add_argument("--table", metavar="PATH", help="the per-token byte counts to audit: a JSON list, .npy or .pt "
                   "with one entry per token id (default: none, exact bytes only)")
    p.add_argument("--bos-id", type=integer(0), metavar="ID",
                   help="a token each document's stream starts with (BOS), counted with the table (exact: 0 bytes)")
    p.add_argument("--bits", action="store_true", help="load --model and report canonical bits per byte")
    p.add_argument("--device", help="with --bits: the device (default: the card's)")
    p.set_defaults(func=cmd_byte_audit)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``perplexity`` and ``byte-audit`` to the ``ppl-tok`` subcommands."""
    p = sub.add_parser("perplexity", help="bits per byte, byte and word perplexity of a corpus (canonical or "
                       "the marginal by the beam, with certified floors)",
                       description="Score a corpus (a text file, - for standard input, or JSON Lines with --field) "
                                   "and print bits per byte, byte perplexity and word perplexity per document and "
                                   "in all. Marginal figures come with their certified ceiling on bits per byte. "
                                   "Long documents run in lm-eval's rolling windows (docs/perplexity.md).")
    p.add_argument("file", metavar="FILE", help="a UTF-8 text file, a JSON Lines file (with --field), or - (stdin)")
    p.add_argument("--field", help="JSON Lines: the field holding each document's text (e.g. text)")
    p.add_argument("--split", choices=SPLITS, default="none",
                   help="text input: one document (none, default), one per line, or one per blank-line-separated "
                        "paragraph")
    p.add_argument("--scoring", choices=LaterChoices(lambda: accepted(DOCUMENT)), default="canonical", metavar="SCORING",
                   help="canonical tokens (default); beam: the text without its end, the marginal over "
                        "tokenizations by the byte-synchronous beam (certified bracket; 'marginal' is its old name); "
                        "prefix: P(the output starts with the text); with-end: P(the output is exactly the text, "
                        "then EOS) (both by the beam, certified; docs/perplexity.md: which is fair when); or "
                        "canonical+rest: canonical plus an importance estimate of the rest (the registered ones: %(choices)s)")
    add_lm_arguments(p)
    p.add_argument("--window", type=integer(3), help="positions per forward (default: the model's context length)")
    add_proposal_arguments(p)
    add_flags_later(p, document_params, "--scoring")
    p.add_argument("--limit", type=POSITIVE, help="the first LIMIT documents only")
    p.add_argument("--out", type=run_folder,
                   help="a run folder: records stored as they are computed; resumes a killed run")
    add_renamed(p, "--batch-size", "--batch-docs", type=POSITIVE, default=8,
                help="documents scored together, each batch stored in --out when done (default 8)")
    p.add_argument("--checkpoint-every", type=positive, default=60.0, metavar="SECONDS",
                   help="with --out, save the documents in progress every SECONDS (beam, prefix, with-end; default 60): "
                        "a killed run resumes mid-document")
    add_ray_arguments(p, "batches of documents")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    add_json_argument(p)
    p.set_defaults(func=cmd_perplexity)
    _register_reports(sub)
    _register_byte_audit(sub)


def _register_reports(sub: argparse._SubParsersAction) -> None:
    """``perplexity-report`` and ``perplexity-compare``: what a run folder's records say (no LM)."""
    p = sub.add_parser("perplexity-report", help="the study figures of a perplexity run folder (a table; --json): gain, "
                       "certified gain, spans; --compare runs; --importance against the floor",
                       description="The study figures of a `ppl-tok perplexity --out` folder, as key: value "
                                   "lines or (--json) JSON (bits per "
                                   "byte, the certified gain with its bootstrap interval, the gain by length and by "
                                   "kind of span); with --compare, the runs of DIR and those folders on the "
                                   "documents they share; with --importance, DIR (a beam run) against that "
                                   "canonical+rest run's importance estimates.")
    p.add_argument("dir", type=Path, metavar="DIR", help="a run folder written by ppl-tok perplexity --out")
    p.add_argument("--png", type=output_file, metavar="FILE", help="plot the gain against length here")
    p.add_argument("--spans-png", type=output_file, metavar="FILE",
                   help="plot the share of the gain by kind of span here")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--compare", nargs="+", type=Path, metavar="DIR",
                      help="compare the beam runs of DIR and these folders on the documents they share")
    what.add_argument("--importance", type=Path, metavar="DIR",
                      help="DIR (a beam run) against this canonical+rest run's importance estimates")
    p.add_argument("--resamples", type=POSITIVE, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=SEED, default=0, help="bootstrap seed (default 0; the report states it)")
    add_json_argument(p)
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("perplexity-compare", help="runs of several LMs on one corpus: bits per byte per scoring and "
                       "paired bootstrap differences",
                       description="Compare `ppl-tok perplexity --out` folders of different LMs on the same corpus "
                                   "(same source, field, split, documents and windows; refused otherwise): per "
                                   "scoring present, each model's bits per byte (with its certified bracket where "
                                   "the scoring has one) and, per pair of models, the difference in bits per byte "
                                   "with a paired bootstrap interval over documents (docs/perplexity.md, fair "
                                   "comparison across tokenizers).")
    p.add_argument("dirs", type=Path, nargs="+", metavar="DIR",
                   help="run folders, one per (model, scoring); at least two models")
    p.add_argument("--resamples", type=POSITIVE, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=SEED, default=0, help="bootstrap seed (default 0)")
    add_json_argument(p)
    p.set_defaults(func=cmd_compare)
