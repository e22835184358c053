"""README's command list is the parser's (issue 57: it listed eight bench names that had moved to
``python -m benchmarks``): every ``ppl-tok`` command is listed, every listed one exists, and the ``bench`` line names
exactly the machine checks."""

import argparse
import re

from conftest import ROOT


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub[0].choices) if sub else {}


def _command_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Command line", 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.startswith("ppl-tok ")]


def test_every_command_is_listed_and_every_listed_command_exists():
    from ppl_tok.cli.main import build_parser

    commands = _subcommands(build_parser())
    listed = [line.split()[1] for line in _command_block()]
    assert sorted(set(listed)) == sorted(commands), (
        f"README lacks {sorted(set(commands) - set(listed))}; lists what the parser lacks "
        f"{sorted(set(listed) - set(commands))}")


def test_the_bench_line_names_the_machine_checks_and_nothing_else():
    from ppl_tok.cli.main import build_parser

    checks = _subcommands(_subcommands(build_parser())["bench"])
    line = next(line for line in _command_block() if line.startswith("ppl-tok bench "))
    assert set(re.match(r"ppl-tok bench (\S+)", line).group(1).split("|")) == set(checks), line
