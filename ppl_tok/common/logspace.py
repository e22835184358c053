"""Log-space arithmetic on Python floats (``-inf`` is a legal value, NaN never is)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def logsumexp(values: Iterable[float]) -> float:
    """``log(sum(exp(v)))``, exact-summed with ``math.fsum``; ``-inf`` for no mass."""
    finite = [v for v in values if v != -math.inf]
    if any(math.isnan(v) for v in finite):
        raise FloatingPointError("NaN in a log-space sum")
    if not finite:
        return -math.inf
    top = max(finite)
    return top + math.log(math.fsum(math.exp(v - top) for v in finite))
