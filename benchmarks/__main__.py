"""``python -m benchmarks NAME``, from a checkout's root: the research benchmarks beside the package
(docs/benchmarks.md). ``ppl-tok bench`` keeps the checks of a user's own machine."""

from __future__ import annotations

import argparse
import sys

from benchmarks import cli
from ppl_tok.cli.common import Parser
from ppl_tok.cli.main import main


def build_parser() -> argparse.ArgumentParser:
    """``python -m benchmarks`` and one subcommand per benchmark."""
    parser = Parser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.set_defaults(command="bench")
    cli.register(parser.add_subparsers(dest="what", required=True, metavar="NAME", help="the benchmark"))
    return parser


def run(argv: list[str]) -> int:
    """``python -m benchmarks ARGV`` in this process: its exit status."""
    return main(argv, build_parser())


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
