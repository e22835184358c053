"""Argument types of the command line: integers in a range and positive numbers, with errors argparse prints."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


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


def positive(text: str) -> float:
    """An argparse type: a finite number ``> 0``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


positive.__name__ = "number"

#: A count (>= 1) and a seed (a 32-bit unsigned integer).
POSITIVE, SEED = integer(1), integer(0, 2**32 - 1)
