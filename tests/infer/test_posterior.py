"""Posteriors over tokenizations (ppl_tok.infer.posterior): against the exact posterior of a toy LM, with diagnostics."""

import math

import pytest

from ppl_tok.infer.diagnostics import CERTIFIED, UNCALIBRATED
from ppl_tok.infer.importance import marginal
from ppl_tok.infer.posterior import TokenizationPosterior, tokenization_posterior
from ppl_tok.proposals import mdd_guide
from toys import EXACT, LM, TEXT



def test_posteriors_carry_diagnostics_and_the_certified_mass_they_cover():
    exact = tokenization_posterior(TEXT, LM, "exact")
    assert exact.statement == CERTIFIED and exact.covered_log_mass == pytest.approx(EXACT.log_marginal)
    good = tokenization_posterior(TEXT, LM, "lookahead", 2000, seed=0)
    assert good.statement == UNCALIBRATED and good.ess > 100 and good.khat is not None
    # 2000 draws list every tokenization, so the certified lower bound is the exact marginal and an estimate a hair
    # below it is certainly (slightly) low: since issue 56 that is said at any gap, and it is the only warning here
    assert all("below the certified lower bound" in w for w in good.warnings)
    listed = sum(math.exp(float(lp)) for v, lp in zip(EXACT.tokenizations, EXACT.log_probs) if v in good.tokenizations)
    assert good.covered_log_mass == pytest.approx(math.log(listed), abs=1e-5)  # the listed ones' exact mass
    assert good.covered_log_mass <= EXACT.log_marginal + 1e-6
    # a proposal that avoids the LM's mass: far-off posterior probabilities, and the posterior says so
    anti = mdd_guide(lambda walk, i, out: -3 * walk.edge_log_probs(i), "anti")
    bad = tokenization_posterior(TEXT, LM, anti, 256, seed=0)
    assert bad.warnings and any("below the certified lower bound" in w for w in bad.warnings)
    assert bad.covered_log_mass < EXACT.log_marginal - 3  # the list is known to cover little of the mass
    d = bad.to_dict(top=3)
    assert d["warnings"] == list(bad.warnings) and d["statement"] == UNCALIBRATED and "covered_log_mass" in d
    assert "warning" in repr(bad)


def test_importance_posterior_converges_to_the_exact_one():
    exact = tokenization_posterior(TEXT, LM, "exact")
    truth = dict(zip(exact.tokenizations, exact.probs.tolist()))
    assert exact.probs.sum().item() == pytest.approx(1.0)
    for source in ("lookahead", "uniform", "stratified"):
        est = tokenization_posterior(TEXT, LM, source, 2000, seed=0)
        assert est.probs.sum().item() == pytest.approx(1.0)
        l1 = sum(abs(truth[v] - p) for v, p in zip(est.tokenizations, est.probs.tolist()))
        l1 += sum(p for v, p in truth.items() if v not in est.tokenizations)
        assert l1 < 0.15, source
    strat = marginal(TEXT, LM, 16, guide="stratified", search_budget=4, seed=0)
    post = TokenizationPosterior.from_importance(strat)
    assert set(strat.exact_tokenizations) <= set(post.tokenizations)
    assert post.covered_log_mass >= strat.exact_log_mass - 1e-9  # it lists every enumerated tokenization


def test_tokenization_posterior_accepts_any_guide():
    tempered = mdd_guide(lambda walk, i, out: walk.edge_log_probs(i) / 2, "tempered")
    post = tokenization_posterior(TEXT, LM, tempered, 2000, seed=0)
    assert post.source == "tempered"
    truth = dict(zip(EXACT.tokenizations, EXACT.posterior().tolist()))
    assert sum(abs(truth[v] - p) for v, p in zip(post.tokenizations, post.probs.tolist())) < 0.15


def test_an_overstated_posterior_probability_warns_and_the_warning_is_true():
    """p(v | x) <= p(v | c) / L: a listed probability above e times that bound (and 0.05 above it) warns."""
    truth = dict(zip(EXACT.tokenizations, EXACT.posterior().tolist()))
    warned = 0
    for seed in range(30):
        post = tokenization_posterior(TEXT, LM, "uniform", 8, seed=seed)
        overstated = [(v, p) for v, p in zip(post.tokenizations, post.probs.tolist())
                      if p > math.e * truth[v] and p - truth[v] > 0.05]
        flagged = any("certified upper bound" in w for w in post.warnings)
        if flagged:  # a fact: some listed probability is more than e times its true value
            assert overstated
            warned += 1
    assert warned >= 3  # N = 8 uniform draws overstate rare tokenizations often


@pytest.mark.slow
def test_smollm2_the_issues_misleading_posterior_warns(smollm2):
    """Issue 27: the look-ahead (seed 1) gave " Tokens"'s second tokenization 0.263 against an exact 0.00424."""
    post = tokenization_posterior(" Tokens", smollm2, "lookahead", 256, seed=1)
    assert post.probs[1] > 0.1 and any("certified upper bound" in w for w in post.warnings)
