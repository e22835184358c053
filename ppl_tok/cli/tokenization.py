"""The commands on one string: ``tokenize``, ``count``, ``mdd``, ``score``, ``marginal``, ``distribution``,
``canonicity``, ``most-likely`` and ``sat``; ``learn-proposal`` (a proposal trained on a word list)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from ppl_tok.common.arguments import POSITIVE, SEED, LaterChoices, output_file, positive, add_renamed
from ppl_tok.cli.common import (STDIN, _check_context, _emit, _load_lm, _names, _read_text, _tokens, _vocab,
                                add_command, add_proposal_arguments, add_text_arguments, proposal_names,
                                proposal_record)
from ppl_tok.common.jsonout import count_fields
from ppl_tok.limits import limits


def cmd_tokenize(args: argparse.Namespace) -> None:
    from ppl_tok.mdd import compile_mdd

    vocab = _vocab(args)
    mdd = compile_mdd(args.text, vocab)
    canon = mdd.canonical()
    _emit(args, {"text": args.text, "canonical": _tokens(vocab, canon), **count_fields(mdd.count())},
          [f"canonical: {' '.join(f'{vocab.token_name(t)}({t})' for t in canon)}",
           f"tokenizations: {mdd.count()}"])


def cmd_count(args: argparse.Namespace) -> None:
    from ppl_tok.mdd import compile_mdd

    mdd = compile_mdd(args.text, _vocab(args))
    _emit(args, {"text": args.text, **count_fields(mdd.count())}, [str(mdd.count())])


def cmd_mdd(args: argparse.Namespace) -> None:
    from ppl_tok.mdd import compile_mdd

    mdd = compile_mdd(args.text, _vocab(args))
    if args.png:
        mdd.draw(args.png)  # first: it refuses large MDDs
    if args.dot == STDIN:
        sys.stdout.write(mdd.to_dot())
    elif args.dot:
        mdd.to_dot(args.dot)
    written = [p for p in (args.dot, args.png) if p and p != STDIN]
    lines = [f"{mdd.number_of_nodes()} nodes, {mdd.number_of_edges()} edges, {mdd.count()} tokenizations"]
    lines += [f"wrote {p}" for p in written]
    if args.dot == STDIN:  # standard output holds the DOT text
        print("\n".join(lines), file=sys.stderr)
        return
    _emit(args, {"text": args.text, "nodes": mdd.number_of_nodes(), "edges": mdd.number_of_edges(),
                 **count_fields(mdd.count()), "dot": args.dot, "png": args.png}, lines)


def cmd_score(args: argparse.Namespace) -> None:
    from ppl_tok.mdd import compile_mdd

    lm = _load_lm(args)
    compile_mdd(args.text, lm.vocab)  # a text with no tokenization: say which characters
    _check_context(args, lm)
    canon = lm.canonical(args.text)
    lp = lm.log_prob(canon, args.context)
    _emit(args, {"text": args.text, "context": args.context, "canonical": _tokens(lm.vocab, canon),
                 "canonical_log_prob": lp},
          [f"canonical: {_names(lm.vocab, canon)}",
           f"log p(canonical | context) = {lp:.4f}"])


def cmd_marginal(args: argparse.Namespace) -> None:
    from ppl_tok.mdd import compile_mdd
    from ppl_tok.infer.exact import exact_marginal
    from ppl_tok.infer.importance import marginal
    from ppl_tok.infer.search import marginal_bounds
    from ppl_tok.proposals import proposal

    guide = _guide(args)
    lm = _load_lm(args)
    mdd = compile_mdd(args.text, lm.vocab)
    _check_context(args, lm, walk="the text", covering=False)
    if args.exact and mdd.count() > args.max_paths:  # before sampling
        raise ValueError(f"{args.text!r} has {mdd.count()} tokenizations, more than --max-paths "
                         f"{args.max_paths}: drop --exact or raise --max-paths")
    result = marginal(args.text, lm, args.samples, guide=guide, context=args.context, seed=args.seed, mdd=mdd)
    bounds = None
    if args.bounds is not None:
        bounds = marginal_bounds(args.text, lm, context=args.context, tolerance=args.bounds, budget=args.exact_budget,
                                 mdd=mdd)
        result = result.checked_against(bounds.lower, bounds.upper)
    payload: dict[str, Any] = {
        "text": args.text, "context": args.context, "model": lm.name, **count_fields(mdd.count()),
        "proposal": result.proposal, "num_samples": result.num_samples, "seed": args.seed,
        "log_marginal": result.log_marginal, "log_se": result.log_se, "khat": result.khat,
        "canonical_log_prob": result.canonical_log_prob,
        "canonical": _tokens(lm.vocab, result.canonical), "ess": result.ess,
        "canonical_estimate": result.canonical_estimate, "noncanonical_estimate": result.noncanonical_estimate,
        "acceptance_rate": result.acceptance_rate, "forwards": result.forwards, "seconds": result.seconds,
        "warnings": list(result.warnings), "statement": result.statement, "certified_lower": result.certified_lower,
        "distinct_tokenizations": result.distinct,
    }
    khat = "n/a" if result.khat is None else f"{result.khat:.2f}"
    lines = [
        f"text: {args.text!r}   context: {args.context!r}   model: {lm.name}",
        f"tokenizations:             {mdd.count()}",
        f"canonical:                 {_names(lm.vocab, result.canonical)}",
        f"log p(canonical):          {result.canonical_log_prob:.4f}",
        f"log p(text), {result.proposal} IS, N={result.num_samples}: {result.log_marginal:.4f} ± {result.log_se:.4f}"
        f"   (ESS {result.ess:.1f}, k-hat {khat}, {result.forwards} LM forwards, {result.seconds:.1f} s)",
        f"  canonical part:          {result.canonical_estimate:.4f}",
        f"  non-canonical part:      {result.noncanonical_estimate:.4f}",
        f"  distinct tokenizations:  {result.distinct} of the {mdd.count()} drawn",
        f"statement:                 {result.statement}" + STATEMENT_NOTES.get(result.statement, ""),
        f"certified lower bound:     {result.certified_lower:.4f}   (every tokenization this run knows exactly)"
        + (f"; the estimate is {result.certified_lower - result.log_marginal:.4f} below it"
           if result.log_marginal < result.certified_lower else ""),
    ]
    if proposal(args.proposal).rejects:
        lines.append(f"  acceptance rate:         {result.acceptance_rate:.3f}")
    if args.exact:
        exact = exact_marginal(args.text, lm, context=args.context, max_paths=args.max_paths, mdd=mdd)
        payload.update(exact_log_marginal=exact.log_marginal, most_likely=_tokens(lm.vocab, exact.most_likely),
                       most_likely_log_prob=float(exact.log_probs[0]), canonical_share=exact.canonical_share)
        lines += [f"log p(text), exact:        {exact.log_marginal:.4f}   (canonical share {exact.canonical_share:.4f})",
                  f"most likely:               {_names(lm.vocab, exact.most_likely)} ({float(exact.log_probs[0]):.4f})"]
    if bounds is not None:
        from ppl_tok.strings.certified import WIDE_NATS

        b = bounds
        lower, upper = b.certified
        wide = upper - lower > WIDE_NATS
        hint = (f"uninformative (interval {upper - lower:.1f} nats wide, more than {WIDE_NATS:.3g} nats): raise "
                f"--exact-budget (now {args.exact_budget})") if wide else None
        payload.update(lower=lower, upper=upper, tolerance_nats=b.tolerance, informative=not wide, hint=hint,
                       bounds_closed=b.closed, bounds_forwards=b.forwards, certified_lower=result.certified_lower)
        lines.append(f"certified bracket:         [{lower:.4f}, {upper:.4f}]   "
                     f"({'closed' if b.closed else 'open'} at {args.bounds:g} nats, {b.forwards} forwards; "
                     f"rounding tolerance {b.tolerance:.1e} nats included)")
        if hint is not None:
            lines.append(f"  {hint}")
    lines += [f"WARNING: {w}" for w in result.warnings]
    _emit(args, payload, lines)


def cmd_distribution(args: argparse.Namespace) -> None:
    from ppl_tok.mdd import compile_mdd
    from ppl_tok.infer.exact import exact_marginal
    from ppl_tok.infer.importance import marginal
    from ppl_tok.infer.posterior import TokenizationPosterior

    lm = _load_lm(args)
    mdd = compile_mdd(args.text, lm.vocab)
    _check_context(args, lm)
    exact = None
    if args.proposal == "exact":
        exact = exact_marginal(args.text, lm, context=args.context, max_paths=args.max_paths, mdd=mdd)
        result = TokenizationPosterior.from_exact(exact)
        head = f"{result.count} tokenizations, log p(text) = {result.log_marginal:.4f}"
        extra: dict[str, Any] = {}
    else:
        estimate = marginal(args.text, lm, args.samples, guide=args.proposal, context=args.context, seed=args.seed,
                            mdd=mdd)
        result = TokenizationPosterior.from_importance(estimate)
        head = (f"{mdd.count()} tokenizations; {result.count} distinct in N={estimate.num_samples} {args.proposal} "
                f"samples (self-normalised weights, ESS {estimate.ess:.1f}); log p(text) = "
                f"{estimate.log_marginal:.4f} ± {estimate.log_se:.4f}")
        extra = {"num_samples": estimate.num_samples, "seed": args.seed, "ess": estimate.ess, "khat": estimate.khat,
                 "log_se": estimate.log_se, "statement": result.statement,
                 "covered_log_mass": result.covered_log_mass, "warnings": list(result.warnings)}
    if args.png:
        from ppl_tok.plots import plot_distribution

        plot_distribution(result, lm.vocab, args.png, top=args.top)
    rows = [{"tokens": _tokens(lm.vocab, v), "posterior": p, "canonical": v == result.canonical}
            for v, p in zip(result.tokenizations[: args.top], result.probs.tolist())]
    if exact is not None:
        for row, lp in zip(rows, exact.log_probs.tolist()):
            row["log_prob"] = lp
    _emit(args, {"text": args.text, "proposal": args.proposal, **count_fields(mdd.count()), "distinct": result.count,
                 "log_marginal": result.log_marginal, "canonical_share": result.canonical_share, **extra,
                 "top": rows, "png": args.png},
          [head] + [f"{r['posterior']:.6f}  {'*' if r['canonical'] else ' '} {_names(lm.vocab, v)}"
                    for r, v in zip(rows, result.tokenizations)]
          + [f"WARNING: {w}" for w in extra.get("warnings", [])] + ([f"wrote {args.png}"] if args.png else []))


def cmd_canonicity(args: argparse.Namespace) -> None:
    from ppl_tok.canonicity import canonicity

    lm = _load_lm(args)
    result = canonicity(lm, args.samples, args.max_tokens, seed=args.seed)
    if args.png:
        from ppl_tok.plots import plot_canonicity

        plot_canonicity(result, args.png, label=lm.name)
    _emit(args, {"model": lm.name, "lengths": result.lengths, "canonical": result.canonical,
                 "undecodable": result.undecodable, "png": args.png},
          [f"{'tokens':>6} {'% canonical':>12}"] +
          [f"{n:>6} {100 * c:>11.1f}%" for n, c in zip(result.lengths, result.canonical)])


def cmd_most_likely(args: argparse.Namespace) -> None:
    from ppl_tok.mdd import compile_mdd
    from ppl_tok.infer.search import most_likely

    lm = _load_lm(args)
    mdd = compile_mdd(args.text, lm.vocab)
    _check_context(args, lm)
    r = most_likely(args.text, lm, context=args.context, time_budget=args.time_budget, top_k=args.top, mdd=mdd)
    lines = [f"most likely:  {_names(lm.vocab, r.tokens)}  ({r.log_prob:.4f})"]
    lines += [f"{k:>2}.          {_names(lm.vocab, v)}  ({lp:.4f})" for k, (v, lp) in enumerate(r.top_k[1:], 2)]
    lines += [f"canonical:    {_names(lm.vocab, r.canonical)}  ({r.canonical_log_prob:.4f})",
              f"optimal:      {'proven' if r.optimal else 'not proven within the time budget'}"
              f"  ({r.expanded} prefixes expanded, {r.seconds:.1f} s)"]
    _emit(args, {"text": args.text, "context": args.context, "tokens": _tokens(lm.vocab, r.tokens),
                 "log_prob": r.log_prob, "canonical": _tokens(lm.vocab, r.canonical),
                 "canonical_log_prob": r.canonical_log_prob, "optimal": r.optimal,
                 "top_k": [{"tokens": _tokens(lm.vocab, v), "log_prob": lp} for v, lp in r.top_k],
                 "expanded": r.expanded, "forwards": r.forwards, "seconds": r.seconds}, lines)


def cmd_sat(args: argparse.Namespace) -> None:
    from ppl_tok.infer.exact import TimeBudgetExceeded, exact_marginal
    from ppl_tok.sat import CNF, mlt_reduction, model_count, msp_reduction, read_assignment
    from ppl_tok.infer.search import most_likely

    start = time.perf_counter()
    cnf = CNF.read(args.file)
    limits().check("dimacs_variables", cnf.num_vars, f"{args.file}'s number of variables")

    def left() -> float | None:
        """What is left of --time-budget: it covers building the reduction too."""
        return None if args.time_budget is None else max(1e-3, args.time_budget - (time.perf_counter() - start))

    if args.problem == "mlt":
        red = mlt_reduction(cnf)
        r = most_likely(red.text, red.lm, time_budget=left())
        witness = r.log_prob > red.log_threshold
        satisfiable = True if witness else (False if r.optimal else None)  # None: undecided in the budget
        assignment = read_assignment(cnf, r.tokens) if witness else None
        payload = {"problem": "mlt", "string": red.text, "threshold": red.threshold,
                   "log_threshold": red.log_threshold, "satisfiable": satisfiable,
                   "most_likely": [red.lm.vocab.token_name(t) for t in r.tokens], "log_prob": r.log_prob,
                   "optimal": r.optimal,
                   "assignment": None if assignment is None else {str(j + 1): v for j, v in enumerate(assignment)}}
        lines = [f"string: {red.text}", f"most likely tokenization: {' '.join(payload['most_likely'])} "
                 f"(p = {math.exp(r.log_prob):.4g}, threshold {red.threshold:.4g})",
                 f"satisfiable: {'unknown (the time budget ran out)' if satisfiable is None else satisfiable}"]
        if assignment is not None:
            lines.append("assignment: " + " ".join(f"{j + 1}={int(v)}" for j, v in enumerate(assignment)))
    else:
        red = msp_reduction(cnf)
        budget = left()
        try:
            exact = exact_marginal(red.text, red.lm, max_paths=args.max_paths, time_budget=budget)
        except TimeBudgetExceeded as err:  # say the user's budget, which also paid for the reduction
            raise TimeBudgetExceeded(str(err).replace(f"within {budget:g} s", f"within {args.time_budget:g} s "
                                                      "(--time-budget, building the reduction included)")) from None
        count = model_count(exact.log_marginal, red)
        payload = {"problem": "msp", "string": red.text, "unit": red.threshold, "log_marginal": exact.log_marginal,
                   **count_fields(count, "model_count"), "satisfiable": count > 0}
        lines = [f"string: {red.text}", f"log p(string) = {exact.log_marginal:.6f}",
                 f"model count: {count}   (p / (0.45^n 0.9^n) = {math.exp(exact.log_marginal - red.log_threshold):.6f})"]
    _emit(args, payload, lines)


STATEMENT_NOTES = {"uncalibrated": " (the ± is a delta-method standard error, not a bound)",
                   "unbiased, sampled part": " (the enumerated part exact; the ± is the sampled part's)"}


def _guide(args: argparse.Namespace) -> Any:
    """``--proposal`` (and ``--proposal-file``) as a guide: :func:`ppl_tok.proposals.resolve_proposal`, checked
    before the LM loads."""
    from ppl_tok.proposals import DEFAULT_PROPOSAL, check_file, proposal, settings_guide

    found = proposal(DEFAULT_PROPOSAL if args.proposal is None else args.proposal)
    check_file(found, args.proposal_file, "--proposal {} and --proposal-file F")
    record = proposal_record(args)  # --proposal (its default where not given), its file and its parameters
    # by name where the sampler resolves it (the results then carry the name); else the guide of its record
    plain = found.from_record is None and found.from_params is None
    return args.proposal if plain else settings_guide(record)


def read_word_list(path: str) -> list[str]:
    """The training texts of ``learn-proposal``: the non-blank lines of a UTF-8 file, read by the one line reader
    (:func:`~ppl_tok.common.lines.split_lines`: ``\r\n`` is ``\n``, so a Windows file keeps no ``\r``), each kept
    as it is (a leading space included); a NUL is an error naming ``file:line``."""
    from ppl_tok.common.lines import split_lines

    texts = []
    for n, line in enumerate(split_lines(_read_text(path, "WORDS")), 1):
        if "\0" in line:
            raise ValueError(f"{path}:{n}: a NUL character at character {line.index(chr(0))}: not text; remove it")
        if line.strip():
            limits().check("lm_bytes", len(line.encode("utf-8")), f"{path}:{n}'s length in bytes")
            texts.append(line)
    if not texts:
        raise ValueError(f"{path} holds no text: give one training string a line")
    return texts


def _check_proposal_out(args: argparse.Namespace, texts: list[str]) -> None:
    """``--out`` is a file in an existing folder; an existing one is a proposal file trained under these settings
    (those the LM is not needed for; its name and vocabulary are compared once it is loaded)."""
    from ppl_tok.infer.learn import check_resume, training_settings
    from ppl_tok.proposals import LearnedProposal

    limits().check("samples", args.particles, "--particles (draws per training step)")
    out = Path(args.out)
    if not args.out or out.is_dir():
        raise ValueError(f"--out {args.out!r} is a folder, not a file: give the proposal file's path (e.g. "
                         "proposal.pt)")
    if not out.parent.is_dir():
        raise ValueError(f"--out {args.out}: the folder {out.parent} does not exist: create it, or give a path in "
                         "an existing folder")
    if out.exists():
        check_resume(LearnedProposal.load(out), training_settings(texts, None, args.particles, args.lr, args.seed),
                     out)


def cmd_learn_proposal(args: argparse.Namespace) -> None:
    from ppl_tok.infer.learn import train_proposal
    from ppl_tok.proposals import FEATURES

    texts = read_word_list(args.file)
    _check_proposal_out(args, texts)  # before the model loads
    lm = _load_lm(args)
    start = time.perf_counter()
    prop = train_proposal(texts, lm, args.steps, particles=args.particles, lr=args.lr, seed=args.seed,
                          path=args.out, progress=not args.json)
    weights = dict(zip(FEATURES, prop.weights.tolist()))
    _emit(args, {"file": args.out, "steps": prop.step, "texts": len(texts), "weights": weights,
                 "seconds": time.perf_counter() - start},
          [f"{prop!r}", f"saved to {args.out} ({len(texts)} training texts)"])


def register(sub: argparse._SubParsersAction) -> None:
    """Add the commands on one string to the ``ppl-tok`` subcommands."""
    p = add_command(sub, "tokenize", "canonical tokens and the number of tokenizations", "vocab")
    add_text_arguments(p, context=False)
    p.set_defaults(func=cmd_tokenize)
    p = add_command(sub, "count", "the exact number of tokenizations", "vocab")
    add_text_arguments(p, context=False)
    p.set_defaults(func=cmd_count)
    p = add_command(sub, "mdd", "export the MDD of all tokenizations (DOT text, PNG drawing)", "vocab")
    add_text_arguments(p, context=False)
    p.add_argument("--dot", type=output_file, metavar="FILE", help="write Graphviz DOT here (- for standard output)")
    p.add_argument("--png", type=output_file, metavar="FILE", help="draw a PNG here (small MDDs)")
    p.set_defaults(func=cmd_mdd)
    p = add_command(sub, "score", "log-probability of the canonical tokenization", "lm")
    add_text_arguments(p)
    p.set_defaults(func=cmd_score)
    p = add_command(sub, "marginal", "marginal probability of a string over all its tokenizations", "lm")
    add_text_arguments(p)
    p.add_argument("--samples", type=POSITIVE, default=64, help="importance samples (default 64)")
    add_proposal_arguments(p)
    p.add_argument("--seed", type=SEED, default=0, help="random seed (same seed, same estimate; default 0)")
    p.add_argument("--exact", action="store_true", help="also enumerate every tokenization (short strings)")
    p.add_argument("--max-paths", type=POSITIVE, default=100_000,
                   help="refuse --exact above this many tokenizations (default 100000)")
    p.add_argument("--bounds", type=positive, metavar="TOL", help="also a certified bracket, to TOL nats")
    add_renamed(p, "--exact-budget", "--budget", type=POSITIVE, default=10_000, metavar="FORWARDS",
                help="--bounds: the certified search's LM forwards at most (default 10000)")
    p.set_defaults(func=cmd_marginal)
    p = add_command(sub, "learn-proposal", "train a learned proposal on a word list (reweighted wake-sleep; "
                    "resumable: an existing --out file continues)", "lm")
    p.add_argument("file", metavar="WORDS", help="training texts, one a line (a leading space is kept)")
    p.add_argument("--out", required=True, metavar="FILE", help="the proposal file (saved after every step)")
    p.add_argument("--steps", type=POSITIVE, default=20, help="training steps in all (default 20)")
    p.add_argument("--particles", type=POSITIVE, default=16, help="draws per step (default 16)")
    p.add_argument("--lr", type=positive, default=0.1, help="Adam's learning rate (default 0.1)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    p.set_defaults(func=cmd_learn_proposal)
    p = add_command(sub, "distribution", "the distribution over tokenizations (the paper's Fig. 2): exact, or from "
            "importance samples", "lm")
    add_text_arguments(p)
    p.add_argument("--proposal", default="exact", metavar="PROPOSAL",
                   choices=LaterChoices(lambda: ("exact", *proposal_names(with_file=False))),
                   help="exact enumeration (default), or the self-normalised weights of this importance proposal")
    p.add_argument("--samples", type=POSITIVE, default=256, help="importance samples (default 256)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed of the importance samples (default 0)")
    p.add_argument("--png", type=output_file, metavar="FILE", help="plot the distribution here")
    p.add_argument("--top", type=POSITIVE, default=20, help="how many tokenizations to list and plot (default 20)")
    p.add_argument("--max-paths", type=POSITIVE, default=100_000,
                   help="refuse --proposal exact above this many tokenizations (default 100000)")
    p.set_defaults(func=cmd_distribution)
    p = add_command(sub, "canonicity", "fraction of canonical generations against length (the paper's Fig. 3)", "lm")
    p.add_argument("--samples", type=POSITIVE, default=32, help="generations sampled from the LM (default 32)")
    p.add_argument("--max-tokens", type=POSITIVE, default=32, help="tokens per generation (default 32)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    p.add_argument("--png", type=output_file, metavar="FILE", help="plot the curve here")
    p.set_defaults(func=cmd_canonicity)
    p = add_command(sub, "most-likely", "the most likely tokenization by branch and bound", "lm")
    add_text_arguments(p)
    p.add_argument("--time-budget", type=positive, metavar="SECONDS",
                   help="stop after this long (default: until optimality is proven)")
    add_renamed(p, "--top", "--top-k", type=POSITIVE, default=1, metavar="K",
                help="list the K most likely tokenizations (default 1)")
    p.set_defaults(func=cmd_most_likely)
    p = add_command(sub, "sat", "decide SAT (mlt) or count models (msp) through the paper's reductions", "none")
    p.add_argument("file", metavar="FILE", help="a DIMACS .cnf file (3-CNF)")
    p.add_argument("--problem", choices=["mlt", "msp"], default="mlt",
                   help="mlt: satisfiability via the most likely tokenization (Thm. 4.2); msp: the model count "
                        "via the marginal string probability (Thm. 5.2)")
    p.add_argument("--max-paths", type=POSITIVE, default=1 << 20, help="msp: refuse above this many tokenizations")
    p.add_argument("--time-budget", type=positive, metavar="SECONDS",
                   help="give up after this long (mlt: 'unknown' unless a satisfying tokenization was found)")
    p.set_defaults(func=cmd_sat)
