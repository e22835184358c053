"""What a certified interval of the LM over strings is worth: its rounding tolerance, and when it says nothing.

**Tolerance.** :mod:`ppl_tok.common.rounding` derives the rounding tolerance of the rows,
``tolerance(dtype, terms, V) = (terms + 1) * u * (32 + 4 sqrt(V))`` nats, added on both sides
of every interval of the walk.

**Uninformative.** An interval wider than :data:`WIDE_NATS` (3 bits, ``3 ln 2 = 2.08``
nats: a factor of 8 in probability, so the bracket cannot tell a likely event from an
unlikely one) is flagged "uninformative" with what would tighten it:
:func:`uninformative_hint`, the one rule of surprisal, conditional, next and marginal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ppl_tok.common.lazy import lazy_names

if TYPE_CHECKING:  # torch for the rows' annotations; the rounding model re-exported on first use (light to import)
    import torch

    from ppl_tok.common.rounding import MAGNITUDE_NATS, SUM_SIGMAS, UNIT_ROUNDOFF, tolerance, unit_roundoff

__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(
    ("MAGNITUDE_NATS", "SUM_SIGMAS", "UNIT_ROUNDOFF", "tolerance", "unit_roundoff"), "ppl_tok.common.rounding"))

#: bits: an interval wider than this is uninformative (a factor of 8 in probability)
WIDE_BITS = 3.0
#: :data:`WIDE_BITS` in nats
WIDE_NATS = WIDE_BITS * math.log(2.0)


def tighten(config: Any, prefill: str | None = None, prompt_bytes: int = 0) -> str:
    """What would tighten a bracket of the beam run under ``config`` (a :class:`StringSearchConfig`).

    ``prefill``: the mode a prompt got (``"exact"`` suggests ``--prefill canonical-head``);
    ``prompt_bytes``: the prompt's walked length (a long one suggests a shorter prompt).
    """
    more = [f"a wider beam (now {config.beam})"]
    if math.isfinite(config.prune):
        more.append(f"a larger prune (now {config.prune:g} nats)")
    if config.budget is not None:
        more.append(f"a larger budget (now {config.budget})")
    if config.prune_against == "text":
        more.append("pruning against the offset")
    for name, share in config.lazy_settings().items():
        if share > 0:
            more.append(f"a lower {name} (now {share:g})")
    if prompt_bytes > 0:
        more.append(f"a shorter prompt (now {prompt_bytes} bytes walked)")
    if prefill == "exact" and prompt_bytes > 0:
        more.append("prefill canonical-head")
    return ", ".join(more[:-1]) + " or " + more[-1] if len(more) > 1 else more[0]


def uninformative_hint(width: float, config: Any, wide: float = WIDE_NATS, *, unit: str = "nats",
                       prefill: str | None = None, prompt_bytes: int = 0) -> str | None:
    """``None`` when an interval of ``width`` (in ``unit``) is informative (``width <= wide``); else the hint.

    The one rule every string command applies (``"informative"`` and ``"hint"`` in their JSON):
    the hint says how wide the interval is and names what would tighten it (:func:`tighten`).
    """
    if not wide > 0:
        raise ValueError(f"wide must be a positive width, got {wide!r}")
    if width <= wide:
        return None
    shown = "unbounded" if width == math.inf else f"{width:.1f} {unit} wide"
    return f"uninformative (interval {shown}, more than {wide:.3g} {unit}): {tighten(config, prefill, prompt_bytes)}"


# ------------------------------------------------ the certified answers of a walk (:mod:`.state`)
#: the index of the end of the string in a next-byte vector (0-255 are the bytes)
END_OF_STRING = 256


class EndUnavailableError(ValueError):
    """The LM has no token without a surface: the probability that the string ends is not defined."""


@dataclass(frozen=True)
class PrefixProbability:
    """A certified interval on ``log P(x | c)``, the log-probability that the output starts with ``x``.

    :param found: ``log P^(x)``, the mass the beam found: the estimate.
    :param bound: ``min(0, log(P^(x) + Pi))``, the top of the bracket in exact arithmetic.
    :param tolerance: nats of rounding (:func:`~ppl_tok.common.rounding.tolerance`): the
        interval is ``[found - tolerance, min(0, bound + tolerance)]``.
    """

    found: float
    bound: float
    tolerance: float = 0.0

    @property
    def estimate(self) -> float:
        return min(self.found, 0.0)

    @property
    def lower(self) -> float:
        return self.found - self.tolerance

    @property
    def upper(self) -> float:
        return min(0.0, self.bound + self.tolerance)

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def to_dict(self) -> dict[str, float]:
        return {"lower": self.lower, "upper": self.upper, "estimate": self.found, "tolerance_nats": self.tolerance}


@dataclass(frozen=True)
class NextBytes:
    """The next-byte distribution after ``x``: entries 0-255 are bytes, entry 256 the end of the string.

    :param log_probs: the estimate: the beam's masses ``P^(x b)``, ``P^(x, end)``
        normalised to sum to one.
    :param lower: certified lower bounds on ``log p(b | x)`` (``tolerance`` below the bracket of exact arithmetic).
    :param upper: certified upper bounds on ``log p(b | x)`` (``tolerance`` above the bracket, at most 0).
    :param prefix: the bracket on ``log P(x | c)``.
    :param unnormalised: ``log P^(x b)`` and ``log P^(x, end)``: with nothing pruned
        their log-sum-exp is ``log P^(x)``.
    :param has_end: whether the LM can end a string (``False``: entry 256 is ``-inf``
        and :attr:`end` raises).
    :param tolerance: nats of rounding added on both sides of every bracket
        (:func:`~ppl_tok.common.rounding.tolerance`).
    """

    log_probs: torch.Tensor
    lower: torch.Tensor
    upper: torch.Tensor
    prefix: PrefixProbability
    unnormalised: torch.Tensor
    has_end: bool
    tolerance: float = 0.0

    @property
    def end(self) -> float:
        """``log p(end | x)``: the estimate that the string stops here."""
        if not self.has_end:
            raise EndUnavailableError("the LM's vocabulary has no EOS or other special token: "
                                      "the probability that the string ends is unavailable")
        return float(self.log_probs[END_OF_STRING])

    def top(self, k: int = 5) -> list[tuple[bytes | None, float]]:
        """The ``k`` most probable next bytes (``None``: the end of the string) with their log-probs."""
        values, idx = self.log_probs.topk(min(k, len(self.log_probs)))
        return [(None if i == END_OF_STRING else bytes([i]), v) for i, v in zip(idx.tolist(), values.tolist())]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the finite entries only, keyed by byte value (``"end"`` for the end)."""
        def keyed(t: torch.Tensor) -> dict[str, float]:
            return {("end" if i == END_OF_STRING else str(i)): v for i, v in enumerate(t.tolist()) if v > -math.inf}
        return {"log_probs": keyed(self.log_probs), "lower": keyed(self.lower), "upper": keyed(self.upper),
                "prefix": self.prefix.to_dict(), "has_end": self.has_end, "tolerance_nats": self.tolerance}


def head_caveat(head_bytes: int, what: str = "log p(text | prompt)") -> str | None:
    """``None`` when a bracket is certified for ``what`` itself (no canonical head), else the one line that says
    what it is certified for: under a canonical head (``--prefill canonical-head``, or ``auto`` choosing one) the
    bracket holds for the quantity given that the prompt's first ``head_bytes`` bytes are tokenized canonically,
    and ``what`` over every tokenization can lie outside it (by 0.06 nats in the audit of issue 50; the
    toy LMs of tests/suites/test_hostile_round3.py put it nats away)."""
    if not head_bytes:
        return None
    return (f"not certified for {what}: the interval is certified given that the prompt's first {head_bytes} "
            f"bytes are tokenized canonically (a canonical head, --prefill); --prefill exact certifies {what} itself")

