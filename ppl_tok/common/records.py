"""What a stored record holds: the errors of a store, log-probabilities as standard JSON, the kinds of a
record's numbers and their check on read-back (:func:`check_fields`), for :mod:`ppl_tok.common.jsonl_store`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class StoreError(ValueError):
    """A store folder that cannot be used as asked."""


class SettingsMismatchError(StoreError):
    """A store folder written with other settings."""


def encode_log(x: float) -> float | str:
    """A log-probability as standard JSON, as every ``--json`` output writes it
    (:func:`ppl_tok.common.jsonout.to_json`): ``-inf`` becomes ``"-Infinity"``."""
    x = float(x)
    if x == -math.inf:
        return "-Infinity"
    if not math.isfinite(x):
        raise ValueError(f"cannot store the log-probability {x} (only finite values and -inf)")
    return x


def decode_log(x: float | str | None) -> float:
    """Inverse of :func:`encode_log`; ``None`` (``null``, how ppl-tok 0.2 stored ``-inf``) is ``-inf`` too."""
    if x is None or x == "-Infinity":
        return -math.inf
    if isinstance(x, str):
        raise ValueError(f"a stored log-probability is a number or \"-Infinity\", got {x!r}")
    return float(x)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: The kinds of a stored number (:attr:`JsonlStore.fields`) and their checks: ``count`` an integer >= 0, ``log``
#: a log-probability (a number <= 0, or ``"-Infinity"``/``null`` for ``-inf``), ``bound`` a log-probability's
#: certified bound (a finite number, ``"-Infinity"`` or ``null``: a bound may carry a rounding tolerance past 0),
#: ``bits`` a surprisal (a number >= 0, or ``"Infinity"``/``null`` for ``inf``), ``number`` a finite number.
FIELD_KINDS: dict[str, Callable[[Any], bool]] = {
    "count": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "log": lambda v: v is None or v == "-Infinity" or (_is_number(v) and v <= 0),
    "bound": lambda v: v is None or v == "-Infinity" or _is_number(v),
    "bits": lambda v: v is None or v == "Infinity" or (_is_number(v) and v >= 0),
    "number": _is_number,
}
_KIND_NAMES = {"count": "an integer >= 0", "log": "a log-probability (a number <= 0 or \"-Infinity\")",
               "bound": "a number or \"-Infinity\"", "bits": "a surprisal (a number >= 0 or \"Infinity\")",
               "number": "a number"}


def _non_finite(value: Any) -> str | None:
    """The first NaN or infinity inside ``value`` (a JSON value), as text, else ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            found = _non_finite(v)
            if found is not None:
                return found
    return None


def damaged(where: str, what: str) -> StoreError:
    """The error of a record that does not hold what its store wrote (an edited or damaged line)."""
    return StoreError(f"{where}: {what}; the line is damaged or edited (restore it, or delete the line and run "
                      "again to compute it anew)")


def check_fields(record: Any, where: str, fields: Mapping[str, str], allow_nan: bool = False) -> dict[str, Any]:
    """``record`` if it is a JSON object whose ``fields`` present (name -> a kind of :data:`FIELD_KINDS`) hold
    values of their kinds and, unless ``allow_nan``, no number anywhere is NaN or infinite; else :func:`damaged`."""
    if not isinstance(record, dict):
        raise damaged(where, f"expected a JSON object, got {type(record).__name__}")
    if not allow_nan:
        found = _non_finite(record)
        if found is not None:
            raise damaged(where, f"a number is {found} (a store holds finite numbers, -inf as \"-Infinity\")")
    for name, kind in fields.items():
        if name in record and not FIELD_KINDS[kind](record[name]):
            raise damaged(where, f"field {name!r} holds {str(record[name])[:60]}, not {_KIND_NAMES[kind]}")
    return record


def encode_logs(xs: Iterable[float]) -> list[float | str]:
    return [encode_log(x) for x in xs]


def decode_logs(xs: Iterable[float | str | None]) -> list[float]:
    return [decode_log(x) for x in xs]
