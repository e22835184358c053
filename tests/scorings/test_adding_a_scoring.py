"""Adding a scoring is one module and one registration (docs/architecture.md, "Adding a scoring").

This module is that one module: it defines a toy scoring, registers it, and every consumer runs it by its
name with nothing else changed: perplexity (Python, its resumable run folder and the command line), lm-eval's
``loglikelihood`` and ``loglikelihood_rolling``, and the QA study's classifiers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence

import pytest

from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.scorings import (DOCUMENT, PAIR, QUESTION, DocumentScore, Pair, PairScore, Scoring, ScoringConfig,
                              names, register, scoring, unregister)
from qa_toy import toy_lm

LOG256 = math.log(256)


class UniformBytes(Scoring):
    """Every byte 1/256, whatever the LM: ``log p(x | c) = -|x| log 256`` (figures a test can know)."""

    name = "toy-uniform-bytes"
    estimator = "a test's toy: every byte 1/256 (tests/scorings/test_adding_a_scoring.py)"
    levels = (DOCUMENT, PAIR, QUESTION)
    doc = "-|x| log 256"
    classifiers = ("toy-uniform-bytes",)
    settings_fields = ("seed",)

    def score_documents(self, lm, docs, config, *, on_bytes: Callable[[int], None] | None = None
                        ) -> list[DocumentScore]:
        out = []
        for d in docs:
            ll = -count_bytes(d.text) * LOG256
            out.append(DocumentScore(d.index, count_bytes(d.text), count_words(d.text), len(lm.canonical(d.text)), 1,
                                     log_likelihood=ll, canonical=lm.canonical_log_prob(d.text), lower=ll, upper=ll))
        return out

    def score_pairs(self, lm, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        return [PairScore(-count_bytes(p.continuation) * LOG256) for p in pairs]


@pytest.fixture
def toy_scoring():
    register(UniformBytes)
    yield scoring(UniformBytes.name, DOCUMENT)
    unregister(UniformBytes.name)


def test_registered_at_every_level_and_then_gone(toy_scoring):
    assert isinstance(toy_scoring, UniformBytes)
    assert all(UniformBytes.name in names(level) for level in (DOCUMENT, PAIR, QUESTION))
    unregister(UniformBytes.name)
    with pytest.raises(ValueError, match="unknown scoring 'toy-uniform-bytes'"):
        scoring(UniformBytes.name, DOCUMENT)
    register(UniformBytes)


def test_perplexity_runs_it_into_a_folder_and_resumes(toy_scoring, tmp_path):
    from ppl_tok.perplexity import corpus_from_texts
    from ppl_tok.perplexity.run import run_perplexity

    lm = toy_lm()
    corpus = corpus_from_texts(["ab ba", "a b"])
    config = ScoringConfig(UniformBytes.name, seed=3)
    scores = run_perplexity(lm, corpus, config, out=tmp_path / "run", progress=False)
    assert [s.log_likelihood for s in scores] == [-5 * LOG256, -3 * LOG256]
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored["scoring"] == UniformBytes.name and stored["seed"] == 3  # its own settings, recorded
    again = run_perplexity(lm, corpus, config, out=tmp_path / "run", progress=False)
    assert [s.to_record() for s in again] == [s.to_record() for s in scores]
    with pytest.raises(ValueError, match="seed"):  # another setting of the toy: refused on resume
        run_perplexity(lm, corpus, ScoringConfig(UniformBytes.name, seed=4), out=tmp_path / "run", progress=False)


def test_the_command_line_offers_it(toy_scoring, tmp_path, capsys):
    from ppl_tok.cli.main import main
    from ppl_tok.lm.backends import register_backend, unregister_backend

    doc = tmp_path / "d.txt"
    doc.write_text("ab ba", encoding="utf-8")
    register_backend("toy-scoring-test", lambda spec, **options: toy_lm())
    try:
        code = main(["perplexity", str(doc), "--backend", "toy-scoring-test", "--model", "x", "--scoring",
                     UniformBytes.name, "--json"])
    finally:
        unregister_backend("toy-scoring-test")
    assert code in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["bits_per_byte"] == pytest.approx(8.0)


def test_lm_eval_scores_requests_and_documents_with_it(toy_scoring):
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import PPLTokLM

    model = PPLTokLM(lm=toy_lm(), scoring=UniformBytes.name)
    assert model.score_pairs([Pair("ab", " ab"), Pair("ab", " b", choice=1)]) == [-3 * LOG256, -2 * LOG256]

    class Request:
        args = ("ab ba",)

    assert model.loglikelihood_rolling([Request()], disable_tqdm=True) == [-5 * LOG256]


def test_the_qa_study_stores_and_classifies_with_it(toy_scoring, tmp_path):
    from ppl_tok.datasets import continuation
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.report import evaluate
    from ppl_tok.qa.run import run_study, study_settings
    from qa_toy import write_questions

    test = write_questions(tmp_path / "test.jsonl", 6, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", 3, seed=2)
    study = load_study(str(test), tune=tune)
    settings = study_settings(study, model="toy", samples=4, seed=0, scores=[UniformBytes.name])
    store = run_study(study, toy_lm(), tmp_path / "run", settings, batch_questions=2, progress=False)
    mine = [r for r in store.records if r["kind"] == UniformBytes.name]
    assert len(mine) == 9  # every question of both splits, beside the "is" records
    report = evaluate(tmp_path / "run", runs=4, resamples=100)
    for split, questions in study.splits.items():
        shortest = [min(range(len(q.choices)), key=lambda j: len(continuation(q.choices[j]).encode()))
                    for q in questions]
        want = sum(s == q.label for s, q in zip(shortest, questions)) / len(questions)
        assert report["accuracy"][UniformBytes.name][split] == pytest.approx(want)
