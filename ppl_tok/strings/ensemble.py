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
itself is the model (``tests/test_strings_generate.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..lm.base import LanguageModel
from .beam import StringSearchConfig
from .state import StringState

KINDS = ("mixture", "product")


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
           weights: Sequence[float] | None = None, config: StringSearchConfig | None = None) -> Ensemble:
        """The ensemble of ``lms`` after ``prompt``."""
        return cls([StringState(lm, "", config).extend(prompt) for lm in lms], kind, weights)

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

    def next_byte_log_probs(self) -> torch.Tensor:
        """``log p(b | x)`` of the ensemble, ``[257]`` (entry 256: the end of the string)."""
        members = [s.next_byte_log_probs() for s in self.states]
        rows = torch.stack([m.log_probs for m in members])  # [K, 257]
        if self.kind == "mixture":
            prefix = torch.tensor([m.prefix.estimate for m in members], dtype=torch.float64)
            post = self.log_weights + prefix
            return torch.logsumexp(rows + (post - torch.logsumexp(post, 0)).unsqueeze(1), 0)
        # the product: 0 * -inf would be NaN, but every exponent is > 0
        combined = (rows * self.log_weights.exp().unsqueeze(1)).sum(0)
        norm = torch.logsumexp(combined, 0)
        if norm == -math.inf:
            raise ValueError(f"after {bytes(self.data)!r} the members agree on no next byte: the product is empty")
        return combined - norm
