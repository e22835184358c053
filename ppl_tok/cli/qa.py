"""``ppl-tok qa run``, ``report`` and ``summary``: the multiple-choice QA study from the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ppl_tok.cli.common import (add_lm_arguments, add_proposal_arguments, add_ray_arguments, lm_spec, proposal_record,
                                ray_address)
from ppl_tok.common.arguments import POSITIVE, SEED, LaterHelp, output_folder, positive, add_renamed
from ppl_tok.datasets import DATA_ROOT, TASKS
from ppl_tok.qa.data import DATASETS, SHUFFLE_SEED
from ppl_tok.strings.beam import AUTO_HEAD_TOKENS, PREFILL_MODES, StringSearchConfig


def _optional_scores() -> tuple[str, ...]:
    """What ``--scores`` may add (:func:`ppl_tok.qa.run.optional_scores`: the scoring registry, read on use)."""
    from ppl_tok.qa.run import optional_scores

    return optional_scores()


def _scoring_default(scoring: str, name: str) -> object:
    """A default of a scoring's own parameters (``exact``'s :class:`ppl_tok.scorings.exact.ExactParams`,
    ``most-likely``'s :class:`ppl_tok.scorings.most_likely.MostLikelyParams`), read when needed (the scorings'
    modules import torch)."""
    from ppl_tok.common.params import default_of
    from ppl_tok.scorings.registry import SCORINGS

    return default_of(SCORINGS[scoring].params, name)


def _pair_params() -> dict[str, type]:
    """The own parameters of the scorings ``--scores`` may add that are stored as their figures
    (:func:`ppl_tok.scorings.registry.pair_scored_kinds`): their flags, beside the study's own."""
    from ppl_tok.scorings.registry import pair_scored_kinds
    from ppl_tok.scorings.registry import SCORINGS

    return {k: SCORINGS[k].params for k in pair_scored_kinds()}


def _scores(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in _optional_scores()]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown scores {unknown}: choose from {','.join(_optional_scores())}")
    return names


def _sources() -> tuple[str, ...]:
    """What ``qa ensemble --sources`` accepts: the deterministic scorings' classifiers
    (:func:`ppl_tok.scorings.registry.ensemble_sources`), read when needed."""
    from ppl_tok.scorings.registry import ensemble_sources

    return ensemble_sources()


def _source(text: str) -> str:
    if text not in _sources():
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(_sources())})")
    return text


def _default_device(ray: bool) -> str:
    """Where scoring runs without ``--device``: the CPU, or with Ray a GPU where the driver sees one."""
    if not ray:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_run(args: argparse.Namespace) -> None:
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.run import check_study, removed_if_nothing_stored, run_study, study_settings

    proposal = proposal_record(args)  # a bad pairing, file or parameter: before anything loads
    study = load_study(args.dataset, args.data_dir, tune=args.tune, limit=args.limit, seed=args.shuffle_seed)
    spec = lm_spec(args)
    from ppl_tok.common.params import from_args, given, refuse_foreign, settings as own_settings

    kinds = {k: cls for k, cls in _pair_params().items() if k in args.scores}
    refuse_foreign(args, kinds, _pair_params(), "--scores")
    params = {k: {f: v for f, v in own_settings(from_args(cls, args)).items() if f in given(args)}
              for k, cls in kinds.items()}
    settings = study_settings(study, lm=spec, samples=args.samples, seed=args.seed, scores=args.scores,
                              limit=args.limit, shuffle_seed=args.shuffle_seed,
                              device=args.device or _default_device(args.ray is not None),
                              exact_tolerance=_scoring_default("exact", "exact_tolerance")
                              if args.exact_tolerance is None else args.exact_tolerance,
                              exact_budget=_scoring_default("exact", "exact_budget") if args.exact_budget is None
                              else args.exact_budget,
                              most_likely_time=_scoring_default("most-likely", "most_likely_time")
                              if args.time_budget is None else args.time_budget, proposal=proposal,
                              params={k: v for k, v in params.items() if v})
    check_study(study, settings, args.batch_size)
    ray_address(args)  # --workers without --ray refused
    with removed_if_nothing_stored(args.out):
        if args.ray is not None:
            from ppl_tok.qa.distributed import LMLoader, run_study_ray

            store = run_study_ray(study, LMLoader.from_spec(spec), args.out, settings,
                                  workers=args.workers, address=args.ray or None,
                                  batch_questions=args.batch_size, progress=not args.json)
        else:
            lm = load_lm(spec)
            store = run_study(study, lm, args.out, settings, batch_questions=args.batch_size,
                              progress=not args.json)
    summary = {"out": str(args.out), "records": len(store.records), "splits": study.sizes(),
               "scores": store.settings["scores"]}
    print(json.dumps(summary) if args.json else
          f"{args.out}: {len(store.records)} records for {study.sizes()}; next: ppl-tok qa report {args.out}")


