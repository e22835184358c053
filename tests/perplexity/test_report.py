"""The report (``ppl_tok/perplexity/report.py``): corpus figures with certified gains, spans, study reports; it
compares only what can be compared and reads only the corpus a run scored (issue 37, findings 3-4)."""

from __future__ import annotations

import json

import pytest

from ppl_tok.lm.spec import LMSpec
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.report import compare_runs, importance_against_floor, study_report
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm
from ppl_tok.perplexity import (
    corpus_from_texts,
    score_documents,
)
from ppl_tok.perplexity.report import corpus_summary
from tests.perplexity import DOCS as PPL_DOCS

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


def test_corpus_summary_certifies_the_gain():
    lm = toy_lm()
    scores = score_documents(lm, corpus_from_texts(PPL_DOCS).documents, ScoringConfig("beam"))
    summary = corpus_summary(scores, "marginal", resamples=200)
    assert summary["certified"]["bits_per_byte_ceiling"] >= summary["bits_per_byte"] - 1e-12
    assert summary["canonical"]["bits_per_byte"] >= summary["certified"]["bits_per_byte_ceiling"] - 1e-12
    gain = summary["gain_bits_per_byte"]
    assert gain["low"] <= gain["value"] <= gain["high"] and gain["value"] >= 0


def test_corpus_summary_reports_no_floor_for_a_scoring_without_one(request):
    """A document scoring whose table entry gives no certified floor reports its gain, and no certified figure."""
    from ppl_tok import scorings as scoring
    from ppl_tok.cli.perplexity import summary_lines

    class Plain(scoring.Scoring):
        name, estimator, levels, doc = "plain", "a test estimate", (scoring.DOCUMENT,), "claimed uncertified"

        def score_documents(self, lm, docs, config, *, on_bytes=None):
            return scoring.scoring("beam", scoring.DOCUMENT).score_documents(lm, docs, config)

    scoring.register(Plain)
    request.addfinalizer(lambda: scoring.unregister("plain"))
    scores = score_documents(toy_lm(), corpus_from_texts(PPL_DOCS).documents, ScoringConfig("beam"))
    summary = corpus_summary(scores, "plain", resamples=100)
    assert summary["scoring"] == "plain" and summary["gain_bits_per_byte"]["value"] >= 0
    assert not {"certified", "certified_gain_bits_per_byte", "floor_to_estimate_gap_bits_per_byte"} & set(summary)
    assert not any("certified" in line for line in summary_lines(summary))
    # a scoring with a floor but without its records' floors (lower=None) reports none either
    for s in scores:
        s.lower = None
    assert "certified" not in corpus_summary(scores, "beam", resamples=100)
    # canonical+rest: a floor and no ceiling, so no bits_per_byte_floor
    rest = score_documents(toy_lm(), corpus_from_texts(PPL_DOCS).documents, ScoringConfig("canonical+rest", num_samples=4))
    assert "bits_per_byte_floor" not in corpus_summary(rest, "canonical+rest", resamples=100)["certified"]


def test_differing_spans_and_their_kinds():
    from ppl_tok.perplexity.report import span_kind
    from ppl_tok.strings.marginal import differing_spans

    lm = toy_lm()
    v = lm.vocab
    ids = {v.token_name(i): i for i in range(1, len(v))}
    canonical = [ids["abc"], ids[" ab"], ids["c"]]  # "abc abc"
    other = [ids["a"], ids["b"], ids["c"], ids[" ab"], ids["c"]]
    assert differing_spans(v, other, canonical) == [(0, 3)]
    assert differing_spans(v, canonical, canonical) == []
    text = "Abc 12, naïve  x".encode()
    assert [span_kind(text, a, b) for a, b in [(0, 3), (4, 6), (6, 7), (8, 14), (14, 16), (3, 4), (16, 17)]] == \
        ["first word", "digits", "punctuation", "non-ASCII", "whitespace", "whitespace", "word"]
    # a word the canonical tokenization cuts is not one token of the vocabulary: a rare word
    assert span_kind(b"a foo bar", 1, 5, {0, 1, 3, 5, 9}) == "rare word"
    assert span_kind(b"a foo bar", 1, 5, {0, 1, 5, 9}) == "word"


def test_study_report_of_a_run_folder(tmp_path):
    from ppl_tok.perplexity.report import study_report

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in PPL_DOCS))
    corpus = read_corpus(path, field="text")
    run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", field="text", progress=False)
    report = study_report(tmp_path / "run", resamples=100, png=tmp_path / "gain.png")
    assert report["documents"] == len(PPL_DOCS) and (tmp_path / "gain.png").stat().st_size > 0
    kinds = report["span_kinds"]
    assert kinds["documents"] == len(PPL_DOCS)
    assert sum(kinds["gain_share"].values()) == pytest.approx(1.0) or kinds["documents_departing"] == 0
    shares = report["span_gain"]
    assert shares["documents"] == len(PPL_DOCS)
    assert sum(shares["gain_share"].values()) + shares["rest_share"] == pytest.approx(1.0)
    records = map(json.loads, open(tmp_path / "run" / "documents.jsonl"))
    gain = sum(s["log_likelihood"] - s["canonical"] for s in records)
    assert sum(shares["gain_nats"].values()) + shares["rest_nats"] == pytest.approx(gain, abs=1e-9)
    study_report(tmp_path / "run", resamples=100, spans_png=tmp_path / "spans.png")
    assert (tmp_path / "spans.png").stat().st_size > 0


