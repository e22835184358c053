"""Scoring a batch of questions (ppl_tok.qa.run.score_batch) against exact answers on a toy LM."""

import math

import pytest
import torch

from ppl_tok.datasets import Question, continuation
from ppl_tok.infer.diagnostics import log_mean_exp
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.importance import marginal
from ppl_tok.common.seeds import pair_seed
from ppl_tok.qa.run import score_batch
from ppl_tok.qa.store import decode_log, decode_logs
from qa_toy import toy_lm

QUESTIONS = [Question("toy", "q0", "ab cd", ("abc", "ba", "gh"), 0),
             Question("toy", "q1", "ef", ("cdef", "a"), 1)]
SETTINGS = {"samples": 16, "seed": 7, "exact_tolerance": 1e-9, "exact_budget": 100_000, "most_likely_time": 5.0}


def test_exact_and_is_records_match_the_exact_marginal_and_one_at_a_time_runs():
    lm = toy_lm(3)
    batch = [("test", i, q) for i, q in enumerate(QUESTIONS)]
    records = score_batch(lm, batch, SETTINGS, [("is", "exact")] * len(batch))
    by_kind = {(r["kind"], r["id"]): r for r in records}
    for q in QUESTIONS:
        for j, choice in enumerate(q.choices):
            exact = exact_marginal(continuation(choice), lm, context=q.context).log_marginal
            bracket = by_kind[("exact", q.id)]["choices"][j]
            assert bracket["closed"]
            assert decode_log(bracket["lower"]) == pytest.approx(exact, abs=1e-6)
            assert decode_log(bracket["upper"]) == pytest.approx(exact, abs=1e-6)
            rec = by_kind[("is", q.id)]["choices"][j]
            log_w = torch.tensor(decode_logs(rec["log_p"])) - torch.tensor(decode_logs(rec["log_q"]))
            seed = pair_seed(SETTINGS["seed"], "test", q.id, j)
            alone = marginal(continuation(choice), lm, SETTINGS["samples"], context=q.context, seed=seed)
            assert rec["seed"] == seed  # the batched run draws what the pair draws alone
            assert log_mean_exp(log_w) == pytest.approx(alone.log_marginal, abs=1e-5)  # float32 rows
            assert math.isfinite(log_mean_exp(log_w))


def test_a_learned_proposal_scores_the_is_records_and_a_different_file_is_refused_on_resume(tmp_path):
    """settings' proposal (a learned file): each pair's particles are those of marginals(..., guide=learned)."""
    from ppl_tok.infer.importance import marginals
    from ppl_tok.proposals import LearnedProposal, proposal_settings
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.run import study_settings
    from ppl_tok.qa.store import ScoreStore, SettingsMismatchError
    from qa_toy import learned_proposal_file, write_questions

    lm = toy_lm(3)
    path = learned_proposal_file(tmp_path / "q.pt", lm)
    settings = {**SETTINGS, **proposal_settings("learned", path)}
    batch = [("test", i, q) for i, q in enumerate(QUESTIONS)]
    learned = score_batch(lm, batch, settings, [("is",)] * len(batch))
    lookahead = score_batch(lm, batch, SETTINGS, [("is",)] * len(batch))
    guide = LearnedProposal.load(path).guide
    for rec, other, q in zip(learned, lookahead, QUESTIONS):
        seeds = [pair_seed(SETTINGS["seed"], "test", q.id, j) for j in range(len(q.choices))]
        direct = marginals([continuation(c) for c in q.choices], lm, SETTINGS["samples"],
                           contexts=[q.context] * len(q.choices), guide=guide, seeds=seeds)
        for choice, r in zip(rec["choices"], direct):
            assert decode_logs(choice["log_q"]) == pytest.approx(r.log_q.tolist(), abs=1e-9)
            assert choice["samples"] == [list(v) for v in r.samples]
        assert [c["log_q"] for c in rec["choices"]] != [c["log_q"] for c in other["choices"]]
    study = load_study(str(write_questions(tmp_path / "t.jsonl", 2)), None)
    first = study_settings(study, model="toy", samples=4, seed=0, proposal=proposal_settings("learned", path))
    assert first["proposal"] == "learned" and first["proposal_sha256"] == settings["proposal_sha256"]
    ScoreStore.open(tmp_path / "run", first).close()
    other = learned_proposal_file(tmp_path / "r.pt", lm, steps=5)
    with pytest.raises(SettingsMismatchError, match="proposal_sha256"):
        ScoreStore.open(tmp_path / "run", study_settings(study, model="toy", samples=4, seed=0,
                                                          proposal=proposal_settings("learned", other)))