def cmd_report(args: argparse.Namespace) -> None:
    import os

    from ppl_tok.qa.report import REPORT_JSON, REPORT_MD, write_report

    if args.dir.is_dir() and not os.access(args.dir, os.W_OK):  # before the bootstrap, not after it
        raise ValueError(f"{args.dir} is not writable: report.md, report.json and the plots are written there")
    report = write_report(args.dir, runs=args.runs, seed=args.seed, resamples=args.resamples, limit=args.limit,
                          complete=args.complete)
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print((args.dir / REPORT_MD).read_text(encoding="utf-8"))
        print(f"wrote {args.dir / REPORT_MD}, {args.dir / REPORT_JSON} and two PNG plots")


def cmd_summary(args: argparse.Namespace) -> None:
    from ppl_tok.qa.summary import summary_markdown, summary_rows

    rows = summary_rows(args.dirs)
    print(json.dumps(rows, allow_nan=False) if args.json else summary_markdown(rows), end="\n" if args.json else "")


def _run_study(args: argparse.Namespace, folder):
    """The questions a run folder scored (its dataset, limit and shuffle seed; data from --data-dir or --dataset)."""
    from ppl_tok.qa.data import DATASETS, load_study
    from ppl_tok.qa.run import check_settings
    from ppl_tok.qa.store import SETTINGS_FILE, read_settings

    st = check_settings(read_settings(folder), str(folder / SETTINGS_FILE))
    dataset = st["dataset"] if st["dataset"] in DATASETS else args.dataset
    if dataset is None:
        raise ValueError(f"{folder} scored the JSON Lines file {st['dataset']!r}: give its path with --dataset "
                         "(and --tune for its tuning split)")
    return load_study(dataset, args.data_dir, tune=args.tune, limit=st.get("limit"),
                      seed=st.get("shuffle_seed") or SHUFFLE_SEED)


