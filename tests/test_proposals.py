"""Proposals (ppl_tok.proposals): a user's proposal over out-edges swaps in, unbiased against the exact marginal."""

import math

import pytest
import torch

from ppl_tok import BigramLM, Vocabulary
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.proposals import LearnedProposal

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


def test_gradients_reach_every_parameter_of_a_parametrised_mdd_guide():
    """The logits stay torch expressions: Trace_ELBO's loss and ReweightedWakeSleep's both reach every pyro.param
    (through OverCandidates.from_lists, which once read them with .tolist() and cut the graph)."""
    import pyro
    from pyro.infer import ReweightedWakeSleep, Trace_ELBO

    from ppl_tok.model import tokenization_model
    from ppl_tok.proposals import lookahead, mdd_guide
    from toys import LM, MDD_

    def learnable(walk, i, out):
        scale = pyro.param("scale", torch.tensor(1.0, dtype=torch.float64))
        counts = walk.mdd_of(i).log_path_counts
        weight = pyro.param("count_weight", torch.tensor(0.5, dtype=torch.float64))
        return scale * lookahead(walk, i, out) + weight * torch.tensor([counts[j] for j in out.values()])

    guide = mdd_guide(learnable)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    loss = Trace_ELBO(num_particles=4).differentiable_loss(tokenization_model, guide, LM, MDD_)
    params = [pyro.param("scale").unconstrained(), pyro.param("count_weight").unconstrained()]
    grads = torch.autograd.grad(loss, params)
    assert all(g is not None and torch.isfinite(g) and g != 0 for g in grads)
    for p in params:
        p.grad = None
    ReweightedWakeSleep(num_particles=4, vectorize_particles=False).loss_and_grads(tokenization_model, guide, LM, MDD_)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and bool(p.grad != 0) for p in params)