def test_compare_runs_matches_documents_by_text(tmp_path):
    from ppl_tok.perplexity.report import compare_runs

    lm = toy_lm()
    for name, docs, beam in [("wide", PPL_DOCS, 16), ("narrow", PPL_DOCS[::-1], 1)]:  # the same texts, other indices
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
        run_perplexity(lm, read_corpus(path, field="text"), ScoringConfig("beam", search=StringSearchConfig(beam=beam)),
                       out=tmp_path / name, field="text", progress=False)
    out = compare_runs([tmp_path / "wide", tmp_path / "narrow"])
    assert out["documents"] == len(PPL_DOCS)
    wide, narrow = out["runs"]
    assert wide["share_of_first_gain"] == pytest.approx(1.0) and wide["largest_shortfall_nats"] == 0
    assert narrow["forwards_per_byte"] < wide["forwards_per_byte"]
    assert narrow["certified_gain_bits_per_byte"] <= wide["certified_gain_bits_per_byte"] + 1e-12
    assert narrow["largest_shortfall_nats"] >= 0


def test_importance_against_the_beams_floor(tmp_path):
    from ppl_tok.perplexity.report import importance_against_floor

    lm = toy_lm()
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in PPL_DOCS))
    corpus = read_corpus(path, field="text")
    run_perplexity(lm, corpus, ScoringConfig("beam", search=StringSearchConfig(beam=100_000, prune=1e9)),
                   out=tmp_path / "m", field="text", progress=False)
    run_perplexity(lm, corpus, ScoringConfig("canonical+rest", num_samples=4), out=tmp_path / "is", field="text",
                   progress=False)
    out = importance_against_floor(tmp_path / "is", tmp_path / "m")
    assert out["documents"] == len(PPL_DOCS) and out["num_samples"] == 4
    bpb = out["bits_per_byte"]
    assert bpb["beam_floor"] <= bpb["canonical"] + 1e-12  # exact here: every tokenization summed
    q = out["importance_minus_floor_nats"]
    assert q["min"] <= q["median"] <= q["max"]
    assert 0 <= out["documents_below_floor"] <= len(PPL_DOCS)


def test_a_new_scoring_with_a_searched_floor_or_an_estimate_takes_the_built_ins_road(tmp_path, request):
    """``--compare`` and ``--importance`` ask a folder's scoring what it records (``searched_floor``,
    ``estimate_field``), not its name: toy scorings that delegate to ``beam`` and ``canonical+rest`` (the estimate
    stored under another key) give the built-ins' figures exactly; a scoring without them is refused, named."""
    from dataclasses import replace

    from ppl_tok import scorings
    from ppl_tok.scorings.beam import BeamParams
    from ppl_tok.scorings.canonical_rest import CanonicalPlusRestParams

    class Searched(scorings.Scoring):
        name, estimator, levels, doc = "searched-toy", "the beam, again", (scorings.DOCUMENT,), "a searched floor"
        floor = ceiling = searched_floor = True
        params = BeamParams

        def score_documents(self, lm, docs, config, *, on_bytes=None):
            return scorings.SCORINGS["beam"].score_documents(lm, docs, ScoringConfig("beam", params=config.params))

    class Estimating(scorings.Scoring):
        name, estimator, levels, doc = "estimating-toy", "canonical+rest, again", (scorings.DOCUMENT,), "an estimate"
        floor, estimate_field = True, "plain"
        params = CanonicalPlusRestParams

        def score_documents(self, lm, docs, config, *, on_bytes=None):
            scores = scorings.SCORINGS["canonical+rest"].score_documents(
                lm, docs, ScoringConfig("canonical+rest", params=config.params))
            return [replace(s, extra={"plain": s.extra["is_estimate"]}) for s in scores]

    for cls in (Searched, Estimating):
        scorings.register(cls)
        request.addfinalizer(lambda name=cls.name: scorings.unregister(name))
    path = _corpus(tmp_path, PPL_DOCS)
    for out, config in (("beam", ScoringConfig("beam", search=StringSearchConfig(beam=4))),
                        ("searched", ScoringConfig("searched-toy", search=StringSearchConfig(beam=4))),
                        ("wide", ScoringConfig("beam", search=StringSearchConfig(beam=64))),
                        ("rest", ScoringConfig("canonical+rest", num_samples=4)),
                        ("estimating", ScoringConfig("estimating-toy", num_samples=4))):
        _run(path, tmp_path / out, config)
    built_in = compare_runs([tmp_path / "wide", tmp_path / "beam"])
    toy = compare_runs([tmp_path / "wide", tmp_path / "searched"])
    assert [{k: v for k, v in r.items() if k != "folder"} for r in toy["runs"]] == [
        {k: v for k, v in r.items() if k != "folder"} for r in built_in["runs"]]
    assert (importance_against_floor(tmp_path / "estimating", tmp_path / "searched")
            == importance_against_floor(tmp_path / "rest", tmp_path / "beam"))
    with pytest.raises(ValueError, match="estimating is a estimating-toy run: --compare compares beam or "
                                         "searched-toy runs \\(use --importance for a canonical\\+rest or "
                                         "estimating-toy run\\)"):
        compare_runs([tmp_path / "beam", tmp_path / "estimating"])
    with pytest.raises(ValueError, match="compare a canonical\\+rest or estimating-toy folder with a beam or "
                                         "searched-toy one \\(old name: marginal\\): .*beam is a beam run"):
        importance_against_floor(tmp_path / "beam", tmp_path / "searched")
