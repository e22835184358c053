"""Comparisons across LMs (``ppl_tok/perplexity/compare.py``): runs of several models on one corpus, per scoring,
paired bootstrap differences; anything that is not one corpus is refused with one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ppl_tok.common.bootstrap import resample_indices
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.compare import compare_models, format_comparison
from ppl_tok.perplexity.corpus import Corpus
from ppl_tok.perplexity.metrics import LN2
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm

DOCS = ["a b c", "ab ba", "c a b b", "abc ab", "hg fe", "d cd de"]
SEARCH = StringSearchConfig(beam=3)


def _corpus(tmp_path, docs=DOCS, name="c.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    return path


def _run(path, out, scoring, seed, *, limit=None, window=None, field="text"):
    corpus = read_corpus(path, field=field)
    if limit is not None:
        corpus = Corpus(corpus.source, corpus.documents[:limit], corpus.sha256)
    from ppl_tok.scorings.registry import DOCUMENT, SearchParams, scoring as find_scoring

    beam = {"search": SEARCH} if issubclass(find_scoring(scoring, DOCUMENT).params, SearchParams) else {}
    return run_perplexity(toy_lm(seed), corpus, ScoringConfig(scoring, window=window, **beam), out=out,
                          model=f"toy-{seed}", field=field, progress=False)


def _strict(text):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_two_models_per_scoring_with_paired_bootstrap_differences(tmp_path):
    path = _corpus(tmp_path)
    scores = {}
    for seed in (0, 1):
        for scoring in ("canonical", "with-end"):
            scores[seed, scoring] = _run(path, tmp_path / f"{scoring}-{seed}", scoring, seed)
    folders = [tmp_path / f"{s}-{m}" for m in (0, 1) for s in ("canonical", "with-end")]
    report = compare_models(folders, resamples=400, seed=3)
    assert report["models"] == ["toy-0", "toy-1"] and report["documents"] == len(DOCS) and report["texts_checked"]
    assert [s["scoring"] for s in report["scorings"]] == ["canonical", "with-end"]
    n_bytes = np.array([s.n_bytes for s in scores[0, "canonical"]])
    for block in report["scorings"]:
        name = block["scoring"]
        a, b = (np.array([s.log_likelihood for s in scores[m, name]]) for m in (0, 1))
        bpb = {r["model"]: r["bits_per_byte"] for r in block["runs"]}
        assert bpb["toy-0"] == pytest.approx(-a.sum() / (LN2 * n_bytes.sum()), abs=1e-12)
        (pair,) = block["differences"]
        assert (pair["model"], pair["minus"]) == ("toy-0", "toy-1")
        assert pair["difference_bits_per_byte"] == pytest.approx(bpb["toy-0"] - bpb["toy-1"], abs=1e-12)
        assert pair["low"] <= pair["difference_bits_per_byte"] <= pair["high"] and pair["low"] < pair["high"]
        idx = resample_indices(len(DOCS), 400, 3)  # the documents resampled: the same for every pair and scoring
        stats = (b[idx] - a[idx]).sum(1) / (LN2 * n_bytes[idx].sum(1))
        assert (pair["low"], pair["high"]) == pytest.approx(tuple(np.quantile(stats, [0.025, 0.975])), abs=1e-12)
        if name == "with-end":
            assert all(r["bits_per_byte_floor"] <= r["bits_per_byte"] <= r["bits_per_byte_ceiling"]
                       for r in block["runs"])
    text = "\n".join(format_comparison(report))
    assert "with-end" in text and "toy-0 - toy-1" in text and "seed 3" in text


def test_a_scoring_of_one_model_is_listed_without_a_difference(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "a", "canonical", 0)
    _run(path, tmp_path / "b", "canonical", 1)
    _run(path, tmp_path / "c", "prefix", 1)
    report = compare_models([tmp_path / "a", tmp_path / "b", tmp_path / "c"], resamples=50)
    prefix = report["scorings"][1]
    assert prefix["scoring"] == "prefix" and [r["model"] for r in prefix["runs"]] == ["toy-1"]
    assert prefix["differences"] == []
    assert "one model only" in "\n".join(format_comparison(report))


def test_json_is_strict_even_with_infinite_ceilings(tmp_path):
    from ppl_tok.common.jsonout import to_json

    path = _corpus(tmp_path)
    _run(path, tmp_path / "a", "beam", 0)
    _run(path, tmp_path / "b", "beam", 1)
    report = compare_models([tmp_path / "a", tmp_path / "b"], resamples=50)
    report["scorings"][0]["runs"][0]["bits_per_byte_floor"] = -math.inf  # what a record of -inf would give
    assert _strict(to_json(report))["scorings"][0]["runs"][0]["bits_per_byte_floor"] == "-Infinity"


def test_runs_of_one_model_or_one_model_twice_are_refused(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "a", "beam", 0)
    _run(path, tmp_path / "b", "canonical", 0)
    _run(path, tmp_path / "c", "canonical", 1)
    _run(path, tmp_path / "d", "canonical", 1)
    with pytest.raises(ValueError, match="every folder is a run of toy-0: .*--compare"):
        compare_models([tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ValueError, match="both canonical runs of toy-1: give one run per model and scoring"):
        compare_models([tmp_path / "a", tmp_path / "c", tmp_path / "d"])


def test_another_corpus_selection_or_window_is_refused(tmp_path):
    path = _corpus(tmp_path)
    _run(path, tmp_path / "a", "canonical", 0)
    other = _corpus(tmp_path, DOCS[:-1] + ["e f"], name="other.jsonl")
    _run(other, tmp_path / "b", "canonical", 1)
    with pytest.raises(ValueError, match="corpus_sha256 differs .*compare runs of one corpus"):
        compare_models([tmp_path / "a", tmp_path / "b"])
    _run(path, tmp_path / "short", "canonical", 1, limit=4)
    with pytest.raises(ValueError, match=r"the documents differ \(.* scored 6 documents \(0..5\), .* 4 documents "
                                         r"\(0..3\)\); run both with the same --limit"):
        compare_models([tmp_path / "a", tmp_path / "short"])
    _run(path, tmp_path / "w", "canonical", 1, window=3)
    with pytest.raises(ValueError, match="window differs .*None.*3.* several windows; give both runs one --window"):
        compare_models([tmp_path / "a", tmp_path / "w"])
    _run(path, tmp_path / "wide", "canonical", 1, window=50)  # another window that cuts no document: comparable
    assert compare_models([tmp_path / "a", tmp_path / "wide"], resamples=20)["documents"] == len(DOCS)


def test_another_field_is_refused(tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps({"text": t, "alt": t + " a"}) + "\n" for t in DOCS))
    _run(path, tmp_path / "a", "canonical", 0)
    _run(path, tmp_path / "b", "canonical", 1, field="alt")
    with pytest.raises(ValueError, match="field differs .*'text'.*'alt'"):
        compare_models([tmp_path / "a", tmp_path / "b"])


def test_a_changed_document_text_is_refused(tmp_path):
    """Same SHA-256 recorded but another text (a run.json edited by hand): the texts are compared."""
    path = _corpus(tmp_path)
    _run(path, tmp_path / "a", "canonical", 0)
    swapped = _corpus(tmp_path, ["a b d"] + DOCS[1:], name="swapped.jsonl")  # same bytes per document
    _run(swapped, tmp_path / "b", "canonical", 1)
    settings = json.loads((tmp_path / "b" / "run.json").read_text())
    first = json.loads((tmp_path / "a" / "run.json").read_text())
    settings["corpus_sha256"] = first["corpus_sha256"]
    (tmp_path / "b" / "run.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="changed since the run"):
        compare_models([tmp_path / "a", tmp_path / "b"])