def cmd_contexts(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from ppl_tok.lm.cards import load_lm
    from ppl_tok.qa.contexts import compute_context_log_probs, context_folder
    from ppl_tok.qa.run import run_lm_spec
    from ppl_tok.qa.store import read_settings

    study = _run_study(args, args.dir)
    st = read_settings(args.dir)
    lm = load_lm(run_lm_spec(st, args.device))
    with tqdm(total=sum(len(study.splits[s]) for s in args.splits if s in study.splits), unit="q",
                      desc=f"contexts ({args.method})", disable=args.json) as bar:
        store = compute_context_log_probs(args.dir, study, lm, args.method, splits=args.splits,
                                          search=StringSearchConfig(beam=args.beam, prune=args.prune,
                                                                    prefill=args.prefill),
                                          progress=lambda done, total: bar.update(done - bar.n))
    out = {"folder": str(context_folder(args.dir, args.method)), "records": len(store.records)}
    print(json.dumps(out) if args.json else f"{out['folder']}: {out['records']} context log-probabilities")


def cmd_ensemble(args: argparse.Namespace) -> None:
    from ppl_tok.qa.ensemble import ensemble_markdown, evaluate_ensemble

    report = evaluate_ensemble(args.runs, weights=args.weights, sources=args.sources, context=args.context,
                               split=args.split, resamples=args.resamples, seed=args.seed)
    print(json.dumps(report, allow_nan=False) if args.json else ensemble_markdown(report))


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``qa`` (with ``run``, ``report`` and ``summary``) to the ``ppl-tok`` subcommands."""
    qa = sub.add_parser("qa", help="the multiple-choice QA study (the paper's Sec. 6)",
                        description="Score multiple-choice questions with canonical, marginal, mixture and exact "
                                    "classifiers; resumable; reports the paper's Tables 1-2 and Figs. 5-6.")
    qa_sub = qa.add_subparsers(dest="qa_command", required=True)
    _add_run(qa_sub)
    _add_report(qa_sub)
    _add_summary(qa_sub)
    _add_contexts(qa_sub)
    _add_ensemble(qa_sub)


def _add_run(qa_sub: argparse._SubParsersAction) -> None:
    p = qa_sub.add_parser("run", help="score a dataset into a run folder (resumable)")
    p.add_argument("--dataset", required=True, help=f"one of {', '.join(DATASETS)} or a JSON Lines file "
                   "(objects with context, choices, label, optional id)")
    p.add_argument("--tune", type=Path, help="JSON Lines tuning split (with a JSON Lines --dataset)")
    p.add_argument("--data-dir", type=Path,
                   help=f"folder holding {', '.join(t + '/' for t in TASKS)} (laid out like {DATA_ROOT})")
    add_lm_arguments(p)
    from ppl_tok.common.params import add_flags_later
    from ppl_tok.scorings.registry import DEFAULT_SAMPLES

    p.add_argument("--samples", type=POSITIVE, default=DEFAULT_SAMPLES,
                   help=f"importance samples N per answer (default {DEFAULT_SAMPLES})")
    p.add_argument("--limit", type=POSITIVE, help="at most this many questions per split")
    add_proposal_arguments(p)
    p.add_argument("--scores", type=_scores, default=[],
                   help=LaterHelp(lambda: f"optional scores, comma-separated: {','.join(_optional_scores())}"))
    p.add_argument("--out", type=output_folder, required=True, help="the run folder (created, or resumed)")
    p.add_argument("--seed", type=SEED, default=0, help="run seed: each answer's particles get a seed derived from it")
    p.add_argument("--shuffle-seed", type=SEED, default=SHUFFLE_SEED,
                   help=f"seed of the SocialIQA/HellaSwag tune/test shuffle (default {SHUFFLE_SEED})")
    add_renamed(p, "--batch-size", "--batch-questions", type=POSITIVE, default=8,
                help="questions scored together (all their answers), each batch stored when done (default 8)")
    add_renamed(p, "--exact-tolerance", "--tolerance", type=positive, metavar="NATS", help=LaterHelp(
        lambda: f"exact: bracket width in nats (default {_scoring_default('exact', 'exact_tolerance'):g})"))
    add_renamed(p, "--exact-budget", "--budget", type=POSITIVE, metavar="FORWARDS", help=LaterHelp(
        lambda: f"exact: the certified search's LM forwards at most, per answer (default "
                 f"{_scoring_default('exact', 'exact_budget')})"))
    p.add_argument("--time-budget", type=positive, metavar="SECONDS", help=LaterHelp(
        lambda: f"most-likely: seconds per answer (default {_scoring_default('most-likely', 'most_likely_time'):g})"))
    add_ray_arguments(p, "questions")
    p.add_argument("--json", action="store_true", help="no progress bar; print a JSON summary")
    from ppl_tok.scorings.records import STUDY_PARAMS

    add_flags_later(p, _pair_params, "--scores", shared=STUDY_PARAMS)
    p.set_defaults(func=cmd_run)


def _add_report(qa_sub: argparse._SubParsersAction) -> None:
    p = qa_sub.add_parser("report", help="tables, plots and report.json of a run folder")
    p.add_argument("dir", type=Path, help="a run folder written by `ppl-tok qa run`")
    p.add_argument("--runs", type=POSITIVE, default=256, help="random k-subsets per k (default 256, as the paper)")
    p.add_argument("--resamples", type=POSITIVE, default=10_000, help="paired bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the k-subsets and the bootstrap")
    prefix = p.add_mutually_exclusive_group()
    prefix.add_argument("--limit", type=POSITIVE, help="the first LIMIT questions of each split only (a run in progress)")
    prefix.add_argument("--complete", action="store_true",
                        help="the largest first part of every split that is all scored (a run in progress)")
    p.add_argument("--json", action="store_true", help="print report.json's object")
    p.set_defaults(func=cmd_report)


def _add_summary(qa_sub: argparse._SubParsersAction) -> None:
    p = qa_sub.add_parser("summary", help="one table over many run folders (their report.json, test split)")
    p.add_argument("dirs", type=Path, nargs="+", metavar="dir", help="run folders, each with a current report.json")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.set_defaults(func=cmd_summary)


def _add_contexts(qa_sub: argparse._SubParsersAction) -> None:
    p = qa_sub.add_parser("contexts", help="log P(question) under a run's model: the mixture's evidence (resumable)",
                          description="Compute log P_m(context) of every question of a run with the run's model, "
                                      "into RUN/contexts-METHOD/, for `ppl-tok qa ensemble`.")
    p.add_argument("dir", type=Path, help="a run folder written by `ppl-tok qa run`")
    p.add_argument("--method", choices=["canonical", "prefix"], default="canonical",
                   help="canonical: log p(canonical tokens of the context) (default); prefix: the string's prefix "
                        "probability over every covering (the byte-synchronous beam; slow)")
    p.add_argument("--data-dir", type=Path, help="folder holding the run's dataset (built-in datasets)")
    p.add_argument("--dataset", help="the JSON Lines file the run scored (a generic dataset)")
    p.add_argument("--tune", type=Path, help="its tuning split, if the run had one")
    p.add_argument("--splits", nargs="+", default=["test"], help="splits to compute (default: test)")
    p.add_argument("--device", help="torch device for the model")
    p.add_argument("--beam", type=POSITIVE, default=StringSearchConfig.beam,
                   help=f"prefix: token prefixes kept per byte (default {StringSearchConfig.beam})")
    p.add_argument("--prune", type=positive, default=StringSearchConfig.prune,
                   help=f"prefix: pruning threshold in nats (default {StringSearchConfig.prune:g})")
    p.add_argument("--prefill", choices=PREFILL_MODES, default=StringSearchConfig.prefill,
                   help="prefix: exact (every covering of the context), canonical-head (the context's canonical head in "
                        "one forward, the beam over its tail: log P(context, head tokenized canonically)) or auto "
                        f"(canonical-head when the head has at least {AUTO_HEAD_TOKENS} tokens; default "
                        f"{StringSearchConfig.prefill})")
    p.add_argument("--json", action="store_true", help="no progress bar; print a JSON summary")
    p.set_defaults(func=cmd_contexts)


def _add_ensemble(qa_sub: argparse._SubParsersAction) -> None:
    p = qa_sub.add_parser("ensemble", help="string-level ensembles of runs of different models (mixture, product)",
                          description="Combine the stored answer scores of runs of different models on the same "
                                      "questions at the string level: the Bayesian mixture (weights from each "
                                      "model's probability of the question, `qa contexts`) and the product of "
                                      "experts; accuracy against each model alone with paired bootstrap intervals.")
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="two or more run folders, same questions")
    p.add_argument("--weights", type=positive, nargs="+",
                   help="mixture prior pi_m / product exponents alpha_m, one per run (default: 1/M each)")
    p.add_argument("--sources", nargs="+", type=_source, metavar="SOURCE", help=LaterHelp(
        lambda: f"per run, its answer score, a deterministic scoring's classifier: one of "
                f"{', '.join(_sources())} (default canonical; exact is the certified bracket's midpoint, "
                "the run needs --scores exact)"))
    p.add_argument("--context", choices=["canonical", "prefix"], default="canonical",
                   help="the mixture's evidence log P_m(question), from `qa contexts --method` (default canonical)")
    p.add_argument("--split", default="test", help="the split evaluated (default test)")
    p.add_argument("--resamples", type=POSITIVE, default=10_000, help="paired bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the bootstrap")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_ensemble)
