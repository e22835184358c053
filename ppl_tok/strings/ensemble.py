"""Ensembles of LMs with different tokenizers, combined over strings.

Token distributions of SmolLM2 and Gemma-3 live on different vocabularies and
cannot be combined; their next-byte distributions can. For LMs ``k = 1..K``
with next-byte distributions ``p_k(b | x)`` (``b`` a byte or the end of the
string) and prefix probabilities ``P_k(x)``:

* the **mixture** (Bayesian model averaging over strings): the output is drawn
  from model ``k`` with prior probability ``pi_k``, so

      p(b | x) = sum_k w_k(x) p_k(b | x),    w_k(x) = pi_k P_k(x) / sum_j pi_j P_j(x),

  the posterior weight of model ``k`` after seeing ``x``;
* the **product of experts**: ``p(b | x) = prod_k p_k(b | x)^alpha_k / Z(x)``,
  normalised over the 257 outcomes.

Both use each member's estimates (the beam's masses); a mixture of a model with
itself is the model (``tests/strings/test_generate.py``).

**Certified bounds** (:meth:`Ensemble.next_bytes`). Each member's beam brackets
its masses: with ``P^_k`` the mass found and ``Pi_k`` the pruned mass,
``P^_k(x b) <= P_k(x b) <= P^_k(x b) + Pi_k`` and
``P^_k(x) <= P_k(x) <= P^_k(x) + Pi_k`` (:mod:`ppl_tok.strings.state`). The
mixture is a ratio ``N / D`` of ``N = sum_k pi_k P_k(x b)`` and
``D = sum_k pi_k P_k(x)``, increasing in ``N`` and decreasing in ``D``, so

    sum_k pi_k P^_k(x b) / sum_k pi_k (P^_k(x) + Pi_k)
        <=  p(b | x)  <=  min(1, sum_k pi_k (P^_k(x b) + Pi_k) / sum_k pi_k P^_k(x)).

The product is ``n(b) / (n(b) + sum_{b' != b} n(b'))`` with
``n(b) = prod_k p_k(b | x)^alpha_k``, increasing in ``n(b)`` and decreasing in
the others; with each member's certified ``[l_k(b), u_k(b)]`` on ``p_k(b | x)``,
``n`` lies in ``[prod_k l_k^alpha_k, prod_k u_k^alpha_k]`` and

    n_lo(b) / (n_lo(b) + sum_{b' != b} n_hi(b'))  <=  p(b | x)  <=  n_hi(b) / (n_hi(b) + sum_{b' != b} n_lo(b')).

Each member's masses are rounded by at most its tolerance (:mod:`ppl_tok.strings.certified`):
the mixture's bounds are widened by the largest of them on each mass (the product's take
the members' widened intervals). Both collapse to the estimate when nothing was pruned (up
to that tolerance); both hold whatever the
members' beams pruned (``tests/strings/test_generate.py`` checks them against
unpruned walks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.state import END_OF_STRING, NextBytes, PrefixProbability, StringState

KINDS = ("mixture", "product")


@dataclass(frozen=True)
class EnsembleNextBytes:
    """The ensemble's next-byte distribution (entries 0-255 bytes, 256 the end of the string).

    The same questions as :class:`~ppl_tok.strings.state.NextBytes` (:attr:`end`, :meth:`top`, :meth:`to_dict`).

    :param log_probs: the estimate, from each member's estimates.
    :param lower: certified lower bounds on ``log p(b | x)`` (see the module docstring).
    :param upper: certified upper bounds on ``log p(b | x)`` (at most 0).
    :param prefix: the mixture's bracket on ``log sum_k pi_k P_k(x)`` (:meth:`Ensemble.prefix_log_prob`);
        ``None`` for a product, which has no prefix probability of its own.
    :param has_end: whether every member can end a string (``False``: :attr:`end` raises).
    """

    log_probs: torch.Tensor
    lower: torch.Tensor
    upper: torch.Tensor
    prefix: PrefixProbability | None = None
    has_end: bool = True

    end = NextBytes.end
    top = NextBytes.top

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the finite entries only, keyed by byte value (``"end"`` for the end), as :class:`NextBytes`."""
        prefix = None if self.prefix is None else {"lower": self.prefix.lower, "upper": self.prefix.upper}
        return {"log_probs": keyed(self.log_probs), "lower": keyed(self.lower), "upper": keyed(self.upper),
                "prefix": prefix, "has_end": self.has_end}


def keyed(t: torch.Tensor) -> dict[str, float]:
    """The finite entries of a next-byte vector, keyed ``"0"``..``"255"`` and ``"end"``."""
    return {("end" if i == END_OF_STRING else str(i)): v for i, v in enumerate(t.tolist()) if v > -math.inf}