def test_resolve_proposal_and_the_settings_record_of_a_learned_file(tmp_path):
    """One setting (name + file) for QA, perplexity and lm-eval: the guide, and a record with the file's checksum."""
    import hashlib

    import pytest

    from ppl_tok.proposals import LearnedProposal, proposal_settings, resolve_proposal, settings_guide
    from qa_toy import learned_proposal_file, toy_lm

    lm = toy_lm()
    path = learned_proposal_file(tmp_path / "q.pt", lm)
    learned = LearnedProposal.load(path)
    assert learned.step == 4 and learned.weights.tolist() != [1.0, 0.0, 0.0, 0.0]
    record = proposal_settings("learned", path)
    assert record == {"proposal": "learned", "proposal_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                      "proposal_weights": learned.weights.tolist(), "proposal_defensive": learned.defensive}
    assert proposal_settings() == {"proposal": "lookahead"} and resolve_proposal() == "lookahead"
    assert settings_guide({}) == "lookahead" and settings_guide({"proposal": "lookahead"}) == "lookahead"
    from ppl_tok.infer.importance import marginal

    direct = marginal("abcde", lm, 16, guide=learned.guide, seed=3)
    for guide in (resolve_proposal("learned", path), settings_guide(record)):
        assert marginal("abcde", lm, 16, guide=guide, seed=3).log_weights.tolist() == direct.log_weights.tolist()
    with pytest.raises(ValueError, match="go together"):
        proposal_settings("learned")
    with pytest.raises(ValueError, match="go together"):
        resolve_proposal("lookahead", path)
    assert proposal_settings("uniform") == {"proposal": "uniform"}  # every registered proposal (issue 57)
    with pytest.raises(ValueError, match="unknown proposal 'nope': expected one of lookahead, uniform, prior, "
                                         "stratified, learned"):
        proposal_settings("nope")
    with pytest.raises(ValueError, match="no learned proposal at"):
        proposal_settings("learned", tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="without its weights"):
        settings_guide({"proposal": "learned"})


@pytest.mark.parametrize("key, value, needle", [
    ("weights", ["-50", "0", "0", "0"], "'weights' holds"),
    ("weights", [1.0, 2.0], "'weights' holds .*, not 4 finite numbers"),
    ("weights", [1.0, float("inf"), 0.0, 0.0], "'weights' holds .*inf.*, not 4 finite numbers"),
    ("weights", None, "'weights' holds None"),
    ("step", "3", "'step' holds '3'"),
    ("step", -1, "'step' holds -1"),
    ("meta", [1], "'meta' holds a list"),
    ("optimizer_state", "x", "'optimizer_state' holds a str"),
])
def test_a_malformed_proposal_file_is_one_line_naming_it(tmp_path, key, value, needle):
    """Issue 56: string weights were an internal TypeError; every malformed field is one ValueError naming the file."""
    path = tmp_path / "q.pt"
    LearnedProposal().save(path)
    data = torch.load(path, weights_only=True)
    data[key] = value
    torch.save(data, path)
    with pytest.raises(ValueError, match=f"{path}: {needle}") as err:
        LearnedProposal.load(path)
    assert "\n" not in str(err.value)


def _guide_log_q(guide, trace, n):
    """``log q`` of each particle of ``trace`` under ``guide`` (replayed on the same draws)."""
    from pyro import poutine

    from ppl_tok.model import per_particle_weights
    from toys import LM, MDD_

    with per_particle_weights():
        tr = poutine.trace(poutine.replay(guide, trace=trace)).get_trace(LM, MDD_, "", num_particles=n)
    tr.compute_log_prob()
    return sum(node["log_prob"].double() for node in tr.nodes.values()
               if node["type"] == "sample" and "log_prob" in node)


def test_a_learned_step_stays_positive_in_float64_for_extreme_weights():
    """Issue 56: exp(w . f) underflowed for large w and every draw followed one path; the floor keeps each step's
    probability at least eps / K, and the probabilities still sum to 1."""
    from ppl_tok.model import ParticleWalk
    from ppl_tok.proposals import FLOOR, LearnedProposal
    from toys import LM, MDD_

    walk = ParticleWalk(LM, MDD_, "", 1)
    out = walk.out_tokens(0)
    assert len(out) > 1
    for w in ([-50.0, 0, 0, 0], [1e6, -1e6, 1e6, -1e6], [0, 0, 0, 0], [-1e300, 0, 0, 0]):
        log_q = LearnedProposal(w, defensive=0.0).step_log_probs(walk, 0, out)
        q = log_q.exp()
        assert bool(torch.isfinite(log_q).all()) and bool((q >= FLOOR / len(out) * (1 - 1e-12)).all())
        assert abs(float(q.sum()) - 1.0) < 1e-12


def test_the_defensive_mixture_is_the_path_level_mixture_and_unbiased():
    """q(v) = (1 - a) q_w(v) + a q_LA(v) for every drawn path (to 1e-9, against both components replayed on the same
    draws), and its importance weights are unbiased: mean p(v) / (q(v) p(x)) within 4 standard errors of 1."""
    from pyro import poutine

    from ppl_tok.infer.importance import model_and_guide_log_probs
    from ppl_tok.model import particle_seeds, per_particle_weights, tokenization_model
    from ppl_tok.proposals import LearnedProposal
    from toys import EXACT, LM, MDD_

    w, a, n = [-2.0, 0.5, 1.0, -0.3], 0.3, 400
    mix = LearnedProposal(w, defensive=a)
    torch.manual_seed(0)
    with particle_seeds([0]), per_particle_weights():
        trace = poutine.trace(mix.guide).get_trace(LM, MDD_, "", num_particles=n)
    log_mix = _guide_log_q(mix.guide, trace, n)
    log_w = _guide_log_q(LearnedProposal(w, defensive=0.0).guide, trace, n)
    log_la = _guide_log_q(LearnedProposal(w, defensive=1.0).guide, trace, n)
    expected = torch.logaddexp(log_w + math.log1p(-a), log_la + math.log(a))
    assert float((log_mix - expected).abs().max()) < 1e-9
    with particle_seeds([1]):
        log_p, log_q, samples = model_and_guide_log_probs(tokenization_model, mix.guide, LM, MDD_, "",
                                                          num_samples=3000)
    ratio = (log_p - log_q - EXACT.log_marginal).exp()
    z = (float(ratio.mean()) - 1.0) / (float(ratio.std()) / math.sqrt(len(ratio)))
    assert abs(z) < 4.0, z
    assert len(set(samples)) > 5  # the look-ahead's share reaches past the learned step's favourite paths


def test_a_collapsed_learned_proposal_is_flagged_and_the_mixture_does_not_collapse():
    """Issue 56: weights (-50, 0, 0, 0) drew one tokenization every time and printed a perfect ESS, unflagged."""
    from ppl_tok.infer.importance import marginal
    from toys import LM, TEXT
    from ppl_tok.proposals import LearnedProposal

    alone = marginal(TEXT, LM, 16, guide=LearnedProposal([-50.0, 0, 0, 0], defensive=0.0).guide, seed=0)
    assert alone.distinct == 1 and alone.support > 1 and alone.ess == pytest.approx(16.0)
    assert any("all 16 draws are one tokenization" in w for w in alone.warnings)
    assert alone.to_dict()["distinct_tokenizations"] == 1
    mixed = marginal(TEXT, LM, 16, guide=LearnedProposal([-50.0, 0, 0, 0], defensive=0.3).guide, seed=0)
    assert mixed.distinct > 1 and not any("one tokenization" in w for w in mixed.warnings)
