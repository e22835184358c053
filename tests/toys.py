"""The toy LM and string shared by the tests of the estimators, with its exact marginal (not a test module)."""

import math

import torch

from ppl_tok import BigramLM, Vocabulary, compile_mdd
from ppl_tok.infer.diagnostics import log_standard_error
from ppl_tok.infer.exact import exact_marginal

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb"])
TEXT = "ababba"
LM = BigramLM.random(VOCAB, seed=5, bos_id=0)
MDD_ = compile_mdd(TEXT, VOCAB)
EXACT = exact_marginal(TEXT, LM)


def close_in_se(log_w: torch.Tensor, truth: float, k: float = 4.0) -> bool:
    """The IS estimate from ``log_w`` is within ``k`` delta-method standard errors of ``truth`` (log scale)."""
    est = float(torch.logsumexp(log_w, 0)) - math.log(log_w.numel())
    return abs(est - truth) < k * log_standard_error(log_w) + 1e-9
