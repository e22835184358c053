"""Stock Pyro uses that were silently wrong (issue 46): each gives the right answer or refuses in one line naming
the fix, against the exact marginal of the toy LM."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import Importance, Predictive, Trace_ELBO, TraceEnum_ELBO

from ppl_tok.model import ParticleWalk, outer_batch_shape, site, tokenization_model
from ppl_tok.proposals import lookahead_guide, uniform_guide
from toys import EXACT, LM, MDD_, close_in_se


def stopping_guide(lm, mdd, context="", num_particles=1):
    """Uniform over out-edges, emitting no site once its particles have finished (docs/pyro.md allows it)."""
    walk = ParticleWalk(lm, mdd, context, num_particles, outer_batch_shape())
    with pyro.plate("particles", walk.batch_shape[-1], dim=-1):
        for t in range(walk.width):
            if not walk.any_active():
                break
            logits = torch.full((len(walk), len(lm.vocab)), -math.inf, dtype=torch.float64)
            for i in range(len(walk)):
                logits[i, list(walk.out_tokens(i)) if walk.active[i] else [0]] = 0.0
            with poutine.mask(mask=walk.active.clone().reshape(walk.batch_shape)):
                tok = pyro.sample(site(t), dist.Categorical(logits=logits.reshape(walk.batch_shape + (-1,))))
            walk.advance(tok)
    return walk.padded_tokens()


def test_predictive_with_a_guide_that_stops_emitting_sites_is_refused():
    """Seed 4: the guide's first draw (which fixes Predictive's site list) is a 3-token path, so tok_3 on would
    be drawn from the LM prior: 23 of 50 "guide draws" did not spell the text."""
    pyro.set_rng_seed(4)
    with pytest.raises(ValueError, match="conditioned on 3 token site.*'tok_3'.*mdd_guide"):
        Predictive(tokenization_model, guide=stopping_guide, num_samples=50)(LM, MDD_)


@pytest.mark.parametrize("guide", [lookahead_guide, uniform_guide], ids=["lookahead", "uniform"])
def test_condition_on_model_and_guide_estimates_the_joint_with_the_observed_tokens(guide):
    """condition(model) and condition(guide) on tok_0 = v: the observed site's log q stays out of the weight, so
    the estimate is log sum over the tokenizations starting with v (it was 0.45-0.66 nats high)."""
    v = EXACT.tokenizations[0][0]
    truth = float(torch.logsumexp(torch.stack([lp for p, lp in zip(EXACT.tokenizations, EXACT.log_probs)
                                               if p[0] == v]), 0))
    data = {site(0): torch.tensor([v])}
    pyro.set_rng_seed(0)
    imp = Importance(poutine.condition(tokenization_model, data), poutine.condition(guide, data),
                     num_samples=300).run(LM, MDD_)
    log_w = torch.stack([w.double() for w in imp.log_weights]).flatten()
    assert close_in_se(log_w, truth) and abs(float(imp.get_log_normalizer()) - truth) < 0.1


def test_condition_on_the_model_alone_is_refused():
    data = {site(0): torch.tensor([EXACT.tokenizations[0][0]])}
    with pytest.raises(ValueError, match="'tok_0' is observed .* condition the guide on the same data"):
        Importance(poutine.condition(tokenization_model, data), lookahead_guide, num_samples=3).run(LM, MDD_)


def test_an_observed_unmasked_guide_site_is_refused():
    """A hand-written guide whose conditioned site still counts in log q."""
    v = EXACT.tokenizations[0][0]

    def leaky(lm, mdd, context="", num_particles=1):  # the guide's own site observed inside a hand-written guide
        with poutine.condition(data={"tok_0": torch.tensor([v])}):
            pyro.sample("tok_0", dist.Categorical(logits=torch.zeros(1, len(lm.vocab))), obs=torch.tensor([v]))
        return None

    data = {site(0): torch.tensor([v])}
    with pytest.raises(ValueError, match="guide's site 'tok_0' is observed .* poutine.mask"):
        Importance(poutine.condition(tokenization_model, data), leaky, num_samples=1).run(LM, MDD_)


def test_block_hiding_a_model_site_is_refused():
    with pytest.raises(ValueError, match="poutine.block hides the model's site 'tok_1'"):
        Importance(poutine.block(tokenization_model, hide=["tok_1"]), lookahead_guide, num_samples=2).run(LM, MDD_)
    # Pyro's own hide-everything block (Predictive, SVI) is no error
    with poutine.block():
        tokenization_model(LM, MDD_)


def test_trace_enum_elbo_runs_with_vectorized_particles():
    """Every site's log-prob is float64 (the deterministic "tokenization" site was float32)."""
    pyro.set_rng_seed(0)
    kw = dict(num_particles=64, vectorize_particles=True, max_plate_nesting=1)
    enum = TraceEnum_ELBO(**kw).loss(tokenization_model, lookahead_guide, LM, MDD_)
    pyro.set_rng_seed(0)
    plain = Trace_ELBO(**kw).loss(tokenization_model, lookahead_guide, LM, MDD_)
    assert math.isfinite(enum) and abs(enum - plain) < 1e-9 and enum >= -EXACT.log_marginal - 1e-9


@pytest.mark.parametrize("num_particles", [1, 3])
def test_predictive_shapes_are_as_documented(num_particles):
    """docs/pyro.md: "tokenization" is (S, N, len(text)) and "tok_{t}" (S, N), N = 1 for a lone particle."""
    pyro.set_rng_seed(0)
    out = Predictive(tokenization_model, guide=lookahead_guide, num_samples=5)(LM, MDD_, num_particles=num_particles)
    assert out["tokenization"].shape == (5, num_particles, 6) and out[site(0)].shape == (5, num_particles)
    assert all(MDD_.accepts(tuple(t for t in row if t >= 0)) for row in out["tokenization"].reshape(-1, 6).tolist())


def test_trace_graph_elbo_is_refused():
    """TraceGraph_ELBO's provenance tracking cannot follow a token through the LM (it is read as an id), so each
    choice's downstream cost left out log p: the loss rose from 5.7 to 8.2 over 60 steps on the toy LM."""
    import pyro.optim
    from pyro.infer import SVI, TraceGraph_ELBO

    svi = SVI(tokenization_model, lookahead_guide, pyro.optim.Adam({"lr": 0.05}), TraceGraph_ELBO())
    with pytest.raises(ValueError, match="TraceGraph_ELBO cannot train .* use Trace_ELBO or ReweightedWakeSleep"):
        svi.step(LM, MDD_)