@dataclass(frozen=True)
class EnsembleConditional:
    """``log p(text | prompt)`` under an ensemble, with a certified interval (:func:`ensemble_conditional`)."""

    prompt: str
    text: str
    kind: str
    lower: float
    upper: float
    estimate: float
    forwards: int
    n_bytes: int
    seconds: float

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def to_dict(self) -> dict[str, Any]:
        """The numbers, JSON-ready apart from infinities."""
        return {"prompt": self.prompt, "text": self.text, "kind": self.kind, "lower": self.lower,
                "upper": self.upper, "estimate": self.estimate, "width": self.width, "forwards": self.forwards,
                "n_bytes": self.n_bytes, "seconds": self.seconds}


def _log_minus_one(table: torch.Tensor) -> torch.Tensor:
    """``log(sum_{b' != b} exp(table[b']))`` for every ``b`` (exact for ``-inf`` entries, no cancellation)."""
    n = table.shape[0]
    others = table.unsqueeze(0).expand(n, n).clone()
    others.fill_diagonal_(-math.inf)
    return torch.logsumexp(others, 1)


class Ensemble:
    """Several :class:`StringState` walked along the same bytes, combined per next byte.

    :param states: one state per LM (the same bytes fed to each).
    :param kind: ``"mixture"`` or ``"product"``.
    :param weights: the mixture's prior ``pi_k`` or the product's exponents ``alpha_k``
        (default: ``1/K`` each).
    """

    def __init__(self, states: Sequence[StringState], kind: str = "mixture", weights: Sequence[float] | None = None):
        if not states:
            raise ValueError("an ensemble needs at least one LM")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if len({bytes(s.data) for s in states}) != 1:
            raise ValueError("the members of an ensemble must have been fed the same bytes")
        weights = [1.0 / len(states)] * len(states) if weights is None else [float(w) for w in weights]
        if len(weights) != len(states) or any(not (math.isfinite(w) and w > 0) for w in weights):
            raise ValueError(f"weights must be {len(states)} finite numbers > 0, got {weights}")
        self.states, self.kind = list(states), kind
        self.log_weights = torch.tensor(weights, dtype=torch.float64).log()
        if kind == "mixture":
            self.log_weights = self.log_weights - torch.logsumexp(self.log_weights, 0)

    @classmethod
    def of(cls, lms: Sequence[LanguageModel], prompt: str | bytes = "", kind: str = "mixture",
           weights: Sequence[float] | None = None, config: StringSearchConfig | None = None,
           context: str = "") -> Ensemble:
        """The ensemble of ``lms`` after ``prompt``.

        Each member conditions on the prompt under ``config.prefill``: with ``canonical-head``
        member ``k`` is its LM over strings given that *its own* canonical head of the prompt
        (its tokenizer's) is tokenized canonically, ``P_k`` is its ``P_H``, and the mixture
        weights ``pi_k P_H,k(x)`` and certified bounds are those of these quantities.
        ``context``: text before the prompt, canonically tokenized by each member's tokenizer.
        """
        return cls([StringState(lm, context, config, prompt=prompt) for lm in lms], kind, weights)

    @property
    def data(self) -> bytearray:
        return self.states[0].data

    @property
    def forwards(self) -> int:
        return sum(s.forwards for s in self.states)

    def extend(self, data: bytes | int | str) -> Ensemble:
        """Feed the same bytes to every member; returns ``self``."""
        for s in self.states:
            s.extend(data)
        return self

    def member_weights(self) -> torch.Tensor:
        """The mixture's posterior weights ``w_k(x)`` (the product: its exponents)."""
        if self.kind == "product":
            return self.log_weights.exp()
        prefix = torch.tensor([s.prefix_log_prob().estimate for s in self.states], dtype=torch.float64)
        post = self.log_weights + prefix
        return (post - torch.logsumexp(post, 0)).exp()

    def prefix_log_prob(self) -> PrefixProbability:
        """The mixture's bracket on ``log sum_k pi_k P_k(x)``, the probability that its output starts with ``x``.

        Each member's ``P_k(x)`` lies in ``[P^_k(x), P^_k(x) + Pi_k]``, so the weighted sum lies in the weighted
        sums of the ends. A product of experts has no prefix probability (its ``p(b | x)`` is normalised per
        byte): a ``ValueError``.
        """
        if self.kind != "mixture":
            raise ValueError("a product of experts has no prefix probability: only a mixture's is defined")
        brackets = [s.prefix_log_prob() for s in self.states]
        w = self.log_weights.tolist()
        lower = logsumexp([lw + b.lower for lw, b in zip(w, brackets)])
        return PrefixProbability(lower, min(0.0, logsumexp([lw + b.upper for lw, b in zip(w, brackets)])))

    def next_byte_log_probs(self) -> torch.Tensor:
        """``log p(b | x)`` of the ensemble, ``[257]`` (entry 256: the end of the string)."""
        return self.next_bytes().log_probs

    def next_bytes(self) -> EnsembleNextBytes:
        """The ensemble's next-byte estimate with certified bounds (see the module docstring)."""
        members = [s.next_byte_log_probs() for s in self.states]
        if self.kind == "mixture":
            return self._mixture(members)
        return self._product(members)

    def _mixture(self, members: list[NextBytes]) -> EnsembleNextBytes:
        rows = torch.stack([m.log_probs for m in members])  # [K, 257]
        prefix = torch.tensor([m.prefix.estimate for m in members], dtype=torch.float64)
        post = self.log_weights + prefix
        estimate = torch.logsumexp(rows + (post - torch.logsumexp(post, 0)).unsqueeze(1), 0)
        pruned = torch.tensor([s.pruned_log_mass() for s in self.states], dtype=torch.float64)
        found = torch.stack([m.unnormalised for m in members])  # log P^_k(x b), [K, 257]
        w = self.log_weights.unsqueeze(1)
        n_lo = torch.logsumexp(w + found, 0)
        n_hi = torch.logsumexp(w + torch.logaddexp(found, pruned.unsqueeze(1)), 0)
        d_lo = float(torch.logsumexp(self.log_weights + prefix, 0))
        d_hi = float(torch.logsumexp(self.log_weights + torch.tensor([m.prefix.upper for m in members],
                                                                      dtype=torch.float64), 0))
        tol = max(m.tolerance for m in members)  # the members' masses found are rounded by at most this
        lower = n_lo - d_hi - tol  # (d_hi is built from the members' widened prefix upper bounds)
        upper = torch.zeros_like(n_hi) if d_lo == -math.inf else (n_hi - d_lo).clamp(max=0.0)
        d_prefix = PrefixProbability(d_lo, min(0.0, d_hi))
        return EnsembleNextBytes(estimate, lower, (upper + 2 * tol).clamp(max=0.0), d_prefix,
                                 all(m.has_end for m in members))

    def _product(self, members: list[NextBytes]) -> EnsembleNextBytes:
        alpha = self.log_weights.exp().unsqueeze(1)  # every exponent is > 0, so 0 * -inf (NaN) never happens
        combined = (torch.stack([m.log_probs for m in members]) * alpha).sum(0)
        norm = torch.logsumexp(combined, 0)
        if norm == -math.inf:
            raise ValueError(f"after {bytes(self.data)!r} the members agree on no next byte: the product is empty")
        n_lo = (torch.stack([m.lower for m in members]) * alpha).sum(0)
        n_hi = (torch.stack([m.upper for m in members]) * alpha).sum(0)
        lower = n_lo - torch.logaddexp(n_lo, _log_minus_one(n_hi))
        upper = n_hi - torch.logaddexp(n_hi, _log_minus_one(n_lo))
        lower = torch.where(n_lo == -math.inf, torch.full_like(lower, -math.inf), lower)
        upper = torch.where(n_hi == -math.inf, torch.full_like(upper, -math.inf), upper)
        return EnsembleNextBytes(combined - norm, lower, upper.clamp(max=0.0), None, all(m.has_end for m in members))


