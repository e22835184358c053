"""Pyro's own enumeration of the tokenization model (ppl_tok.infer.enumeration) against ppl_tok.infer.exact / search."""

import math

import pytest
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, config_enumerate, infer_discrete
from pyro.infer.enum import iter_discrete_traces

from ppl_tok import BigramLM
from ppl_tok.distributions import NextToken
from ppl_tok.infer.enumeration import enumerate_tokenizations
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.search import most_likely
from ppl_tok.mdd import compile_mdd
from ppl_tok.model import PARALLEL_ENUMERATION, ParticleWalk, tokenization_model
from ppl_tok.proposals import lookahead_guide, uniform_guide
from toys import LM, TEXT, VOCAB


@pytest.mark.parametrize("seed,text,context", [(5, TEXT, ""), (1, "abbab", ""), (2, "babab", "ab"), (3, "a", "")])
def test_pyro_enumeration_is_the_exact_marginal_and_map_on_toy_lms(seed, text, context):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0)
    pyro_enum = enumerate_tokenizations(text, lm, context=context)
    exact = exact_marginal(text, lm, context=context)
    assert sorted(pyro_enum.tokenizations) == sorted(exact.tokenizations)
    assert pyro_enum.log_marginal == pytest.approx(exact.log_marginal, abs=1e-9)
    by_path = dict(zip(exact.tokenizations, exact.log_probs.tolist()))
    for v, lp in zip(pyro_enum.tokenizations, pyro_enum.log_probs):
        assert lp == pytest.approx(by_path[v], abs=1e-9)  # each trace's log_prob_sum is log p(v | c)
    best = most_likely(text, lm, context=context)
    assert pyro_enum.most_likely == best.tokens
    assert pyro_enum.most_likely_log_prob == pytest.approx(best.log_prob, abs=1e-9)


def test_next_token_support_is_the_mdds_out_edges_and_one_particle_only():
    walk = ParticleWalk(LM, compile_mdd(TEXT, VOCAB))
    support = NextToken(walk).enumerate_support()
    assert support.shape == (len(walk.out_tokens(0)), 1)
    assert sorted(support.flatten().tolist()) == sorted(walk.out_tokens(0))
    with pytest.raises(ValueError, match="enumerates one particle"):
        NextToken(ParticleWalk(LM, compile_mdd(TEXT, VOCAB), num_particles=2)).enumerate_support()


def test_too_many_paths_is_refused_naming_exact_marginal():
    with pytest.raises(ValueError, match="over max_paths=3.*exact_marginal"):
        enumerate_tokenizations(TEXT, LM, max_paths=3)


def test_parallel_enumeration_and_infer_discrete_are_refused_in_one_line():
    mdd = compile_mdd(TEXT, VOCAB)
    with pytest.raises(ValueError, match="^parallel enumeration of the tokenization model is impossible"):
        infer_discrete(config_enumerate(tokenization_model), first_available_dim=-2, temperature=0)(LM, mdd)
    with pytest.raises(ValueError, match="infer_discrete cannot decode"):  # sequential: would be a prior draw
        infer_discrete(config_enumerate(tokenization_model, "sequential"), first_available_dim=-2)(LM, mdd)
    with pytest.raises(ValueError, match=r"^parallel enumeration of the tokenization model is impossible"):
        with poutine.enum(first_available_dim=-2):
            config_enumerate(tokenization_model)(LM, mdd)
    with pytest.raises(ValueError) as err:  # model-side enumeration in TraceEnum_ELBO, empty guide
        TraceEnum_ELBO(max_plate_nesting=1).loss(config_enumerate(tokenization_model), lambda *a, **k: None, LM, mdd)
    assert str(err.value).splitlines()[0] == PARALLEL_ENUMERATION  # (Pyro's trace adds the shapes below it)


@pytest.mark.parametrize("guide", [lookahead_guide, uniform_guide])
def test_trace_enum_elbo_with_a_sequentially_enumerated_guide_is_the_exact_elbo(guide):
    """``TraceEnum_ELBO`` over every path of the guide: sum_v q(v) (log p(v) - log q(v)), checked path by path."""
    mdd = compile_mdd(TEXT, VOCAB)
    loss = TraceEnum_ELBO(max_plate_nesting=1).loss(tokenization_model, config_enumerate(guide, "sequential"), LM, mdd)
    elbo, total_q, paths = 0.0, 0.0, 0
    for guide_trace in iter_discrete_traces("flat", config_enumerate(guide, "sequential"), LM, mdd):
        model_trace = poutine.trace(poutine.replay(tokenization_model, trace=guide_trace)).get_trace(LM, mdd)
        log_q, log_p = float(guide_trace.log_prob_sum()), float(model_trace.log_prob_sum())
        elbo += math.exp(log_q) * (log_p - log_q)
        total_q += math.exp(log_q)
        paths += 1
    exact = exact_marginal(TEXT, LM)
    assert paths == exact.count and total_q == pytest.approx(1.0, abs=1e-12)
    assert -loss == pytest.approx(elbo, abs=1e-9)
    assert -loss <= exact.log_marginal + 1e-12  # log p(x) - ELBO = KL(q || posterior) >= 0


# " tongueless" (597 tokenizations) takes over 13 minutes here: one model run per trace; exact_marginal shares prefixes
@pytest.mark.parametrize("text", [" Tokens"])
def test_pyro_enumeration_on_smollm2_short_strings(smollm2, text):
    pyro_enum = enumerate_tokenizations(text, smollm2)
    exact = exact_marginal(text, smollm2)
    assert len(pyro_enum.tokenizations) == exact.count  # 52
    assert pyro_enum.log_marginal == pytest.approx(exact.log_marginal, abs=1e-4)  # float32 LM rows
    best = most_likely(text, smollm2)
    assert pyro_enum.most_likely == best.tokens
    assert pyro_enum.most_likely_log_prob == pytest.approx(best.log_prob, abs=1e-4)
    assert torch.isfinite(torch.tensor(pyro_enum.log_probs)).all()
