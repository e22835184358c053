"""Argument types of the command line: integers in a range, positive numbers and output paths, with errors argparse prints."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low`` (and ``<= high``); anything else is a usage error naming it."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _float(text: str, what: str = "a number") -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def positive(text: str) -> float:
    """An argparse type: a finite number ``> 0``."""
    value = _float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


positive.__name__ = "number"


def positive_or_inf(text: str) -> float:
    """An argparse type: a number ``> 0``, ``inf`` included (a threshold that can be off: the beam's ``prune``)."""
    value = _float(text)
    if not value > 0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a number > 0 (inf: none), got {text!r}")
    return value


positive_or_inf.__name__ = "number"


def top_mass(text: str) -> float:
    """An argparse type: a share of probability mass in ``(0, 1]`` (top-p)."""
    value = positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a share of the mass in (0, 1], got {text!r}")
    return value


top_mass.__name__ = "share"


def log_prob_floor(text: str) -> float:
    """An argparse type: a log-probability floor in nats, a finite number or ``-inf`` (not NaN, not ``+inf``)."""
    value = _float(text, "a number of nats")
    if math.isnan(value) or value == math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number of nats or -inf, got {text!r}")
    return value


log_prob_floor.__name__ = "nats"


def share(text: str) -> float:
    """An argparse type: a share in ``[0, 1)`` (a fraction of a mass)."""
    value = _float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1), got {text!r}")
    return value


share.__name__ = "share"

#: A count (>= 1) and a seed (a 32-bit unsigned integer).
POSITIVE, SEED = integer(1), integer(0, 2**32 - 1)


def output_file(text: str) -> str:
    """An argparse type: a file to write, in a folder that exists (``-`` passes: a file of that name, or stdout).

    Checked when the arguments are parsed, so a typo in an output path never costs the run before it.
    """
    if not text:
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: {parent} is a file, not a folder; give a path in a folder")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: the folder {parent} is not writable")
    return text


output_file.__name__ = "file"


def output_folder(text: str) -> Path:
    """An argparse type: a folder to create or add to (not ``''``, not an existing file)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a folder, got '' (use . for the current folder)")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {text}: {existing} is a file")
    return path


output_folder.__name__ = "folder"


def run_folder(text: str) -> Path:
    """An argparse type: a run folder's path, not ``''`` (which ``Path`` reads as the current folder, so a run
    would write its files there); whether it names a file is the command's check (its message names the run)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a run folder, got '' (use . for the current folder)")
    return Path(text)


run_folder.__name__ = "folder"


class DeprecatedAlias(argparse.Action):
    """Store the value, as ``store`` does, and say on stderr when it was given under an old name.

    ``p.add_argument("--search-budget", "--budget", action=DeprecatedAlias, old=("--budget",), ...)``: the first
    option string is the name; the ``old`` ones still work, with one line naming the new one."""

    def __init__(self, option_strings: list[str], dest: str, *, old: tuple[str, ...] = (), **kwargs) -> None:
        unknown = set(old) - set(option_strings)
        if unknown:
            raise ValueError(f"DeprecatedAlias: {sorted(unknown)} are not option strings of {option_strings}")
        super().__init__(option_strings, dest, **kwargs)
        self.old = tuple(old)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values, option_string=None):
        if option_string in self.old:
            import sys

            print(f"{parser.prog}: warning: {option_string} is deprecated and will be removed: use "
                  f"{self.option_strings[0]}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_renamed(container: Any, name: str, *old: str, **kwargs: Any) -> argparse.Action:
    """``container.add_argument(name, *old, ...)`` where ``old`` are the flag's earlier names, each still parsed into
    ``name``'s destination with one warning line on stderr (:class:`DeprecatedAlias`). docs/cli.md, "One name per
    concept", lists the renames."""
    return container.add_argument(name, *old, action=DeprecatedAlias, old=old, **kwargs)


class LaterChoices(Sequence[str]):
    """The choices of a flag that names registered objects (scorings, proposals): the names, read from the registry
    when the flag is parsed or its help shown, not when the parser is built (``ppl-tok --help`` imports no
    registered module). Give the argument a ``metavar``: argparse then lists the names only in the command's help.
    """

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        self._names = names

    def __getitem__(self, i: Any) -> Any:
        return tuple(self._names())[i]

    def __len__(self) -> int:
        return len(tuple(self._names()))

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._names()))

    def __contains__(self, name: object) -> bool:
        return name in tuple(self._names())


class LaterHelp:
    """A help text made when the help is shown (it lists registered names): argparse formats it with ``%``."""

    def __init__(self, text: Callable[[], str]) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text()

    def __mod__(self, params: Any) -> str:
        return self._text() % params

    def strip(self) -> str:
        return self._text().strip()

    def __contains__(self, part: str) -> bool:
        return part in self._text()
