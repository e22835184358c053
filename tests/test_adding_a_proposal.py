"""Adding a proposal is one registration (docs/architecture.md, "A proposal"; issue 57 item 3).

This module is that one module: it registers a toy proposal (a Pyro guide that counts its calls and otherwise
draws as :func:`~ppl_tok.proposals.uniform_guide` does) and every consumer runs it by its name with nothing else
changed: ``marginal``, ``ppl-tok marginal --proposal``, perplexity's ``--scoring canonical+rest`` (its run folder
records it) and lm-eval's ``proposal=``. Drawing as ``uniform`` does under the same seeds, its figures must equal
``uniform``'s exactly: the consumers pass the registered guide itself, nothing else.
"""

from __future__ import annotations

import json

import pytest

from ppl_tok.infer.importance import marginal, marginals
from ppl_tok.proposals import PROPOSALS, Proposal, register_proposal, uniform_guide, unregister_proposal
from qa_toy import toy_lm

NAME = "toy-counting-uniform"
CALLS: list[int] = []


def counting_uniform(*args, **kwargs):
    """A user's guide: uniform over the MDD's paths, each call counted."""
    CALLS.append(1)
    return uniform_guide(*args, **kwargs)


@pytest.fixture
def toy_proposal():
    register_proposal(Proposal(NAME, counting_uniform, doc="a test's toy: uniform, counted"))
    CALLS.clear()
    yield PROPOSALS[NAME]
    unregister_proposal(NAME)


def test_registered_then_gone_and_a_built_in_name_needs_replace(toy_proposal):
    assert NAME in PROPOSALS and toy_proposal.guide is counting_uniform
    with pytest.raises(ValueError, match="'uniform' is already registered"):
        register_proposal(Proposal("uniform", counting_uniform))
    unregister_proposal(NAME)
    with pytest.raises(ValueError, match=f"unknown proposal '{NAME}': expected one of lookahead, uniform"):
        marginal("ab", toy_lm(), 4, guide=NAME)
    register_proposal(Proposal(NAME, counting_uniform))


def test_marginal_runs_it_by_name(toy_proposal):
    lm = toy_lm()
    mine = marginals(["ab ba", "a b"], lm, 16, guide=NAME)
    assert CALLS and [r.proposal for r in mine] == [NAME, NAME]
    theirs = marginals(["ab ba", "a b"], lm, 16, guide="uniform")
    assert [r.log_weights.tolist() for r in mine] == [r.log_weights.tolist() for r in theirs]


def _toy_backend():
    from ppl_tok.lm.backends import register_backend, unregister_backend

    register_backend("toy-proposal-test", lambda spec, **options: toy_lm(), replace=True)
    return lambda: unregister_backend("toy-proposal-test")


def test_the_command_line_and_perplexity_canonical_rest_run_it(toy_proposal, tmp_path, capsys):
    from ppl_tok.cli.main import main

    doc = tmp_path / "d.txt"
    doc.write_text("ab ba\na b\n", encoding="utf-8")
    done = _toy_backend()
    try:
        runs = {}
        for proposal in (NAME, "uniform"):
            out = tmp_path / proposal
            assert main(["perplexity", str(doc), "--split", "lines", "--backend", "toy-proposal-test", "--model", "x",
                         "--scoring", "canonical+rest", "--proposal", proposal, "--samples", "8", "--out", str(out),
                         "--json"]) in (0, None)
            runs[proposal] = json.loads(capsys.readouterr().out)
            assert json.loads((out / "run.json").read_text())["proposal"] == proposal  # recorded for the resume
        assert CALLS
        assert runs[NAME]["bits_per_byte"] == runs["uniform"]["bits_per_byte"]
        assert main(["marginal", "ab ba", "--backend", "toy-proposal-test", "--model", "x", "--proposal", NAME,
                     "--json"]) in (0, None)
        assert json.loads(capsys.readouterr().out)["proposal"] == NAME
    finally:
        done()


def test_lm_eval_runs_it_as_proposal(toy_proposal):
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import PPLTokLM
    from ppl_tok.scorings import Pair

    pairs = [Pair("ab", " ab"), Pair("ab", " b", choice=1)]
    mine = PPLTokLM(lm=toy_lm(), scoring="canonical+rest", proposal=NAME, num_samples=8).score_pairs(pairs)
    assert CALLS
    theirs = PPLTokLM(lm=toy_lm(), scoring="canonical+rest", proposal="uniform", num_samples=8).score_pairs(pairs)
    assert mine == theirs


def test_the_qa_study_runs_it(toy_proposal, tmp_path):
    from ppl_tok.proposals import proposal_settings
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.run import run_study, study_settings
    from qa_toy import write_questions

    study = load_study(str(write_questions(tmp_path / "test.jsonl", 3, seed=1)),
                       tune=write_questions(tmp_path / "tune.jsonl", 2, seed=2))
    records = {}
    for proposal in (NAME, "uniform"):
        settings = study_settings(study, model="toy", samples=4, seed=0, proposal=proposal_settings(proposal))
        store = run_study(study, toy_lm(), tmp_path / proposal, settings, batch_questions=2, progress=False)
        assert json.loads((tmp_path / proposal / "run.json").read_text())["proposal"] == proposal
        records[proposal] = sorted(json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True)
                                   for r in store.records if r["kind"] == "is")
    assert CALLS and records[NAME] and records[NAME] == records["uniform"]
