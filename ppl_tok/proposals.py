"""Proposals for the tokenization model: ordinary Pyro guides over its sites.

A guide takes the model's arguments ``(lm, mdd, context)`` and samples every
``"tok_{t}"`` site of :func:`ppl_tok.model.tokenization_model`; any function
that does so swaps in (pass it to ``pyro.infer.Importance``).

* :func:`lookahead_guide`: the paper's 1-step look-ahead proposal (Sec. 5,
  after Chirkova et al., 2023): the LM's next-token distribution masked to the
  MDD's out-edges at the current node and renormalised,
  ``q(v_j | v_<j) ∝ p(v_j | v_<j) 1[v_<=j tokenizes a prefix of x]``.
  The importance weight of a path is then the product of the masked masses,
  ``prod_j sum_{v in out(node_j)} p(v | v_<j)``.
* :func:`uniform_guide`: uniform over the MDD's paths (exact, from path counts).

The LM prior itself (the model without a guide: the naive proposal that the
paper dismisses) is ``pyro.infer.Importance(model, guide=None)``: almost every
sample leaves the MDD and has weight zero, and when all of them do, stock Pyro
1.9 fails to normalise the weights (NaN logits), so this route is not offered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch

from .lm.base import LanguageModel
from .mdd import MDD
from .model import site


def _masked(log_probs: torch.Tensor, allowed: list[int]) -> torch.Tensor:
    logits = torch.full_like(log_probs, -torch.inf)
    idx = torch.tensor(allowed)
    logits[idx] = log_probs[idx]
    return logits


def lookahead_guide(lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "") -> tuple[int, ...]:
    """The 1-step look-ahead proposal: LM next-token probabilities masked to the MDD."""
    state = lm.initial(context)
    node, tokens, t = mdd.source, [], 0
    while node != mdd.sink:
        out = mdd.out_tokens(node)
        tok = int(pyro.sample(site(t), dist.Categorical(logits=_masked(state.log_probs, list(out)))))
        tokens.append(tok)
        node, t = out[tok], t + 1
        if node != mdd.sink:
            state = lm.extend([state], [tok])[0]
    return tuple(tokens)


def uniform_guide(lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "") -> tuple[int, ...]:
    """Uniform over the tokenizations of x: each edge taken with probability ∝ its completions."""
    counts = mdd.path_counts
    node, tokens, t = mdd.source, [], 0
    while node != mdd.sink:
        out = mdd.out_tokens(node)
        logits = torch.full((len(lm.vocab),), -torch.inf, dtype=torch.float64)
        for tok, j in out.items():
            logits[tok] = math.log(counts[j])  # exact for big integers
        tok = int(pyro.sample(site(t), dist.Categorical(logits=logits)))
        tokens.append(tok)
        node, t = out[tok], t + 1
    return tuple(tokens)
