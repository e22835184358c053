"""bench diagnostics: the stored runs are re-scored without the LM; precision and recall counted right."""

import json

import pytest

import ppl_tok.cli.common
from ppl_tok import BigramLM, Vocabulary
from benchmarks import diagnostics as diag
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.importance import marginal
from ppl_tok.proposals import mdd_guide
from benchmarks.__main__ import run as bench_main

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb"])
TEXT = "ababba"
LM = BigramLM.random(VOCAB, seed=5, bos_id=0)


def _records():
    truth = exact_marginal(TEXT, LM).log_marginal
    anti = mdd_guide(lambda walk, i, out: -3 * walk.edge_log_probs(i), "anti")
    runs = [(marginal(TEXT, LM, 256, seed=s), "lookahead", s) for s in range(3)]
    runs += [(marginal(TEXT, LM, 256, guide=anti, seed=s), "uniform", s) for s in range(2)]  # far off: bad
    runs += [(marginal(TEXT, LM, 16, guide="stratified", search_budget=10_000, seed=0), "stratified", 0)]
    return [diag._record(r, method, seed, "", truth) for r, method, seed in runs]


def test_analyze_counts_precision_and_recall_of_each_warning(tmp_path):
    rows = _records()
    report = diag.analyze(rows, num_samples=256)
    assert report["runs"] == 5 and report["bad"] == 2  # the two anti runs; the stratified N=16 one filtered out
    # look-ahead seed 0 is 0.072 nats below its certified lower bound (0.083 off): a fact, warned since issue 56
    assert report["warnings"]["below-lower"] == {"flagged": 3, "true_positives": 2, "precision": 2 / 3,
                                                 "recall": 1.0}
    assert report["warnings"]["any warning"]["recall"] == 1.0 and not report["missed"]
    assert report["by_method"]["uniform"]["bad"] == 2 and report["by_method"]["lookahead"]["bad"] == 0
    full = diag.analyze(rows)
    assert full["exact_or_certified_runs"] >= 1 and full["warned_on_exact_or_certified"] == 0
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"partial', encoding="utf-8")
    assert len(diag.load_records(path)) == len(rows)  # an interrupted last line is skipped


def test_cli_rescore_reads_stored_runs_without_the_lm(tmp_path, capsys, monkeypatch):
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records()), encoding="utf-8")
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: pytest.fail("--rescore must not load an LM"))
    assert bench_main(["diagnostics", "rescore", "--records", str(path), "--samples", "256", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bad"] == 2 and data["warnings"]["any warning"]["precision"] == pytest.approx(2 / 3)
    assert bench_main(["diagnostics", "rescore", "--records", str(path), "--samples", "256"]) == 0
    assert "below-lower" in capsys.readouterr().out


def test_the_learned_method_needs_its_file_before_the_lm_loads(monkeypatch, tmp_path):
    import ppl_tok.lm.cards
    from benchmarks import diagnostics as diag

    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: pytest.fail("the LM must not load"))
    with pytest.raises(ValueError, match="needs its proposal file"):
        diag.run(methods=("lookahead", "learned"), records=tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="no learned proposal at"):
        diag.run(proposal_file=tmp_path / "missing.pt", records=tmp_path / "r.jsonl")


def test_a_stored_collapsed_run_is_rescored_with_its_distinct_draws():
    from benchmarks import diagnostics as diag

    run = {"log_marginal": -24.0456, "statement": "uncalibrated", "ess": 64.0, "log_se": 0.0, "num_nonzero": 64,
           "num_samples": 64, "certified_lower": -24.0456, "bracket": None, "method": "learned"}
    assert diag.checks_of({**run, "distinct": 1, "support": 12}) == ["one-tokenization"]
    assert diag.checks_of(run) == []  # runs stored before the field: no claim