def ensemble_conditional(ensemble: Ensemble, text: str | bytes, on_byte: Callable[[int], None] | None = None
                         ) -> EnsembleConditional:
    """``log p(text | x)`` under ``ensemble`` after the bytes ``x`` it has read, with a certified interval.

    The ensemble is walked along ``text`` in place. A **mixture** is a distribution over strings,
    ``P(x) = sum_k pi_k P_k(x)``, so ``p(y | x) = P(x y) / P(x)``, bracketed by its prefix brackets
    (:meth:`Ensemble.prefix_log_prob`) as :func:`~ppl_tok.strings.conditional.quotient` does:

        log P^(xy) - log P^+(x)  <=  log p(y | x)  <=  min(0, log P^+(xy) - log P^(x)).

    A **product** is defined byte by byte, so ``p(y | x) = prod_i p(y_i | x y_<i)`` (the chain rule over
    :meth:`Ensemble.next_bytes`): the estimate sums the per-byte estimates, and the per-byte certified
    bounds multiply into the interval (a product of lower bounds of positive factors bounds their product).
    ``on_byte(1)`` is called after each byte (progress).
    """
    from ppl_tok.strings.conditional import quotient

    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    start, prompt = time.perf_counter(), bytes(ensemble.data).decode("utf-8", errors="replace")
    before = ensemble.prefix_log_prob() if ensemble.kind == "mixture" else None
    lower = estimate = upper = 0.0
    for b in data:
        if before is None:
            nb = ensemble.next_bytes()
            lower, estimate = lower + float(nb.lower[b]), estimate + float(nb.log_probs[b])
            upper = upper + float(nb.upper[b])
        ensemble.extend(b)
        if on_byte is not None:
            on_byte(1)
    if before is not None:
        lower, estimate, upper = quotient(ensemble.prefix_log_prob(), before)
    estimate = min(max(estimate, lower), upper)
    return EnsembleConditional(prompt=prompt, text=data.decode("utf-8", errors="replace"), kind=ensemble.kind,
                               lower=lower, upper=min(upper, 0.0), estimate=estimate, forwards=ensemble.forwards,
                               n_bytes=len(data), seconds=time.perf_counter() - start)
