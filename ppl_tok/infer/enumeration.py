"""The exact marginal and the most likely tokenization by Pyro's own (sequential) enumeration.

With :meth:`ppl_tok.distributions.NextToken.enumerate_support`, stock
``config_enumerate(tokenization_model, "sequential")`` marks every token site
for enumeration, and ``pyro.infer.enum.iter_discrete_traces`` (the queue-based
enumeration ``TraceEnum_ELBO`` runs on a guide's sequential sites) yields one
trace per path of the MDD: at ``tok_t`` the queue branches over the out-edges
of the node the earlier tokens reached, and re-runs the model with those tokens
replayed, so the number of sites may depend on the values (a path ends when it
spells the string). Each trace's ``log_prob_sum()`` is ``log p(v | c)`` of its
tokenization ``v`` (the masked placeholder sites after the end add 0), hence

    p(x | c) = sum over traces of exp(trace.log_prob_sum()),
    v_MAP    = the trace of largest log_prob_sum().

Not possible in stock Pyro, and refused by the model with one line naming this
module: parallel enumeration (``TraceEnum_ELBO`` with enumerated model sites,
``infer_discrete``), because the distribution of ``tok_t`` depends on the value
of ``tok_<t`` through the LM state, which a tensor dimension per enumerated
site cannot carry; and model-side sequential enumeration in ``TraceEnum_ELBO``
(Pyro itself raises ``NotImplementedError``). ``TraceEnum_ELBO`` does enumerate
a guide's sites sequentially (:class:`~ppl_tok.distributions.OverCandidates`
has ``enumerate_support``): it then computes a proposal's exact ELBO
``sum_v q(v) (log p(v) - log q(v)) = log p(x) - KL(q || p(. | x))``.

Each trace costs one model run (one LM step per token), so this is for short
strings only: :func:`enumerate_tokenizations` refuses more than ``max_paths``
tokenizations (counted on the MDD first); :mod:`ppl_tok.infer.exact` computes
the same sum sharing prefixes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pyro.infer import config_enumerate
from pyro.infer.enum import iter_discrete_traces

from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LanguageModel
from ppl_tok.mdd import compile_mdd
from ppl_tok.model import TOKENIZATION, tokenization_model, unpad


@dataclass(frozen=True)
class EnumeratedTokenizations:
    """Every tokenization of ``text`` with its log-probability, from Pyro's enumeration (in trace order)."""

    text: str
    tokenizations: list[tuple[int, ...]]
    log_probs: list[float]

    @property
    def log_marginal(self) -> float:
        """``log p(x | c)``: the log-sum-exp over the traces."""
        return logsumexp(self.log_probs)

    @property
    def most_likely(self) -> tuple[int, ...]:
        """The tokenization of the trace with the largest log-probability (the MAP)."""
        return self.tokenizations[max(range(len(self.log_probs)), key=self.log_probs.__getitem__)]

    @property
    def most_likely_log_prob(self) -> float:
        return max(self.log_probs)


def enumerate_tokenizations(text: str, lm: LanguageModel, *, context: str | Sequence[int] = "",
                            max_paths: int = 10_000) -> EnumeratedTokenizations:
    """Every tokenization of ``text`` as a trace of ``pyro.infer.enum.iter_discrete_traces`` (module docstring).

    :param max_paths: refuse strings with more tokenizations (each is one model run).
    """
    mdd = compile_mdd(text, lm.vocab)
    count = mdd.count()
    if count > max_paths:
        raise ValueError(f"{text!r} has {count} tokenizations, over max_paths={max_paths} (one model run each): "
                         "raise max_paths, or use ppl_tok.infer.exact.exact_marginal (shares prefixes)")
    if count == 0:
        raise ValueError(f"{text!r} has no tokenization under this vocabulary")
    model = config_enumerate(tokenization_model, default="sequential")
    tokenizations, log_probs = [], []
    for trace in iter_discrete_traces("flat", model, lm, mdd, context):
        trace.compute_log_prob()
        log_p = float(sum(node["log_prob_sum"] for node in trace.nodes.values() if node["type"] == "sample"))
        if math.isnan(log_p):
            raise ValueError(f"a trace of {text!r} has log-probability NaN: the LM gave NaN")
        tokenizations.append(unpad(trace.nodes[TOKENIZATION]["value"].reshape(1, -1))[0])
        log_probs.append(log_p)
    if len(tokenizations) != count or len(set(tokenizations)) != count:
        raise RuntimeError(f"Pyro's enumeration gave {len(set(tokenizations))} distinct tokenizations of {text!r} "
                           f"in {len(tokenizations)} traces, where the MDD has {count}")
    return EnumeratedTokenizations(text, tokenizations, log_probs)


__all__ = ["EnumeratedTokenizations", "enumerate_tokenizations"]
