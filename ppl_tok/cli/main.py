"""Count, enumerate and score the tokenizations of a string under a language model.

``ppl-tok COMMAND --help`` describes each command. Commands that run an LM
({lm_commands}) take
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
import math
import os
import sys
import textwrap
from collections.abc import Sequence

from ppl_tok.cli import adversarial, bench, models, perplexity, qa, reading, strings, surprisal, tokenization
from ppl_tok.cli.common import STDIN, Parser, _check_utf8, _resolve_text, set_threads
from ppl_tok.common.jsonout import unlimited_int_digits
from ppl_tok.limits import limits



def _prepare(args: argparse.Namespace) -> None:
    """Every check that needs no model: run before any work."""
    if hasattr(args, "text_file") and getattr(args, "input", None) is None:  # --input FILE holds the texts
        _resolve_text(args)
    if getattr(args, "context", None):
        _check_utf8("--context", args.context)
    lim = limits()
    scored = [getattr(args, k, None) for k in ("context", "prompt", "text")]  # what an LM reads
    if hasattr(args, "context") and (scored[1] is not None or scored[2] is not None):
        lim.check("lm_bytes", sum(len(s.encode("utf-8", "surrogatepass")) for s in scored if s),
                  "--context plus the prompt and the text in bytes")
    if isinstance(getattr(args, "beam", None), int):
        lim.check("beam", args.beam, "--beam")
    if isinstance(getattr(args, "prune", None), float) and args.prune > lim.prune_nats:
        lim.check("prune_nats", math.ceil(args.prune), "--prune (nats)")
    if args.command != "bench":
        if isinstance(getattr(args, "samples", None), int):
            lim.check("samples", args.samples, "--samples")
        if isinstance(getattr(args, "max_paths", None), int):
            lim.check("paths", args.max_paths, "--max-paths")
        for name in ("exact_budget", "search_budget"):
            if isinstance(getattr(args, name, None), int):
                lim.check("search_forwards", getattr(args, name), "--" + name.replace("_", "-"))
        if isinstance(getattr(args, "max_tokens", None), int):
            lim.check("generated_tokens", args.samples * args.max_tokens, "--samples times --max-tokens")
    if args.command == "mdd":
        if not (args.dot or args.png):
            raise ValueError("give --dot FILE (or --dot - for standard output) and/or --png FILE")
        if args.dot == STDIN and args.json:
            raise ValueError("--dot - and --json would both write to standard output")


#: what the ``±`` of each kind of estimate means (docs/pyro.md)


def build_parser() -> argparse.ArgumentParser:
    """``ppl-tok`` and its subcommands: each command module registers its own (``register(sub)``)."""
    parser = Parser(prog="ppl-tok", description=__doc__.split("\n\n")[0],
                    epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (tokenization, adversarial, bench, qa, perplexity, strings, surprisal, models, reading):
        module.register(sub)
    first, rest = parser.epilog.split("\n\n", 1)  # the paragraph that names the commands, filled again
    first = " ".join(first.split()).replace("{lm_commands}", ", ".join(lm_commands(sub)))
    parser.epilog = textwrap.fill(first, 79) + "\n\n" + rest
    return parser


def lm_commands(sub: argparse._SubParsersAction, prefix: str = "") -> list[str]:
    """The (sub)commands that run an LM: those with the LM argument group's ``--bos-id``, nested ones by full name."""
    out = []
    for name, p in sub.choices.items():
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            out += lm_commands(nested[0], f"{prefix}{name} ")
        elif "--bos-id" in p._option_string_actions:
            out.append(prefix + name)
    return out


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


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Run ``ppl-tok`` (or ``parser``'s program: the benchmarks beside the package run through here too) on
    ``argv``: every check before any work, one line on stderr and status 2 for a bad input."""
    from ppl_tok.common.heap import tune_heap

    tune_heap()  # before any tensor: a peak that follows the live tensors, the same from run to run (docs/limits.md)
    parser = parser or build_parser()
    with unlimited_int_digits():
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help, or a usage error already printed
            return done.code if isinstance(done.code, int) else 2
        prog = f"{parser.prog} {getattr(args, 'what', None) or args.command}"
        try:
            _prepare(args)
            set_threads(args)
            status = args.func(args)  # None, or a command's own exit status (bench gpu-check: 1, a target missed)
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
    return status if isinstance(status, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
