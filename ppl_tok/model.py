"""The tokenization process as a Pyro model (Geh et al., 2024, Def. 3.1 and Sec. 5).

Step ``t`` samples ``tok_t ~ Categorical(p(. | context, tok_<t))`` at the sample
site ``"tok_{t}"``; the MDD of the string constrains the process: a token that
leaves the MDD gets weight zero (``pyro.factor(-inf)``) and ends the program,
reaching the MDD's end stops it. The model's evidence is therefore

    p(x | c) = sum over tokenizations v of x of prod_t p(v_t | c, v_<t),

the marginal string probability, so ``pyro.infer.Importance(model, guide)``
estimates it with any guide over the same sites (``ppl_tok.proposals``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch

from .lm.base import LanguageModel
from .mdd import MDD


def site(t: int) -> str:
    """The name of the sample site of the ``t``-th token."""
    return f"tok_{t}"


def tokenization_model(lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "") -> tuple[int, ...]:
    """Sample a token sequence from the LM, constrained to the tokenizations in ``mdd``.

    Returns the tokens sampled; off-MDD sequences are returned with weight zero.
    """
    state = lm.initial(context)
    node, tokens, t = mdd.source, [], 0
    while node != mdd.sink:
        tok = int(pyro.sample(site(t), dist.Categorical(logits=state.log_probs)))
        tokens.append(tok)
        nxt = mdd.out_tokens(node).get(tok)
        if nxt is None:  # the token leaves the MDD: this sequence does not spell x
            pyro.factor(f"off_mdd_{t}", torch.tensor(-math.inf, dtype=state.log_probs.dtype))
            break
        node, t = nxt, t + 1
        if node != mdd.sink:
            state = lm.extend([state], [tok])[0]
    return tuple(tokens)
