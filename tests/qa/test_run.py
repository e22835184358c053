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
