"""The flags of a benchmark's subcommand that its run would ignore: refused before any work, one line naming the
flag, what ignores it and the fix. :func:`checked` wraps a subcommand's function with its check; the machine
checks' are here, the research benchmarks' in benchmarks/cli_flags.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ppl_tok.cli.common import refuse_ignored

def memory(args: argparse.Namespace) -> None:
    if args.command is not None:
        refuse_ignored(args, ("--device",), "--command measures that ppl-tok command line as given",
                       "put --device inside --command")


def gpu_check(args: argparse.Namespace) -> None:
    if args.parts is not None and "tests" not in args.parts:
        refuse_ignored(args, ("--tests",), "--parts has no tests part", "add tests to --parts or leave FLAG out")


def checked(check: Callable[[argparse.Namespace], None],
            func: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], Any]:
    """``func`` (a benchmark's command) after ``check``, which refuses the flags it would ignore."""
    def run(args: argparse.Namespace) -> Any:
        check(args)
        return func(args)
    return run
