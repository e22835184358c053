"""``ppl-tok reading``: the reading-time study (:mod:`ppl_tok.reading`).

``ppl-tok reading focal FILE``: every focal-area predictor (4 whitespace conventions x 10 focal areas; over strings,
with the word-end correction, the bracket, the canonical tokens) of each word of each text (one per line), from one
walk per text, as a table on standard output. ``ppl-tok reading run``: the study on a corpus (stimuli + measurements),
into a resumable run folder, with the regressions, a table and a plot.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ppl_tok.cli.common import (_load_lm, add_json_argument, add_lm_arguments, add_search_arguments, lm_spec,
                                search_config)
from ppl_tok.cli.surprisal import read_items
from ppl_tok.common.arguments import POSITIVE, output_folder, add_renamed
from ppl_tok.strings.surprisal_default import SURPRISAL_LAZY

#: the lazy extension of the study's walk: every surprisal's measured default
EXTEND = SURPRISAL_LAZY["extend_threshold"]


def _measures(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected measure columns, comma-separated")
    return names


def cmd_focal(args: argparse.Namespace) -> None:
    from ppl_tok.reading.focal import normalise
    from ppl_tok.reading.focal_surprisal import focal_surprisals

    texts = [normalise(t) for t in read_items(args.file, None)]
    lm = _load_lm(args)
    table = focal_surprisals(lm, texts, text_ids=list(range(len(texts))), config=search_config(args))
    if args.format == "jsonl":
        for row in table.to_dict(orient="records"):
            print(json.dumps({k: ("Infinity" if v == float("inf") else v) for k, v in row.items()}, allow_nan=False))
    else:
        table.to_csv(sys.stdout, sep="\t" if args.format == "tsv" else ",", index=False)


def cmd_run(args: argparse.Namespace) -> None:
    from ppl_tok.reading.corpus import align, read_measurements, read_stimuli
    from ppl_tok.reading.study import format_report, run_study

    texts = read_stimuli(args.stimuli)  # every input error before the LM loads
    align(texts, *read_measurements(args.measurements), where=str(args.measurements))
    lm = _load_lm(args)

    def progress(done: int, total: int) -> None:
        if not args.json:
            print(f"walked {done}/{total} texts", file=sys.stderr, flush=True)

    report = run_study(lm, args.stimuli, args.measurements, args.out, measures=args.measures,
                       config=search_config(args), folds=args.folds, repeats=args.repeats, seed=args.seed,
                       batch=args.batch_size, published=args.published, progress=progress, limit=args.limit)
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        corrections = Path(args.out) / "corrections.csv"
        print("\n".join(format_report(report)))
        print(f"\nalignment corrections: {corrections}; the table: {Path(args.out) / 'summary.csv'}; "
              f"the plot: {Path(args.out) / 'gains.png'}")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``reading`` (with ``focal`` and ``run``) to the ``ppl-tok`` subcommands."""
    from ppl_tok.reading import PROVO_MEASURES  # light: --help imports no LM, pandas or torch

    reading = sub.add_parser("reading", help="the reading-time study: focal-area surprisal, regressions",
                             description=__doc__.split("\n\n")[1])
    rsub = reading.add_subparsers(dest="reading_command", required=True, metavar="PART",
                                  help="focal (the predictors of a text file) or run (the study)")
    p = rsub.add_parser("focal", help="every focal-area predictor of each word of each text (one per line)",
                        description="One row per word (its text's normalised words), one column per predictor: "
                                    "Surprisal{C}{A}, ...Corrected, ...Lower, ...Upper and Canonical{C}{A} "
                                    f"(--extend-threshold defaults to {EXTEND:g} here, as `ppl-tok surprisal`).")
    p.add_argument("file", help="UTF-8 text, one text per line (- for standard input)")
    p.add_argument("--format", choices=("csv", "tsv", "jsonl"), default="csv", help="output format (default csv)")
    add_lm_arguments(p)
    add_search_arguments(p, prefill=False, extend=EXTEND)
    p.set_defaults(func=cmd_focal)
    p = rsub.add_parser("run", help="the study on a corpus into a run folder (resumable)",
                        description="Walk every stimulus once (resumable), align the measurements' regions (every "
                                    "correction listed in OUT/corrections.csv), fit the regressions and write "
                                    "summary.csv, report.md and gains.png into OUT (--extend-threshold defaults to "
                                    f"{EXTEND:g} here, as `ppl-tok surprisal`).")
    p.add_argument("--stimuli", type=Path, required=True, help="one text per line; text i is line i")
    p.add_argument("--measurements", type=Path, required=True,
                   help="CSV: StimulusID,ContextLength,Region (Provo) or text_id,region,text, and the measures")
    p.add_argument("--out", type=output_folder, required=True, help="the run folder (created, or resumed)")
    p.add_argument("--measures", type=_measures, default=list(PROVO_MEASURES),
                   help=f"measure columns, comma-separated (default {','.join(PROVO_MEASURES)})")
    p.add_argument("--folds", type=POSITIVE, default=10, help="folds per repeat (default 10)")
    p.add_argument("--repeats", type=POSITIVE, default=10, help="shuffled repeats of the folds (default 10)")
    p.add_argument("--seed", type=int, default=0, help="the first repeat's shuffle seed (default 0)")
    add_renamed(p, "--batch-size", "--batch", type=POSITIVE, default=4, help="texts walked together (default 4)")
    p.add_argument("--limit", type=POSITIVE, help="walk the first LIMIT texts only and fit on their rows (a run in "
                                                 "progress; the folder resumes without it)")
    p.add_argument("--published", type=Path, help="a published gains CSV (predicted,predictor,delta_loglik_test) "
                                                  "to set beside")
    add_lm_arguments(p)
    add_search_arguments(p, prefill=False, extend=EXTEND)
    add_json_argument(p)
    p.set_defaults(func=cmd_run)
