"""What a certified interval of the LM over strings is worth: its rounding tolerance, and when it says nothing.

**Tolerance.** The beam's brackets (:mod:`ppl_tok.strings.beam`) are certified in exact
arithmetic over the next-token rows the LM returned. The rows are rounded: a row of
``V`` log-probs computed in a dtype of unit roundoff ``u`` (float64 ``2^-53``, float32
``2^-24``, float16 ``2^-11``, bfloat16 ``2^-8``) has

* each entry ``l_t`` rounded by at most ``u |l_t|``; the tokens that carry mass have
  ``|l_t|`` (and the row's log-normaliser, which log-softmax subtracts) below
  :data:`MAGNITUDE_NATS` = 32 nats, so ``u * 32`` per entry;
* its normaliser ``log sum_t exp(x_t)`` summed over ``V`` terms in that dtype: a sum of
  ``V`` positive terms has a relative error that grows like ``sqrt(V) u`` for rounding
  errors of random sign (Higham, *Accuracy and Stability of Numerical Algorithms*,
  2nd ed., sec. 4.2); :data:`SUM_SIGMAS` = 4 of them: ``4 sqrt(V) u``. So
  ``sum_t exp(row_t)`` is ``1`` only to within that: SmolLM2's float32 rows (``V =
  49152``) sum to ``exp(+-1.4e-5)``, 225 ``u``, inside ``4 sqrt(V) u = 887 u``.

The per-term tolerance is ``eps = u (32 + 4 sqrt(V))``. A figure of the walk rests on at
most ``terms`` rows along a path (the tokens of its longest token prefix, the covering
token and a canonical head's tokens) and on one more log-sum-exp that normalises it (a
next-byte distribution's total, a conditional's quotient), so

    tolerance(dtype, terms, V) = (terms + 1) * u * (32 + 4 sqrt(V))

nats, added on both sides: every reported interval is ``[lo - tol, min(0, hi + tol)]`` with
``[lo, hi]`` the bracket of exact arithmetic (a log-probability is at most 0). The float64 sums of the walk itself add
under ``1e-13`` per term, inside that margin. Float32 SmolLM2: ``5.5e-5`` nats per term
(a 3-byte prompt: ``2e-4``); bfloat16 rows: ``0.12 + 0.016 sqrt(V)`` per term. The
``transformers`` adapter computes the head and the log-softmax in float32 for bfloat16
and float16 weights (:mod:`ppl_tok.lm.hf`), so its rows, and their tolerance, are
float32's; the bfloat16 rounding inside the network is part of the LM the intervals
describe (two forwards of one prefix in different batches can differ by more).

**Uninformative.** An interval wider than :data:`WIDE_NATS` (3 bits, ``3 ln 2 = 2.08``
nats: a factor of 8 in probability, so the bracket cannot tell a likely event from an
unlikely one) is flagged "uninformative" with what would tighten it:
:func:`uninformative_hint`, the one rule of surprisal, conditional, next and marginal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

#: unit roundoff ``u`` (half the machine epsilon) of the dtypes an LM's rows come in
UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11,
                 torch.bfloat16: 2.0 ** -8}
#: the magnitude (nats) of the rounded quantities of one term: a log-prob carrying mass, the row's log-normaliser
MAGNITUDE_NATS = 32.0
#: standard deviations of the random-sign rounding of a ``V``-term sum allowed for
SUM_SIGMAS = 4.0
#: bits: an interval wider than this is uninformative (a factor of 8 in probability)
WIDE_BITS = 3.0
#: :data:`WIDE_BITS` in nats
WIDE_NATS = WIDE_BITS * math.log(2.0)


def unit_roundoff(dtype: torch.dtype) -> float:
    """``u`` of a floating dtype (float64, float32, float16, bfloat16)."""
    try:
        return UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise ValueError(f"no rounding model for rows of dtype {dtype} (one of "
                         f"{', '.join(str(d) for d in UNIT_ROUNDOFF)})") from None


def tolerance(dtype: torch.dtype, terms: int, vocab_size: int) -> float:
    """The absolute tolerance (nats) of a certified bound resting on ``terms`` rows of ``vocab_size`` log-probs.

    ``(terms + 1) * u * (MAGNITUDE_NATS + SUM_SIGMAS * sqrt(vocab_size))``: per row the rounding
    of its entries and of its normaliser, plus one log-sum-exp that normalises the figure
    (the module docstring derives it).
    """
    if isinstance(terms, bool) or not isinstance(terms, int) or terms < 0:
        raise ValueError(f"terms must be a number of rows >= 0, got {terms!r}")
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive number of tokens, got {vocab_size!r}")
    return (terms + 1) * unit_roundoff(dtype) * (MAGNITUDE_NATS + SUM_SIGMAS * math.sqrt(vocab_size))


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
    if getattr(config, "extend_threshold", 0) > 0:
        more.append(f"a lower extend_threshold (now {config.extend_threshold:g})")
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
    :param tolerance: nats of rounding (:func:`~ppl_tok.strings.certified.tolerance`): the
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
        (:func:`~ppl_tok.strings.certified.tolerance`).
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
