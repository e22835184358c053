"""The rounding tolerance of a figure computed from an LM's next-token rows, in nats.

**Tolerance.** The certified brackets (the beam's, :mod:`ppl_tok.strings.beam`; the best-first
search's, :mod:`ppl_tok.infer.search`) hold in exact arithmetic over the next-token rows the LM
returned. The rows are rounded: a row of
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

:mod:`ppl_tok.strings.certified` applies it to the LM over strings (and says when an interval
is uninformative).
"""

from __future__ import annotations

import math

import torch

#: unit roundoff ``u`` (half the machine epsilon) of the dtypes an LM's rows come in
UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11,
                 torch.bfloat16: 2.0 ** -8}
#: the magnitude (nats) of the rounded quantities of one term: a log-prob carrying mass, the row's log-normaliser
MAGNITUDE_NATS = 32.0
#: standard deviations of the random-sign rounding of a ``V``-term sum allowed for
SUM_SIGMAS = 4.0


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


__all__ = ["MAGNITUDE_NATS", "SUM_SIGMAS", "UNIT_ROUNDOFF", "tolerance", "unit_roundoff"]
