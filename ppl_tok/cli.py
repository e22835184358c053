"""Count, enumerate and score the tokenizations of a string under a language model.

``ppl-tok COMMAND --help`` describes each command. Commands that run an LM
(score, marginal, distribution, canonicity, most-likely, bench) take
``--model NAME`` (a card, a local folder or a hub id; default
``smollm2-135m``), ``--device`` (``cpu``, ``cuda``, ``cuda:1``), ``--dtype``
(``float32``, ``bfloat16``, ``float16``) and ``--bos-id``; those that need only
a vocabulary (tokenize, count, mdd) take ``--model`` or ``--tokenizer PATH``.

Text: commands that take TEXT read it from the argument, from standard input
when TEXT is ``-``, or from ``--file PATH`` (UTF-8, taken literally: a final
newline is part of the text).

Output: ``--json`` prints one JSON object (RFC 8259). Numbers that are not
finite are written as the strings ``"-Infinity"``, ``"Infinity"`` and ``"NaN"``
(``float()`` in Python and ``Number()`` in JavaScript read them back); counts
of tokenizations (and ``sat``'s model count) are exact decimal strings of any
size, with ``log10_count`` (a float) beside them: JSON readers lose integers
past 2^53, and Python's refuses more than 4300 digits. A closed standard
output (``| head``) ends the command normally.

Limits: the sizes of samples, texts and contexts are bounded so that memory
stays bounded (:mod:`ppl_tok.limits`, docs/limits.md); a request beyond a
limit is refused before any work, naming the ``PPL_TOK_MAX_*`` variable that
raises it.

Errors: every argument is checked before any work; a bad input exits with
status 2 and one line on stderr; Ctrl-C exits with status 130 and one line,
keeping what was already printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ppl_tok.arguments import POSITIVE, SEED, integer, output_file, positive
from ppl_tok.cards import DEFAULT_MODEL, DTYPES, load_lm, load_vocabulary
from ppl_tok.limits import limits
from ppl_tok.mdd import compile_mdd

STDIN = "-"


# ------------------------------------------------------------------ output
def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings, tuples as lists and tensors as numbers."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # torch tensors, numpy arrays and scalars
        return _json_safe(value.tolist())
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def to_json(payload: Any) -> str:
    """``payload`` as standard JSON (RFC 8259): the one JSON writer of every ``ppl-tok`` command."""
    with unlimited_int_digits():
        return json.dumps(_json_safe(payload), ensure_ascii=False, allow_nan=False)


@contextlib.contextmanager
def unlimited_int_digits() -> Iterator[None]:
    """Let ``str(int)`` print integers of any size (counts of long texts have more than 4300 digits)."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(old)


def count_fields(count: int, name: str = "count") -> dict[str, Any]:
    """A count as JSON every reader takes: ``{name: "<decimal digits>", "log10_" + name: float}``."""
    return {name: str(count), f"log10_{name}": math.log10(count) if count > 0 else -math.inf}


