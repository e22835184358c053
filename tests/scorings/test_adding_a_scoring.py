"""Adding a scoring is one module and one registration (docs/architecture.md, "Adding a scoring").

This module is that one module: it defines a toy scoring, registers it, and every consumer runs it by its
name with nothing else changed: perplexity (Python, its resumable run folder and the command line), lm-eval's
``loglikelihood`` and ``loglikelihood_rolling``, and the QA study's classifiers; and a question-level toy with a
QA record of its own, stored and classified through its own hooks, runs through ``qa run`` and ``qa report``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from ppl_tok.common.arguments import positive
from ppl_tok.common.counts import count_bytes, count_words
from ppl_tok.common.params import Params, param
from ppl_tok.scorings import (DOCUMENT, PAIR, QUESTION, DocumentScore, Pair, PairScore, Scoring, ScoringConfig,
                              names, register, scoring, unregister)
from ppl_tok.scorings.records import is_nat, question_record
from qa_toy import toy_lm

LOG2 = math.log(2)


@dataclass(frozen=True)
class UniformBytesParams(Params):
    """The toy's own parameter: what a byte costs."""

    bits: float = param(8.0, "bits per byte", flag="--toy-bits", type=positive)


class UniformBytes(Scoring):
    """Every byte costs ``bits`` bits, whatever the LM: ``log p(x | c) = -|x| bits log 2`` (figures a test can know)."""

    name = "toy-uniform-bytes"
    estimator = "a test's toy: every byte 2^-bits (tests/scorings/test_adding_a_scoring.py)"
    levels = (DOCUMENT, PAIR, QUESTION)
    doc = "-|x| bits log 2"
    classifiers = ("toy-uniform-bytes",)
    params = UniformBytesParams

    def score_documents(self, lm, docs, config, *, on_bytes: Callable[[int], None] | None = None
                        ) -> list[DocumentScore]:
        out = []
        for d in docs:
            ll = -count_bytes(d.text) * config.params.bits * LOG2
            out.append(DocumentScore(d.index, count_bytes(d.text), count_words(d.text), len(lm.canonical(d.text)), 1,
                                     log_likelihood=ll, canonical=lm.canonical_log_prob(d.text), lower=ll, upper=ll))
        return out

    def score_pairs(self, lm, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        return [PairScore(-count_bytes(p.continuation) * config.params.bits * LOG2) for p in pairs]


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
    config = ScoringConfig(UniformBytes.name, bits=4.0)
    scores = run_perplexity(lm, corpus, config, out=tmp_path / "run", progress=False)
    assert [s.log_likelihood for s in scores] == [-5 * 4 * LOG2, -3 * 4 * LOG2]
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored["scoring"] == UniformBytes.name and stored["bits"] == 4.0  # its own parameter, recorded
    again = run_perplexity(lm, corpus, config, out=tmp_path / "run", progress=False)
    assert [s.to_record() for s in again] == [s.to_record() for s in scores]
    with pytest.raises(ValueError, match="bits: folder has 4.0, this run has 8.0"):  # refused on resume
        run_perplexity(lm, corpus, ScoringConfig(UniformBytes.name), out=tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match=r"scoring 'toy-uniform-bytes' takes no parameter num_samples \(its "
                                         r"parameters: bits\)"):
        ScoringConfig(UniformBytes.name, num_samples=8)
    with pytest.raises(ValueError, match=r"^bits \(--toy-bits\): expected a finite number > 0, got '0\.0'$"):
        ScoringConfig(UniformBytes.name, bits=0.0)


def _perplexity(doc, *flags):
    from ppl_tok.cli.main import main
    from ppl_tok.lm.backends import register_backend, unregister_backend

    register_backend("toy-scoring-test", lambda spec, **options: toy_lm())
    try:
        return main(["perplexity", str(doc), "--backend", "toy-scoring-test", "--model", "x", "--scoring",
                     UniformBytes.name, "--json", *flags])
    finally:
        unregister_backend("toy-scoring-test")


def test_the_command_line_offers_it_with_its_flag_and_resumes_its_folder(toy_scoring, tmp_path, capsys):
    doc = tmp_path / "d.txt"
    doc.write_text("ab ba", encoding="utf-8")
    assert _perplexity(doc) in (0, None)
    assert json.loads(capsys.readouterr().out)["bits_per_byte"] == pytest.approx(8.0)
    assert _perplexity(doc, "--toy-bits", "3", "--out", str(tmp_path / "run")) in (0, None)
    assert json.loads(capsys.readouterr().out)["bits_per_byte"] == pytest.approx(3.0)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["bits"] == 3.0
    assert _perplexity(doc, "--toy-bits", "3", "--out", str(tmp_path / "run")) in (0, None)  # resumed
    assert json.loads(capsys.readouterr().out)["bits_per_byte"] == pytest.approx(3.0)
    assert _perplexity(doc, "--toy-bits", "5", "--out", str(tmp_path / "run")) == 2
    assert "bits: folder has 3.0, this run has 5.0" in capsys.readouterr().err
    assert _perplexity(doc, "--samples", "8") == 2  # another scoring's flag: one line naming what the toy takes
    err = capsys.readouterr().err
    assert "--samples would be ignored: --scoring toy-uniform-bytes does not read it (it takes --toy-bits" in err
    assert len(err.strip().splitlines()) == 1
    assert _perplexity(doc, "--toy-bits", "0") == 2
    assert "argument --toy-bits: expected a finite number > 0, got '0'" in capsys.readouterr().err


def test_lm_eval_scores_requests_and_documents_with_it(toy_scoring):
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import ModelArgumentError, PPLTokLM

    model = PPLTokLM.create_from_arg_obj({"lm": toy_lm(), "scoring": UniformBytes.name, "bits": "2"})
    assert model.score_pairs([Pair("ab", " ab"), Pair("ab", " b", choice=1)]) == [-3 * 2 * LOG2, -2 * 2 * LOG2]

    class Request:
        args = ("ab ba",)

    assert model.loglikelihood_rolling([Request()], disable_tqdm=True) == [-5 * 2 * LOG2]
    assert PPLTokLM(lm=toy_lm(), scoring=UniformBytes.name).score_pairs([Pair("ab", " b")]) == [-2 * 8 * LOG2]
    with pytest.raises(ModelArgumentError, match=r"^bits='-1': expected a finite number > 0$"):
        PPLTokLM.create_from_arg_obj({"lm": toy_lm(), "scoring": UniformBytes.name, "bits": "-1"})


def test_the_qa_study_stores_and_classifies_with_it(toy_scoring, tmp_path):
    from ppl_tok.datasets import continuation
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.report import evaluate
    from ppl_tok.qa.run import run_study, study_settings
    from qa_toy import write_questions

    test = write_questions(tmp_path / "test.jsonl", 6, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", 3, seed=2)
    study = load_study(str(test), tune=tune)
    settings = study_settings(study, model="toy", samples=4, seed=0, scores=[UniformBytes.name],
                              params={UniformBytes.name: {"bits": 2.0}})
    store = run_study(study, toy_lm(), tmp_path / "run", settings, batch_questions=2, progress=False)
    mine = [r for r in store.records if r["kind"] == UniformBytes.name]
    assert len(mine) == 9  # every question of both splits, beside the "is" records
    report = evaluate(tmp_path / "run", runs=4, resamples=100)
    for split, questions in study.splits.items():
        shortest = [min(range(len(q.choices)), key=lambda j: len(continuation(q.choices[j]).encode()))
                    for q in questions]
        want = sum(s == q.label for s, q in zip(shortest, questions)) / len(questions)
        assert report["accuracy"][UniformBytes.name][split] == pytest.approx(want)
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored["params"] == {UniformBytes.name: {"bits": 2.0}}  # its own parameter, recorded
    assert mine[0]["choices"][0]["estimate"] == pytest.approx(
        -len(continuation(study.splits[mine[0]["split"]][mine[0]["index"]].choices[0]).encode()) * 2 * LOG2)
    with pytest.raises(ValueError, match=rf"parameters of {UniformBytes.name}, which the run does not score"):
        study_settings(study, model="toy", params={UniformBytes.name: {"bits": 2.0}})


def test_qa_run_takes_its_flag_and_refuses_a_resume_under_another(toy_scoring, tmp_path, capsys):
    from ppl_tok.cli.main import main
    from ppl_tok.lm.backends import register_backend, unregister_backend
    from qa_toy import write_questions

    test = write_questions(tmp_path / "test.jsonl", 3, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", 2, seed=2)
    base = ["qa", "run", "--dataset", str(test), "--tune", str(tune), "--backend", "toy-qa-scoring", "--model", "x",
            "--samples", "2", "--scores", UniformBytes.name, "--out", str(tmp_path / "run"), "--json"]
    register_backend("toy-qa-scoring", lambda spec, **options: toy_lm())
    try:
        assert main([*base, "--toy-bits", "3"]) == 0
        assert json.loads((tmp_path / "run" / "run.json").read_text())["params"] == {UniformBytes.name: {"bits": 3.0}}
        assert main([*base, "--toy-bits", "3"]) == 0  # resumed
        capsys.readouterr()
        assert main([*base, "--toy-bits", "4"]) == 2
        assert "bits" in capsys.readouterr().err
        assert main([*base[:12], "--out", str(tmp_path / "other"), "--json", "--toy-bits", "4"]) == 2  # no --scores
        assert "--toy-bits would be ignored: --scores" in capsys.readouterr().err
    finally:
        unregister_backend("toy-qa-scoring")


class LongestAnswer(Scoring):
    """A question-level toy with a QA record of its own: it stores each answer's length in bytes and picks the
    longest answer (first on ties); its report section counts, per split, the questions whose gold answer is the
    longest. Every QA hook is its own (none of the defaults)."""

    name = "toy-longest-answer"
    estimator = "a test's toy: the answer's length (tests/scorings/test_adding_a_scoring.py)"
    levels = (QUESTION,)
    doc = "the answer's length in bytes"
    classifiers = ("toy-longest",)
    record_kind = "toy-length"
    record_fields = {"bytes": is_nat}
    record_arrays = {"bytes": float}

    def question_records(self, lm, items, settings):
        from ppl_tok.datasets import continuation

        return [question_record(self.stored_kind, item, [{"bytes": len(continuation(c).encode())}
                                                         for c in item[2].choices]) for item in items]

    def classify(self, classifier, t, norm, tuned):
        return t.optional[self.stored_kind]["bytes"]  # acc_norm too: the length itself, not per byte

    def report_section(self, tables, classify):
        return {s: int((classify(t, False).argmax(axis=1) == t.labels).sum()) for s, t in tables.items()}

    def report_markdown(self, section):
        return ["", f"Toy: the gold answer is the longest on {section['test']} test questions."]


def test_a_scoring_with_its_own_qa_record_runs_through_qa_run_and_qa_report(tmp_path, capsys):
    """``qa run --scores toy-length`` stores the toy's records through its hook (the store checks them by its fields),
    and ``qa report`` classifies with its hook: its accuracy is the share of questions whose gold answer is the
    longest, counted here from the data files, and its section shows in report.json and report.md."""
    from ppl_tok.cli.main import main
    from ppl_tok.datasets import continuation
    from ppl_tok.lm.backends import register_backend, unregister_backend
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.store import validate_record
    from qa_toy import write_questions

    test = write_questions(tmp_path / "test.jsonl", 6, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", 4, seed=2)
    run = tmp_path / "run"
    register(LongestAnswer)
    register_backend("toy-qa-longest", lambda spec, **options: toy_lm())
    try:
        with pytest.raises(ValueError, match="no field 'bytes'"):  # the store checks a record by its fields
            validate_record({"kind": "toy-length", "split": "test", "index": 0, "id": "q", "label": 0,
                             "choices": [{"length": 3}]}, "scores.jsonl:1")
        assert main(["qa", "run", "--dataset", str(test), "--tune", str(tune), "--backend", "toy-qa-longest",
                     "--model", "x", "--samples", "2", "--scores", "toy-length", "--out", str(run), "--json"]) == 0
        mine = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
        assert sorted((r["split"], r["index"]) for r in mine if r["kind"] == "toy-length") == sorted(
            [("test", i) for i in range(6)] + [("tune", i) for i in range(4)])
        capsys.readouterr()
        assert main(["qa", "report", str(run), "--runs", "2", "--resamples", "50", "--json"]) == 0
        capsys.readouterr()
        report = json.loads((run / "report.json").read_text())
        study = load_study(str(test), tune=tune)
        for split, questions in study.splits.items():
            longest = [max(range(len(q.choices)), key=lambda j: (len(continuation(q.choices[j]).encode()), -j))
                       for q in questions]
            hits = sum(pick == q.label for pick, q in zip(longest, questions))
            assert report["accuracy"]["toy-longest"][split] == pytest.approx(hits / len(questions))
            assert report["acc_norm"]["toy-longest"][split] == pytest.approx(hits / len(questions))
            assert report[LongestAnswer.name][split] == hits
        assert "toy-longest" in report["differences_vs_canonical"]["acc"]
        md = (run / "report.md").read_text()
        assert "| toy-longest |" in md
        assert f"Toy: the gold answer is the longest on {report[LongestAnswer.name]['test']} test questions." in md
    finally:
        unregister_backend("toy-qa-longest")
        unregister(LongestAnswer.name)


def test_a_question_level_scoring_that_stores_a_record_of_its_own_must_compute_it():
    class NoRecords(Scoring):
        name = "toy-no-records"
        estimator = doc = "a test's toy"
        levels = (QUESTION,)
        classifiers = ("toy-no-records",)
        record_kind = "toy-nothing"

    with pytest.raises(ValueError, match="stores QA records of kind 'toy-nothing': implement question_records"):
        register(NoRecords)
