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
import os
import sys
from collections.abc import Sequence

from ppl_tok.cli.arguments import POSITIVE, SEED, integer, output_file, positive
from ppl_tok.cli.bench import cmd_bench
from ppl_tok.cli.common import STDIN, _check_utf8, _resolve_text
from ppl_tok.common.jsonout import unlimited_int_digits
from ppl_tok.cli.tokenization import (cmd_canonicity, cmd_count, cmd_distribution, cmd_marginal, cmd_mdd,
                                      cmd_most_likely, cmd_sat, cmd_score, cmd_tokenize)
from ppl_tok.lm.spec import DEFAULT_MODEL, DTYPES
from ppl_tok.limits import limits
from ppl_tok.strings.beam import StringSearchConfig



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


#: what the ``±`` of each kind of estimate means (docs/pyro.md)


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
    p.add_argument("--beam", type=POSITIVE,
                   help=f"perplexity: the marginal's beam (default: StringSearchConfig's, {StringSearchConfig.beam})")
    p.add_argument("--prune", type=positive, help="perplexity: the marginal's prune, nats "
                   f"(default: StringSearchConfig's, {StringSearchConfig.prune:g})")
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
    from ppl_tok.cli.perplexity import register as register_perplexity
    from ppl_tok.cli.qa import register as register_qa
    from ppl_tok.cli.strings import register as register_strings

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
