"""Adding a proposal is one registration (docs/architecture.md, "A proposal"; issue 57 item 3).

This module is that one module: it registers a toy proposal (a Pyro guide that counts its calls and otherwise
draws as :func:`~ppl_tok.proposals.uniform_guide` does) and every consumer runs it by its name with nothing else
changed: ``marginal``, ``ppl-tok marginal --proposal``, perplexity's ``--scoring canonical+rest`` (its run folder
records it) and lm-eval's ``proposal=``. Drawing as ``uniform`` does under the same seeds, its figures must equal
``uniform``'s exactly: the consumers pass the registered guide itself, nothing else. A second toy has a parameter of
its own (``draw``, declared once in its :class:`~ppl_tok.common.params.Params`): ``--proposal-param draw=...`` on the
command line, ``proposal_draw=`` in lm-eval's model arguments and the QA study's settings carry it, a run folder
stores it and refuses a resume under another value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from ppl_tok.common.params import Params, param
from ppl_tok.infer.importance import marginal, marginals
from ppl_tok.proposals import PROPOSALS, Proposal, lookahead_guide, register_proposal, uniform_guide, unregister_proposal
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


# ------------------------------------------------------------------ a proposal with a parameter of its own
@dataclass(frozen=True)
class DrawParams(Params):
    draw: str = param("uniform", "the built-in proposal it draws as, each call counted", choices=("uniform", "lookahead"))


OWN = "toy-counting-own"


def counting(params: DrawParams):
    """The guide of a parameter value: the built-in one it names, each call counted."""
    inner = uniform_guide if params.draw == "uniform" else lookahead_guide

    def guide(*args, **kwargs):
        CALLS.append(1)
        return inner(*args, **kwargs)

    return guide


@pytest.fixture
def own_proposal():
    register_proposal(Proposal(OWN, params=DrawParams, from_params=counting, doc="a test's toy with a parameter"))
    CALLS.clear()
    yield PROPOSALS[OWN]
    unregister_proposal(OWN)


def test_its_parameter_is_checked_recorded_and_read_back(own_proposal):
    from ppl_tok.proposals import proposal_settings, settings_guide

    assert proposal_settings(OWN) == {"proposal": OWN, "proposal_params": {"draw": "uniform"}}
    record = proposal_settings(OWN, params={"draw": "lookahead"})  # as --proposal-param and --model_args give it
    assert record == {"proposal": OWN, "proposal_params": {"draw": "lookahead"}}
    lm = toy_lm()
    mine = marginals(["ab ba"], lm, 8, guide=settings_guide(record))
    assert CALLS and mine[0].log_weights.tolist() == marginals(["ab ba"], lm, 8, guide="lookahead")[0].log_weights.tolist()
    with pytest.raises(ValueError, match=r"^draw: expected one of uniform, lookahead, got 'prior'$"):
        proposal_settings(OWN, params={"draw": "prior"})
    with pytest.raises(ValueError, match=rf"proposal '{OWN}' takes no parameter steps \(its parameters: draw\)"):
        proposal_settings(OWN, params={"steps": "3"})
    with pytest.raises(ValueError, match=r"proposal 'uniform' takes no parameter draw \(its parameters: none\)"):
        proposal_settings("uniform", params={"draw": "uniform"})


def test_the_command_line_and_a_resumed_perplexity_folder_take_its_flag(own_proposal, tmp_path, capsys):
    from ppl_tok.cli.main import main

    doc = tmp_path / "d.txt"
    doc.write_text("ab ba\na b\n", encoding="utf-8")
    done = _toy_backend()
    base = ["perplexity", str(doc), "--split", "lines", "--backend", "toy-proposal-test", "--model", "x",
            "--scoring", "canonical+rest", "--samples", "8", "--json"]
    try:
        figures = {}
        for draw in ("lookahead", "uniform"):
            out = tmp_path / draw
            argv = [*base, "--proposal", OWN, "--proposal-param", f"draw={draw}", "--out", str(out)]
            assert main(argv) in (0, None)
            figures[draw] = json.loads(capsys.readouterr().out)["bits_per_byte"]
            stored = json.loads((out / "run.json").read_text())
            assert stored["proposal"] == OWN and stored["proposal_params"] == {"draw": draw}
            assert main(argv) in (0, None)  # resumed under the same parameter
            assert json.loads(capsys.readouterr().out)["bits_per_byte"] == figures[draw]
        uniform = tmp_path / "built-in"
        assert main([*base, "--proposal", "uniform", "--out", str(uniform)]) in (0, None)
        assert json.loads(capsys.readouterr().out)["bits_per_byte"] == figures["uniform"] != figures["lookahead"]
        assert main([*base, "--proposal", OWN, "--proposal-param", "draw=uniform", "--out",
                     str(tmp_path / "lookahead")]) == 2  # another value: the resume refused, naming it
        assert "proposal_params" in capsys.readouterr().err
        assert main(["marginal", "ab ba", "--backend", "toy-proposal-test", "--model", "x", "--proposal", OWN,
                     "--proposal-param", "draw=bogus"]) == 2
        assert "draw: expected one of uniform, lookahead, got 'bogus'" in capsys.readouterr().err
        assert main(["marginal", "ab ba", "--backend", "toy-proposal-test", "--model", "x", "--proposal", OWN,
                     "--proposal-param", "draw=uniform", "--samples", "8", "--seed", "3", "--json"]) in (0, None)
        own = json.loads(capsys.readouterr().out)["log_marginal"]
        assert main(["marginal", "ab ba", "--backend", "toy-proposal-test", "--model", "x", "--proposal", "uniform",
                     "--samples", "8", "--seed", "3", "--json"]) in (0, None)
        assert json.loads(capsys.readouterr().out)["log_marginal"] == own
    finally:
        done()


def test_lm_eval_takes_its_parameter_as_a_model_argument(own_proposal):
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import PPLTokLM
    from ppl_tok.scorings import Pair

    pairs = [Pair("ab", " ab"), Pair("ab", " b", choice=1)]
    mine = PPLTokLM(lm=toy_lm(), scoring="canonical+rest", proposal=OWN, proposal_draw="lookahead",
                    num_samples=8).score_pairs(pairs)
    assert CALLS
    theirs = PPLTokLM(lm=toy_lm(), scoring="canonical+rest", proposal="lookahead", num_samples=8).score_pairs(pairs)
    assert mine == theirs


def test_the_qa_study_records_and_reads_its_parameter(own_proposal, tmp_path):
    from ppl_tok.proposals import proposal_settings
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.run import run_study, study_settings
    from qa_toy import write_questions

    study = load_study(str(write_questions(tmp_path / "test.jsonl", 3, seed=1)),
                       tune=write_questions(tmp_path / "tune.jsonl", 2, seed=2))
    records = {}
    for name, values in ((OWN, {"draw": "lookahead"}), ("lookahead", None)):
        settings = study_settings(study, model="toy", samples=4, seed=0, proposal=proposal_settings(name, params=values))
        store = run_study(study, toy_lm(), tmp_path / name, settings, batch_questions=2, progress=False)
        records[name] = sorted(json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True)
                               for r in store.records if r["kind"] == "is")
    stored = json.loads((tmp_path / OWN / "run.json").read_text())
    assert stored["proposal_params"] == {"draw": "lookahead"}
    assert CALLS and records[OWN] and records[OWN] == records["lookahead"]
