"""``python -m benchmarks lm-eval`` on the toy LM: the figures are the model's own scores, the ratios are ratios."""

import json

import pytest

import ppl_tok.cli.common
from ppl_tok.datasets import read_multiple_choice
from qa_toy import toy_lm, write_questions
from benchmarks.__main__ import run as bench_main

pytest.importorskip("lm_eval", reason="needs the lm-eval extra")


def test_bench_lm_eval_on_the_toy(tmp_path, capsys, monkeypatch):
    from benchmarks.lm_eval import bench_loglikelihood
    from ppl_tok.integrations.lm_eval import Pair, PPLTokLM

    lm = toy_lm(2)
    path = write_questions(tmp_path / "q.jsonl", 6, seed=3)
    qs = read_multiple_choice(path)
    r = bench_loglikelihood(lm, qs, batch=4)
    pairs = [Pair(q.context, " " + c, 0, (q.id,), j) for q in qs for j, c in enumerate(q.choices)]
    moved = [b - a for a, b in zip(PPLTokLM(lm=lm).score_pairs(pairs),
                                   PPLTokLM(lm=lm, scoring="conditional").score_pairs(pairs))]
    assert r["requests"] == 18 and r["moved_over_0.01_nats"] == sum(abs(m) > 0.01 for m in moved)
    assert r["spanning_join"] >= 0 and r["ratio"] == pytest.approx(r["conditional_seconds"] / r["canonical_seconds"])
    assert 0 <= r["conditional_accuracy"]["ci95"][0] <= r["conditional_accuracy"]["mean"] <= 1
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: lm)
    assert bench_main(["lm-eval", "--data", str(path), "--questions", "3", "--prompts", "2", "--max-gen-toks", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["loglikelihood"]["requests"] == 9 and out["generate_until"]["budget_bytes"] == 8
    assert out["generate_until"]["sampled_ratio"] > 0 and out["generate_until"]["greedy_ratio"] > 0