def _emit(args: argparse.Namespace, payload: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print(to_json(payload))
    else:
        print("\n".join(lines))


# ------------------------------------------------------------------- input
def _check_utf8(what: str, value: str) -> str:
    """``value`` if it is valid Unicode text; else a clear error naming the argument."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        ch = value[err.start]
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # how Python passes a command-line byte that is not UTF-8
            found = f"the byte 0x{ord(ch) - 0xDC00:02X}, which is not valid UTF-8,"
        else:
            found = f"a lone surrogate U+{ord(ch):04X}"
        raise ValueError(f"{what} has {found} at character {err.start}: give UTF-8 text "
                         "(or put it in a UTF-8 file and use --file PATH)") from None
    return value


def _read_text(path: str) -> str:
    """The UTF-8 text of a file or of standard input, read no further than the ``text_bytes`` limit allows."""
    most = limits().text_bytes
    if path == STDIN:
        data, where = sys.stdin.buffer.read(most + 1), "standard input"
    else:
        try:
            with open(path, "rb") as f:
                data, where = f.read(most + 1), path
        except OSError as err:
            raise ValueError(f"--file: cannot read {path}: {err.strerror or err}") from err
    limits().check("text_bytes", len(data), f"{where}'s length in bytes (at least)" if len(data) > most else "")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{where} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def _resolve_text(args: argparse.Namespace) -> None:
    """Fill ``args.text`` from TEXT, ``-`` (stdin) or ``--file PATH``, checked."""
    if args.text_file is not None and args.text is not None:
        raise ValueError("give TEXT or --file PATH, not both")
    if args.text_file is not None:
        args.text = _read_text(args.text_file)
    elif args.text == STDIN:
        args.text = _read_text(STDIN)
    elif args.text is None:
        raise ValueError("give the TEXT, - to read it from standard input, or --file PATH")
    else:
        _check_utf8("TEXT", args.text)
    if not args.text:
        raise ValueError("the text is empty: the empty string has no tokenization")
    limits().check("text_bytes", len(args.text.encode("utf-8")), "the text's length in bytes")


def _prepare(args: argparse.Namespace) -> None:
    """Every check that needs no model: run before any work."""
    if hasattr(args, "text_file"):
        _resolve_text(args)
    if getattr(args, "context", None):
        _check_utf8("--context", args.context)
    lim = limits()
    scored = [getattr(args, k, None) for k in ("context", "prompt", "text")]  # what an LM reads
    if hasattr(args, "context") and (scored[1] is not None or scored[2] is not None):
        lim.check("lm_bytes", sum(len(s.encode("utf-8", "surrogatepass")) for s in scored if s),
                  "--context plus the prompt and the text in bytes")
    if args.command != "bench":
        if isinstance(getattr(args, "samples", None), int):
            lim.check("samples", args.samples, "--samples")
        if isinstance(getattr(args, "max_paths", None), int):
            lim.check("paths", args.max_paths, "--max-paths")
        if isinstance(getattr(args, "budget", None), int):
            lim.check("search_forwards", args.budget, "--budget")
        if isinstance(getattr(args, "max_tokens", None), int):
            lim.check("generated_tokens", args.samples * args.max_tokens, "--samples times --max-tokens")
    if args.command == "mdd":
        if not (args.dot or args.png):
            raise ValueError("give --dot FILE (or --dot - for standard output) and/or --png FILE")
        if args.dot == STDIN and args.json:
            raise ValueError("--dot - and --json would both write to standard output")
    if args.command == "bench":
        if args.what == "mdd" and args.model is not None:
            raise ValueError("bench mdd compiles with the vocabularies of --models, not --model")
        if args.what != "mdd" and args.models is not None:
            raise ValueError(f"bench {args.what} runs one --model, not --models")
        if args.what not in ("marginal", "diagnostics") and args.quick:
            raise ValueError("--quick applies to bench marginal and bench diagnostics only")


def _load_lm(args: argparse.Namespace) -> Any:
    return load_lm(args.model, device=args.device, dtype=args.dtype, bos_id=args.bos_id)


def _check_context(args: argparse.Namespace, lm: Any) -> None:
    """``--context`` must have a tokenization; warn when context and text exceed the model's window."""
    text_tokens = len(lm.canonical(args.text)) if getattr(args, "text", None) else 0
    ids: tuple[int, ...] = ()
    if args.context:
        try:
            compile_mdd(args.context, lm.vocab)
            ids = tuple(lm.vocab.encode(args.context))
        except ValueError as err:
            raise ValueError(f"--context: {err}") from None
    window = getattr(getattr(getattr(lm, "model", None), "config", None), "max_position_embeddings", None)
    total = (lm.bos_id is not None) + len(ids) + text_tokens
    if isinstance(window, int) and total > window:
        print(f"ppl-tok {args.command}: warning: BOS, context and text are {total} tokens, more than "
              f"{lm.name}'s window of {window}: positions past it are scored out of distribution",
              file=sys.stderr)


def _vocab(args: argparse.Namespace):
    return load_vocabulary(args.tokenizer or args.model)


def _tokens(vocab, ids: Sequence[int]) -> list[dict[str, Any]]:
    return [{"id": int(t), "token": vocab.token_name(t)} for t in ids]


def _names(vocab, ids: Sequence[int]) -> str:
    return " ".join(vocab.token_name(t) for t in ids)


def cmd_tokenize(args: argparse.Namespace) -> None:
    vocab = _vocab(args)
    mdd = compile_mdd(args.text, vocab)
    canon = mdd.canonical()
    _emit(args, {"text": args.text, "canonical": _tokens(vocab, canon), **count_fields(mdd.count())},
          [f"canonical: {' '.join(f'{vocab.token_name(t)}({t})' for t in canon)}",
           f"tokenizations: {mdd.count()}"])


def cmd_count(args: argparse.Namespace) -> None:
    mdd = compile_mdd(args.text, _vocab(args))
    _emit(args, {"text": args.text, **count_fields(mdd.count())}, [str(mdd.count())])


def cmd_mdd(args: argparse.Namespace) -> None:
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
    from ppl_tok.exact import exact_marginal
    from ppl_tok.importance import marginal
    from ppl_tok.search import marginal_bounds

    lm = _load_lm(args)
    mdd = compile_mdd(args.text, lm.vocab)
    _check_context(args, lm)
    if args.exact and mdd.count() > args.max_paths:  # before sampling
        raise ValueError(f"{args.text!r} has {mdd.count()} tokenizations, more than --max-paths "
                         f"{args.max_paths}: drop --exact or raise --max-paths")
    result = marginal(args.text, lm, args.samples, guide=args.proposal, context=args.context, seed=args.seed, mdd=mdd)
    bounds = None
    if args.bounds is not None:
        bounds = marginal_bounds(args.text, lm, context=args.context, tolerance=args.bounds, budget=args.budget,
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
        f"statement:                 {result.statement}" + STATEMENT_NOTES.get(result.statement, ""),
        f"certified lower bound:     {result.certified_lower:.4f}   (every tokenization this run knows exactly)"
        + (f"; the estimate is {result.certified_lower - result.log_marginal:.4f} below it"
           if result.log_marginal < result.certified_lower else ""),
    ]
    if result.proposal == "prior":
        lines.append(f"  acceptance rate:         {result.acceptance_rate:.3f}")
    if args.exact:
        exact = exact_marginal(args.text, lm, context=args.context, max_paths=args.max_paths, mdd=mdd)
        payload.update(exact_log_marginal=exact.log_marginal, most_likely=_tokens(lm.vocab, exact.most_likely),
                       most_likely_log_prob=float(exact.log_probs[0]), canonical_share=exact.canonical_share)
        lines += [f"log p(text), exact:        {exact.log_marginal:.4f}   (canonical share {exact.canonical_share:.4f})",
                  f"most likely:               {_names(lm.vocab, exact.most_likely)} ({float(exact.log_probs[0]):.4f})"]
    if bounds is not None:
        b = bounds
        payload.update(lower=b.lower, upper=b.upper, bounds_closed=b.closed, bounds_forwards=b.forwards,
                       certified_lower=result.certified_lower)
        lines.append(f"certified bracket:         [{b.lower:.4f}, {b.upper:.4f}]   "
                     f"({'closed' if b.closed else 'open'} at {args.bounds:g} nats, {b.forwards} forwards)")
    lines += [f"WARNING: {w}" for w in result.warnings]
    _emit(args, payload, lines)


#: what the ``±`` of each kind of estimate means (docs/pyro.md)
STATEMENT_NOTES = {"uncalibrated": " (the ± is a delta-method standard error, not a bound)",
                   "unbiased, sampled part": " (the enumerated part exact; the ± is the sampled part's)"}


def cmd_distribution(args: argparse.Namespace) -> None:
    from ppl_tok.exact import exact_marginal
    from ppl_tok.importance import marginal
    from ppl_tok.posterior import TokenizationPosterior

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
    from ppl_tok.search import most_likely

    lm = _load_lm(args)
    mdd = compile_mdd(args.text, lm.vocab)
    _check_context(args, lm)
    r = most_likely(args.text, lm, context=args.context, time_budget=args.time_budget, top_k=args.top_k, mdd=mdd)
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
    from ppl_tok.exact import TimeBudgetExceeded, exact_marginal
    from ppl_tok.sat import CNF, mlt_reduction, model_count, msp_reduction, read_assignment
    from ppl_tok.search import most_likely

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


def cmd_bench(args: argparse.Namespace) -> None:
    from ppl_tok import bench

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
        from ppl_tok import diagnostics_bench as diag

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
        from ppl_tok.perplexity import bench as perplexity_bench

        knobs = {k: v for k, v in (("beam", args.beam), ("prune", args.prune)) if v is not None}
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
        from ppl_tok.strings import bench as strings_bench

        if args.genlm_python:
            result = strings_bench.bench_genlm(args.genlm_python, args.model or DEFAULT_MODEL, data=args.data,
                                               n_bytes=args.genlm_bytes, keep=args.genlm_keep, **lm_options)
            _emit(args, result, strings_bench.format_genlm(result))
            return
        result = strings_bench.bench_strings(args.model or DEFAULT_MODEL, data=args.data, long_bytes=args.long_bytes,
                                             prompts=args.prompts, prompt_records=args.prompt_records,
                                             prompts_only=args.prompts_only, **lm_options)
        _emit(args, result, strings_bench.format_strings(result))


# -------------------------------------------------------------- arguments


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ppl-tok", description=__doc__.split("\n\n")[0],
                     epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help: str, kind: str) -> argparse.ArgumentParser:
        """``kind``: 'vocab' (a vocabulary is enough), 'lm' (runs an LM) or 'none' (no model)."""
        p = sub.add_parser(name, help=help, description=help)
        if kind in ("vocab", "lm"):
            p.add_argument("--model", default=None if name == "bench" else DEFAULT_MODEL,
                           help=f"model card, local folder or hub id (default {DEFAULT_MODEL})")
        if kind == "vocab":
            p.add_argument("--tokenizer", help="a SentencePiece .model file or tokenizer folder (overrides --model)")
        if kind == "lm":
            p.add_argument("--device", help="where the LM runs: cpu, cuda, cuda:1, mps (default: cpu)")
            p.add_argument("--dtype", choices=DTYPES, help="the LM's weights (default: the card's, else float32)")
            p.add_argument("--bos-id", type=integer(0), metavar="ID",
                           help="the BOS id used for scoring (default: the card's, else the tokenizer's)")
        p.add_argument("--json", action="store_true",
                       help="print one JSON object (RFC 8259; non-finite numbers as \"-Infinity\", \"Infinity\", "
                            "\"NaN\")")
        return p

    def text_args(p: argparse.ArgumentParser, context: bool = True) -> None:
        p.add_argument("text", nargs="?", metavar="TEXT",
                       help="the string, taken literally (- reads it from standard input)")
        p.add_argument("--file", dest="text_file", metavar="PATH", help="read the text from this UTF-8 file (- for standard input)")
        if context:
            p.add_argument("--context", default="", help="text the string continues (default: none, only BOS)")

    p = add("tokenize", "canonical tokens and the number of tokenizations", "vocab")
    text_args(p, context=False)
    p.set_defaults(func=cmd_tokenize)
    p = add("count", "the exact number of tokenizations", "vocab")
    text_args(p, context=False)
    p.set_defaults(func=cmd_count)
    p = add("mdd", "export the MDD of all tokenizations (DOT text, PNG drawing)", "vocab")
    text_args(p, context=False)
    p.add_argument("--dot", type=output_file, metavar="FILE", help="write Graphviz DOT here (- for standard output)")
    p.add_argument("--png", type=output_file, metavar="FILE", help="draw a PNG here (small MDDs)")
    p.set_defaults(func=cmd_mdd)
    p = add("score", "log-probability of the canonical tokenization", "lm")
    text_args(p)
    p.set_defaults(func=cmd_score)
    p = add("marginal", "marginal probability of a string over all its tokenizations", "lm")
    text_args(p)
    p.add_argument("--samples", type=POSITIVE, default=64, help="importance samples (default 64)")
    p.add_argument("--proposal", default="lookahead", choices=["lookahead", "uniform", "prior", "stratified"],
                   help="the importance proposal: the LM's look-ahead restricted to the MDD (default), uniform "
                        "over tokenizations, the LM's prior (rejection), or look-ahead stratified by a search")
    p.add_argument("--seed", type=SEED, default=0, help="random seed (same seed, same estimate; default 0)")
    p.add_argument("--exact", action="store_true", help="also enumerate every tokenization (short strings)")
    p.add_argument("--max-paths", type=POSITIVE, default=100_000,
                   help="refuse --exact above this many tokenizations (default 100000)")
    p.add_argument("--bounds", type=positive, metavar="TOL", help="also a certified bracket, to TOL nats")
    p.add_argument("--budget", type=POSITIVE, default=10_000, help="LM forwards for --bounds (default 10000)")
    p.set_defaults(func=cmd_marginal)
    p = add("distribution", "the distribution over tokenizations (the paper's Fig. 2): exact, or from "
            "importance samples", "lm")
    text_args(p)
    p.add_argument("--proposal", default="exact", choices=["exact", "lookahead", "uniform", "prior", "stratified"],
                   help="exact enumeration (default), or the self-normalised weights of this importance proposal")
    p.add_argument("--samples", type=POSITIVE, default=256, help="importance samples (default 256)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed of the importance samples (default 0)")
    p.add_argument("--png", type=output_file, metavar="FILE", help="plot the distribution here")
    p.add_argument("--top", type=POSITIVE, default=20, help="how many tokenizations to list and plot (default 20)")
    p.add_argument("--max-paths", type=POSITIVE, default=100_000,
                   help="refuse --proposal exact above this many tokenizations (default 100000)")
    p.set_defaults(func=cmd_distribution)
    p = add("canonicity", "fraction of canonical generations against length (the paper's Fig. 3)", "lm")
    p.add_argument("--samples", type=POSITIVE, default=32, help="generations sampled from the LM (default 32)")
    p.add_argument("--max-tokens", type=POSITIVE, default=32, help="tokens per generation (default 32)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    p.add_argument("--png", type=output_file, metavar="FILE", help="plot the curve here")
    p.set_defaults(func=cmd_canonicity)
    p = add("most-likely", "the most likely tokenization by branch and bound", "lm")
    text_args(p)
    p.add_argument("--time-budget", type=positive, metavar="SECONDS",
                   help="stop after this long (default: until optimality is proven)")
    p.add_argument("--top-k", type=POSITIVE, default=1, help="also list the k most likely tokenizations (default 1)")
    p.set_defaults(func=cmd_most_likely)
    p = add("sat", "decide SAT (mlt) or count models (msp) through the paper's reductions", "none")
    p.add_argument("file", metavar="FILE", help="a DIMACS .cnf file (3-CNF)")
    p.add_argument("--problem", choices=["mlt", "msp"], default="mlt",
                   help="mlt: satisfiability via the most likely tokenization (Thm. 4.2); msp: the model count "
                        "via the marginal string probability (Thm. 5.2)")
    p.add_argument("--max-paths", type=POSITIVE, default=1 << 20, help="msp: refuse above this many tokenizations")
    p.add_argument("--time-budget", type=positive, metavar="SECONDS",
                   help="give up after this long (mlt: 'unknown' unless a satisfying tokenization was found)")
    p.set_defaults(func=cmd_sat)
    p = add("bench", "speed benchmarks (ratios against baselines run in the same process)", "lm")
    p.add_argument("what", choices=["mdd", "marginal", "most-likely", "engine", "memory", "estimators",
                                     "diagnostics", "strings", "perplexity"], help="what to benchmark")
    p.add_argument("--data", default="../shared/data",
                   help="mdd: a data folder or a text file; engine: a data folder (its openbookqa/dev.jsonl) or a "
                        "JSONL file (default ../shared/data)")
    p.add_argument("--questions", type=POSITIVE, default=20, help="engine: OpenBookQA questions (default 20)")
    p.add_argument("--samples", type=POSITIVE, default=64, help="engine: particles per answer; estimators, diagnostics: particles (default 64)")
    p.add_argument("--batch-questions", type=POSITIVE, default=8, help="engine: questions per engine run (default 8)")
    p.add_argument("--big-n", type=POSITIVE, default=256, help="engine: particles on one sentence (default 256)")
    p.add_argument("--models", nargs="+", help="mdd: the vocabularies (default smollm2-135m gemma3-270m)")
    p.add_argument("--max-bytes", type=integer(0), default=2_000_000, help="mdd: texts compiled by the trie compiler")
    p.add_argument("--naive-bytes", type=POSITIVE, default=1_000, help="mdd: texts compiled by the naive compiler")
    p.add_argument("--sizes", type=POSITIVE, nargs="+", default=[16, 64, 256], help="marginal: numbers of samples")
    p.add_argument("--baseline-samples", type=POSITIVE, default=64, help="marginal: N of the sequential baseline")
    p.add_argument("--quick", action="store_true", help="marginal, diagnostics: one small run of each part (a smoke test)")
    p.add_argument("--strings", type=POSITIVE, default=30, help="diagnostics: strings with exact truth (default 30)")
    p.add_argument("--seeds", type=POSITIVE, default=5, help="diagnostics: seeds per string and method (default 5)")
    p.add_argument("--records", default="diagnostics-runs.jsonl",
                   help="diagnostics: the per-run JSON lines, appended and resumed (default diagnostics-runs.jsonl)")
    p.add_argument("--rescore", action="store_true",
                   help="diagnostics: score the stored --records with the current warning rule, without the LM")
    p.add_argument("--time-budget", type=positive, default=60.0, help="most-likely: seconds per prefix")
    p.add_argument("--png", type=output_file, help="most-likely: plot the curve here")
    p.add_argument("--documents", type=POSITIVE, default=50, help="perplexity: documents (default 50)")
    p.add_argument("--lengths", type=POSITIVE, nargs=2, default=[300, 2000], metavar=("MIN", "MAX"),
                   help="perplexity: document lengths in bytes, spread evenly (default 300 2000)")
    p.add_argument("--beam", type=POSITIVE, help="perplexity: the marginal's beam (default: ppl-tok perplexity's, 8)")
    p.add_argument("--prune", type=positive, help="perplexity: the marginal's prune, nats (default: ppl-tok perplexity's, 12)")
    p.add_argument("--memory-bytes", type=POSITIVE, metavar="BYTES",
                   help="perplexity: instead, the peak RSS of the marginal of one document of BYTES bytes "
                        "(progress lines on stderr)")
    p.add_argument("--out", metavar="DIR",
                   help="perplexity: keep each document's row in this folder as it is measured; a rerun resumes")
    p.add_argument("--progress", action="store_true",
                   help="perplexity: show the progress bar even when stderr is not a terminal")
    p.add_argument("--lockstep", action="store_true",
                   help="perplexity: instead, the marginals of --documents documents one at a time against swept "
                        "in lockstep (one batched forward per step)")
    p.add_argument("--prefix-bytes", type=POSITIVE, nargs="+", metavar="BYTES",
                   help="perplexity: instead, the beam's floor on the documents' first BYTES bytes against best-first "
                        "search's bracket, where that closes to --prefix-tolerance")
    p.add_argument("--prefix-budget", type=POSITIVE, default=5000,
                   help="perplexity --prefix-bytes: forwards per prefix for the bracket (default 5000)")
    p.add_argument("--prefix-tolerance", type=positive, default=1e-3,
                   help="perplexity --prefix-bytes: the bracket's width, nats, at which it counts as closed (default 1e-3)")
    p.add_argument("--long-bytes", type=integer(0), default=2000,
                   help="strings: bytes of the long running text (0: none; default 2000)")
    p.add_argument("--genlm-python", metavar="PYTHON",
                   help="strings: only the comparison with genlm-bytes, run by this interpreter (its own environment)")
    p.add_argument("--genlm-bytes", type=POSITIVE, default=1000,
                   help="strings --genlm-python: bytes of OpenBookQA test questions walked (default 1000)")
    p.add_argument("--genlm-keep", metavar="DIR",
                   help="strings --genlm-python: write each walk's JSON into this folder as it finishes")
    p.add_argument("--prompts", type=integer(0), default=50,
                   help="strings: mid-word prompts of the prompt-boundary part (0: none; default 50)")
    p.add_argument("--prompt-records", type=output_file, metavar="FILE",
                   help="strings: append each prompt's numbers to this JSON Lines file, and resume from it")
    p.add_argument("--prompts-only", action="store_true", help="strings: the prompt-boundary part alone")
    p.set_defaults(func=cmd_bench)
    from ppl_tok.perplexity.cli import register as register_perplexity
    from ppl_tok.qa.cli import register as register_qa
    from ppl_tok.strings.cli import register as register_strings

    register_qa(sub)
    register_perplexity(sub)
    register_strings(add, text_args)
    return parser


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split("\n")) or type(err).__name__


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's final flush into a closed pipe says nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (e.g. captured by a test)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    with unlimited_int_digits():
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help, or a usage error already printed
            return done.code if isinstance(done.code, int) else 2
        prog = f"ppl-tok {args.command}"
        try:
            _prepare(args)
            args.func(args)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
        except BrokenPipeError:  # `ppl-tok ... | head`: the reader has all it wants, a normal end
            _silence_stdout()
            return 0
        except KeyboardInterrupt:
            sys.stdout.flush()
            print(f"{prog}: interrupted", file=sys.stderr)
            return 130
        except (ValueError, LookupError, OSError, MemoryError) as err:
            sys.stdout.flush()
            print(f"{prog}: error: {_one_line(err) if str(err) else 'out of memory'}",
                  file=sys.stderr)
            return 2
        except Exception as err:  # a bug: one line, the traceback with PPL_TOK_DEBUG=1
            if os.environ.get("PPL_TOK_DEBUG"):
                raise
            sys.stdout.flush()
            print(f"{prog}: internal error: {type(err).__name__}: {_one_line(err)} "
                  "(PPL_TOK_DEBUG=1 shows the traceback; please report it)", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
