"""The Pyro model of the tokenization process, run by stock pyro.infer.Importance."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Importance

from ppl_tok import BigramLM, Vocabulary, compile_mdd
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.model import site, tokenization_model
from ppl_tok.proposals import lookahead_guide, uniform_guide

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb"])
TEXT = "ababba"


def estimates(lm, guide, runs, num_samples):
    mdd = compile_mdd(TEXT, VOCAB)
    out = []
    for seed in range(runs):
        pyro.set_rng_seed(seed)
        imp = Importance(tokenization_model, guide, num_samples=num_samples).run(lm, mdd)
        out.append(float(imp.get_log_normalizer()))
        assert math.isfinite(float(imp.get_ESS()))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.slow  # 2,000 sequential Pyro traces: about 20 CPU-s
@pytest.mark.parametrize("guide", [lookahead_guide, uniform_guide])
def test_importance_is_unbiased_for_the_marginal(guide):
    lm = BigramLM.random(VOCAB, seed=1, bos_id=0)
    exact = math.exp(exact_marginal(TEXT, lm).log_marginal)
    z = estimates(lm, guide, runs=200, num_samples=10).exp()  # p-hat, unbiased in p (not in log p)
    se = float(z.std()) / math.sqrt(len(z))
    assert abs(float(z.mean()) - exact) < 4 * se


def test_off_mdd_tokens_have_weight_zero():
    lm = BigramLM.random(VOCAB, seed=0, bos_id=0)
    mdd = compile_mdd(TEXT, VOCAB)
    bb = VOCAB.ids_of("bb")[0]

    def bad_guide(lm, mdd, context=""):
        logits = torch.full((len(VOCAB),), -torch.inf, dtype=torch.float64)
        logits[bb] = 0.0  # "bb" is not a prefix of "ababba"
        pyro.sample(site(0), dist.Categorical(logits=logits))

    trace = pyro.poutine.trace(pyro.poutine.replay(tokenization_model, trace=pyro.poutine.trace(bad_guide)
                                                   .get_trace(lm, mdd))).get_trace(lm, mdd)
    assert trace.log_prob_sum() == -math.inf


@pytest.mark.slow  # 2,000 sequential Pyro traces: about 17 CPU-s
def test_a_users_own_guide_swaps_in():
    """A tempered look-ahead written here, not shipped: it only has to sample the same sites."""
    lm = BigramLM.random(VOCAB, seed=3, bos_id=0)
    mdd = compile_mdd(TEXT, VOCAB)

    def tempered_guide(lm, mdd, context="", temperature=2.0):
        state, node, t = lm.initial(context), mdd.source, 0
        while node != mdd.sink:
            out = mdd.out_tokens(node)
            logits = torch.full_like(state.log_probs, -torch.inf)
            for tok in out:
                logits[tok] = state.log_probs[tok] / temperature
            tok = int(pyro.sample(site(t), dist.Categorical(logits=logits)))
            node, t = out[tok], t + 1
            if node != mdd.sink:
                state = lm.extend([state], [tok])[0]

    exact = math.exp(exact_marginal(TEXT, lm).log_marginal)
    z = []
    for seed in range(200):
        pyro.set_rng_seed(seed)
        z.append(float(Importance(tokenization_model, tempered_guide, num_samples=10).run(lm, mdd)
                       .get_log_normalizer()))
    z = torch.tensor(z).exp()
    assert abs(float(z.mean()) - exact) < 4 * float(z.std()) / math.sqrt(len(z))


@pytest.mark.slow  # 64 sequential traces on SmolLM2 and its enumeration: about 20 CPU-s
def test_lookahead_on_smollm2_tokens(smollm2):
    mdd = compile_mdd(" Tokens", smollm2.vocab)
    pyro.set_rng_seed(0)
    imp = Importance(tokenization_model, lookahead_guide, num_samples=64).run(smollm2, mdd)
    exact = exact_marginal(" Tokens", smollm2).log_marginal
    assert abs(float(imp.get_log_normalizer()) - exact) < 0.5

