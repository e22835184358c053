"""The questions' context log-probabilities of a QA run (ppl_tok.qa.contexts): computed, resumed, read back."""

import numpy as np
import pytest

import ppl_tok.lm.cards
from ppl_tok.cli.main import main
from ppl_tok.common.jsonl_store import StoreError
from ppl_tok.qa.contexts import compute_context_log_probs, context_folder, read_context_log_probs
from ppl_tok.qa.data import load_study
from qa_toy import toy_lm, write_questions


@pytest.fixture
def toy_run(tmp_path, monkeypatch, capsys):
    lm = toy_lm(0)
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda spec, **kw: lm)
    test = write_questions(tmp_path / "test.jsonl", 4, seed=1)
    run = tmp_path / "run"
    assert main(["qa", "run", "--dataset", str(test), "--model", "toy", "--samples", "2", "--out", str(run),
                 "--json"]) == 0
    capsys.readouterr()
    return run, load_study(str(test)), lm


def test_context_folder_names_the_method(tmp_path):
    assert context_folder(tmp_path, "prefix") == tmp_path / "contexts-prefix"
    with pytest.raises(ValueError, match="^context method must be one of canonical, prefix, got 'joint'$"):
        context_folder(tmp_path, "joint")


def test_canonical_contexts_are_the_canonical_log_probs_and_resume(toy_run):
    run, study, lm = toy_run
    ids = [q.id for q in study.splits["test"]]
    with pytest.raises(StoreError, match=r"no context log-probabilities \(canonical\) for this run; compute them "
                                         r"with `ppl-tok qa contexts"):
        read_context_log_probs(run, "canonical", "test", ids)
    seen = []
    compute_context_log_probs(run, study, lm, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    want = [lm.canonical_log_prob(q.context) for q in study.splits["test"]]
    assert np.allclose(read_context_log_probs(run, "canonical", "test", ids), want)
    before = lm.stats.forwards
    compute_context_log_probs(run, study, lm)  # resumed: every question is stored, no forward runs
    assert lm.stats.forwards == before
    assert len((context_folder(run, "canonical") / "contexts.jsonl").read_text().splitlines()) == 4
    with pytest.raises(StoreError, match=f"test question 1 is {ids[1]!r} there but 'other' in the run"):
        read_context_log_probs(run, "canonical", "test", [ids[0], "other"])
    with pytest.raises(StoreError, match=r"test question 4 \('extra'\) has no context log-probability yet"):
        read_context_log_probs(run, "canonical", "test", ids + ["extra"])
    with pytest.raises(ValueError, match="the run has no split 'tune'"):
        compute_context_log_probs(run, study, lm, splits=("tune",))
