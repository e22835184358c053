"""Proposals (ppl_tok.proposals): a user's proposal over out-edges swaps in, unbiased against the exact marginal."""

import math

import torch

from ppl_tok import BigramLM, Vocabulary
from ppl_tok.infer.exact import exact_marginal

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb"])
TEXT = "ababba"


def test_a_proposal_written_with_mdd_guide_swaps_in():
    """The recipe of the docs: a proposal over out-edges, turned into a guide."""
    from ppl_tok.infer.importance import marginal
    from ppl_tok.proposals import lookahead, mdd_guide

    def tempered(walk, i, out):
        return lookahead(walk, i, out) / 2.0

    lm = BigramLM.random(VOCAB, seed=4, bos_id=0)
    exact = math.exp(exact_marginal(TEXT, lm).log_marginal)
    guide = mdd_guide(tempered)
    z = torch.tensor([math.exp(marginal(TEXT, lm, 8, guide=guide, seed=s).log_marginal) for s in range(150)])
    assert abs(float(z.mean()) - exact) < 4 * float(z.std()) / math.sqrt(len(z))
