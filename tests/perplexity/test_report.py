"""The report compares only what can be compared and reads only the corpus a run scored (issue 37, findings 3-4)."""

from __future__ import annotations

import json

import pytest

from ppl_tok.lm.spec import LMSpec
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.report import compare_runs, importance_against_floor, study_report
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm

DOCS = ["a b c", "ab ba", "c a b b", "abc ab"]


def _corpus(tmp_path, docs=DOCS, name="c.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    return path


def _run(path, out, config, *, seed=0, model=None, spec=None):
    return run_perplexity(toy_lm(seed), read_corpus(path, field="text"), config, out=out, model=model, spec=spec,
                          field="text", progress=False)


def test_compare_refuses_runs_of_two_models(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "a", ScoringConfig("beam"), seed=0, model="toy-a")
    _run(path, tmp_path / "b", ScoringConfig("beam", search=StringSearchConfig(beam=1)), seed=1, model="toy-b")
    with pytest.raises(ValueError, match="model differs .*'toy-a'.*'toy-b'"):
        compare_runs([tmp_path / "a", tmp_path / "b"])


def test_compare_refuses_another_dtype_and_a_canonical_plus_rest_run(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "a", ScoringConfig("beam"), spec=LMSpec("toy", dtype="float32"))
    _run(path, tmp_path / "b", ScoringConfig("beam"), spec=LMSpec("toy", dtype="bfloat16"))
    with pytest.raises(ValueError, match="dtype differs .*'float32'.*'bfloat16'"):
        compare_runs([tmp_path / "a", tmp_path / "b"])
    _run(path, tmp_path / "is", ScoringConfig("canonical+rest", num_samples=2), spec=LMSpec("toy", dtype="float32"))
    with pytest.raises(ValueError, match="is a canonical\\+rest run: --compare compares beam runs"):
        compare_runs([tmp_path / "a", tmp_path / "is"])


def test_a_certified_gain_is_never_negative(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "wide", ScoringConfig("beam", search=StringSearchConfig(beam=16)))
    _run(path, tmp_path / "one", ScoringConfig("beam", search=StringSearchConfig(beam=1)))
    for first, second in (("wide", "one"), ("one", "wide")):
        rows = compare_runs([tmp_path / first, tmp_path / second])["runs"]
        assert all(r["certified_gain_bits_per_byte"] >= 0 and r["model"] == "toy-bigram" for r in rows)


def test_importance_refuses_runs_of_two_models(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "m", ScoringConfig("beam"), seed=0, model="toy-a")
    _run(path, tmp_path / "is", ScoringConfig("canonical+rest", num_samples=2), seed=1, model="toy-b")
    with pytest.raises(ValueError, match="model differs"):
        importance_against_floor(tmp_path / "is", tmp_path / "m")


def test_the_report_refuses_a_source_changed_since_the_run(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "run", ScoringConfig("beam"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")  # two lines swapped
    with pytest.raises(ValueError, match="has changed since the run"):
        study_report(tmp_path / "run", resamples=10)
    with pytest.raises(ValueError, match="has changed since the run"):
        compare_runs([tmp_path / "run", tmp_path / "run"])


def test_the_report_of_a_run_read_from_stdin_says_it_has_no_texts(tmp_path, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a b c")))
    run_perplexity(toy_lm(), read_corpus("-"), ScoringConfig("beam"), out=tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match="standard input"):
        compare_runs([tmp_path / "run", tmp_path / "run"])
