"""JSON output shared by the command line, the studies and the benchmarks: standard JSON (RFC 8259) with non-finite
numbers as strings, and counts of any size as exact decimal strings beside their log10."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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
