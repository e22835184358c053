"""Perplexity over strings: corpus input and its errors, windows, scorings against exact values, the store, the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppl_tok.infer.exact import exact_marginal
from ppl_tok.common.jsonl_store import StoreError
from ppl_tok.perplexity import (
    CorpusError,
    ScoringConfig,
    check_coverage,
    corpus_from_texts,
    count_words,
    read_corpus,
    rolling_windows,
    score_documents,
    text_windows,
)
from ppl_tok.perplexity.metrics import figures
from ppl_tok.perplexity.report import corpus_summary
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.perplexity.store import PerplexityStore
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm
from sigkill import kill_while_appending, line_count

TESTS = Path(__file__).resolve().parents[1]
DOCS = [" ab cd", "abc de fgh", " a b c abc", "hgfe dcba ab", "ba ab cd ef gh a"]


# ------------------------------------------------------------------ corpus
def test_text_jsonl_and_stdin_inputs(tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("first line\nsecond\n\nthird para\nstill\n")
    assert [d.text for d in read_corpus(text).documents] == ["first line\nsecond\n\nthird para\nstill\n"]
    lines = read_corpus(text, split="paragraphs").documents
    assert [(d.text, d.line) for d in lines] == [("first line\nsecond", 1), ("third para\nstill", 4)]
    rows = tmp_path / "c.jsonl"
    rows.write_text(json.dumps({"text": "a b"}) + "\n\n" + json.dumps({"text": "c", "x": 1}) + "\n")
    docs = read_corpus(rows, field="text").documents
    assert [(d.text, d.where) for d in docs] == [("a b", f"{rows}:1"), ("c", f"{rows}:3")]


@pytest.mark.parametrize("content, field, split, message", [
    (b'{"text": "a"}\nnot json\n', "text", "none", r"c:2: not valid JSON"),
    (b'{"text": "a"}\n{"body": "b"}\n', "text", "none", r"c:2: missing field 'text' \(fields: 'body'\)"),
    (b'{"text": "a"}\n{"text": ""}\n', "text", "none", r"c:2: field 'text' is empty"),
    (b'{"text": 3}\n', "text", "none", r"c:1: field 'text' should be a string"),
    (b'[1, 2]\n', "text", "none", r"c:1: expected a JSON object"),
    (b"ab\n\ncd\n", None, "lines", r"c:2: an empty document"),
    (b"", None, "none", r"c:1: the document is empty"),
    (b"text\nmore\x00\x01\x02", None, "none", r"c:2: a NUL byte at offset 9: this looks like a binary file"),
    (b"ok\n\xff\xfe bad", None, "none", r"c:2: not UTF-8 text"),
])
def test_bad_corpora_are_errors_naming_file_and_line(tmp_path, content, field, split, message):
    path = tmp_path / "c"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        read_corpus(path, field=field, split=split)


def test_bytes_no_token_covers_name_the_line_and_byte(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("ab cd\nef z gh\n")
    with pytest.raises(CorpusError, match=r"c.txt:1: no token of .* covers the byte 0x0a \(document 0, byte offset 5\)"):
        check_coverage(read_corpus(path), toy_lm().vocab)  # the toy vocabulary has no newline
    with pytest.raises(CorpusError, match=r"c.txt:2: no token of .* covers the byte 0x7a \(document 1, byte offset 3\)"):
        check_coverage(read_corpus(path, split="lines"), toy_lm().vocab)


def test_words_are_counted_as_lm_eval_counts_them():
    assert count_words("a b") == 2
    assert count_words(" a  b\n") == 4  # re.split(r"\s+"): empty pieces at both ends count
    assert count_words("a\tb\nc") == 3


def test_figures_are_ratios_of_sums():
    f = figures([-10.0, -30.0], [10, 30], [2, 6])
    assert f["bits_per_byte"] == pytest.approx(1 / math.log(2))
    assert f["byte_perplexity"] == pytest.approx(math.e)
    assert f["word_perplexity"] == pytest.approx(math.exp(5))


# ------------------------------------------------------------------ windows
def test_rolling_windows_cover_every_token_once():
    for n in range(1, 30):
        for length in range(1, 9):
            ws = rolling_windows(n, length)
            assert [t for w in ws for t in range(w.start, w.end)] == list(range(n))
            assert ws[0].bos and not any(w.bos for w in ws[1:])
            for w in ws[1:]:
                assert w.end - w.context == length + 1 and w.context >= 0  # the forward sees `length` positions


def test_rolling_windows_equal_lm_evals():
    lm_eval_utils = pytest.importorskip("lm_eval.utils")
    for n in range(1, 25):
        for length in range(1, 8):
            tokens = list(range(100, 100 + n))
            want = [lm_eval_utils.make_disjoint_window(w)
                    for w in lm_eval_utils.get_rolling_token_windows(tokens, -1, length, 1)]
            got = [([-1] if w.bos else tokens[w.context: w.start], tokens[w.start: w.end])
                   for w in rolling_windows(n, length)]
            assert got == want, (n, length)


def test_text_windows_rebuild_the_text_and_fit_the_window():
    lm = toy_lm()
    text = "abc de fgh ab cd ef gh ba ab"
    tokens = lm.canonical(text)
    for length in (3, 4, 6, 50):
        ws = text_windows(lm.vocab, tokens, length)
        assert "".join(w.text for w in ws) == text
        assert all(1 + len(w.context) + len(w.tokens) <= length for w in ws)


# ------------------------------------------------------------------ scoring
def test_canonical_windows_of_a_bigram_lm_equal_the_whole_document():
    """A bigram LM sees only the previous token, which every window keeps: windows change nothing."""
    lm = toy_lm()
    corpus = corpus_from_texts(DOCS)
    whole = score_documents(lm, corpus.documents, ScoringConfig("canonical"))
    windowed = score_documents(lm, corpus.documents, ScoringConfig("canonical", window=3))
    for d, a, b in zip(corpus.documents, whole, windowed):
        assert a.log_likelihood == pytest.approx(lm.canonical_log_prob(d.text), abs=1e-12)
        assert b.log_likelihood == pytest.approx(a.log_likelihood, abs=1e-12)
        assert a.windows == 1 and b.windows == len(rolling_windows(b.n_tokens, 3))
    assert max(b.windows for b in windowed) >= 3


def test_marginal_brackets_the_exact_marginal_and_beats_canonical():
    lm = toy_lm()
    corpus = corpus_from_texts(DOCS)
    scores = score_documents(lm, corpus.documents, ScoringConfig("beam", search=StringSearchConfig(beam=4)))
    for d, s in zip(corpus.documents, scores):
        exact = exact_marginal(d.text, lm).log_marginal
        assert s.canonical <= s.lower + 1e-12
        assert s.lower <= exact + 1e-9 <= s.upper + 2e-9
        assert s.log_likelihood == s.lower
    wide = score_documents(lm, corpus.documents,
                           ScoringConfig("beam", search=StringSearchConfig(beam=100_000, prune=math.inf)))
    for d, s in zip(corpus.documents, wide):  # nothing pruned on these short strings: exact
        assert s.lower == pytest.approx(exact_marginal(d.text, lm).log_marginal, abs=1e-9)


@pytest.mark.parametrize("window", [None, 5])
def test_span_gain_adds_up_to_the_gain_over_canonical(window):
    lm = toy_lm()
    for s in score_documents(lm, corpus_from_texts(DOCS + ["abc de fgh ab cd ef gh ba ab"]).documents,
                             ScoringConfig("beam", window=window, search=StringSearchConfig(beam=4))):
        record = s.extra["span_gain"]
        assert record["version"] == 1
        spans = sum(nats for _, _, nats in record["spans"])
        assert spans + record["rest"] == pytest.approx(s.log_likelihood - s.canonical, abs=1e-9)
        assert 0 <= record["single_span"] <= s.log_likelihood - s.canonical + 1e-9
        assert all(0 <= a < b <= s.n_bytes and nats >= 0 for a, b, nats in record["spans"])


@pytest.mark.parametrize("window", [None, 5])
def test_a_batch_of_documents_scores_as_each_document_alone(window):
    """Marginal documents (and their windows) are swept in lockstep; each record is the one it gets alone."""
    lm = toy_lm()
    docs = corpus_from_texts(DOCS + ["abc de fgh ab cd ef gh ba ab"]).documents
    config = ScoringConfig("beam", window=window, search=StringSearchConfig(beam=3, prune=2.0))
    batch = score_documents(lm, docs, config)
    for d, s in zip(docs, batch):
        (alone,) = score_documents(lm, [d], config)
        got, want = s.to_record(), alone.to_record()
        assert got == want


def test_windowed_marginal_holds_the_canonical_slice_and_bounds():
    lm = toy_lm()
    corpus = corpus_from_texts(["abc de fgh ab cd ef gh ba ab"])
    (s,) = score_documents(lm, corpus.documents, ScoringConfig("beam", window=5))
    assert s.windows > 1
    assert s.canonical <= s.lower <= s.upper


def test_canonical_plus_rest_is_unbiased_on_average():
    """log(p(v*) + m): exp of it averages to the exact marginal over seeds (12 seeds, 4 sigma)."""
    lm = toy_lm()
    corpus = corpus_from_texts(["abc de"])
    exact = exact_marginal("abc de", lm).log_marginal
    values = [math.exp(score_documents(lm, corpus.documents, ScoringConfig("canonical+rest", num_samples=8,
                                                                            seed=s))[0].log_likelihood)
              for s in range(12)]
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    assert abs(mean - math.exp(exact)) <= 4 * sd / len(values) ** 0.5 + 1e-12
    s = score_documents(lm, corpus.documents, ScoringConfig("canonical+rest", num_samples=8))[0]
    assert s.lower == pytest.approx(s.canonical) and s.log_likelihood >= s.canonical
    # the plain importance estimate of the same particles, and what they certify
    from ppl_tok.infer.importance import marginals
    from ppl_tok.common.seeds import pair_seed

    (r,) = marginals(["abc de"], lm, 8, seeds=[pair_seed(0, "perplexity", "0", 0)])
    assert s.extra["is_estimate"] == pytest.approx(r.log_marginal, abs=1e-12)
    assert s.canonical - 1e-12 <= s.extra["is_certified_lower"] <= exact + 1e-9


def test_corpus_summary_certifies_the_gain():
    lm = toy_lm()
    scores = score_documents(lm, corpus_from_texts(DOCS).documents, ScoringConfig("beam"))
    summary = corpus_summary(scores, "marginal", resamples=200)
    assert summary["certified"]["bits_per_byte_ceiling"] >= summary["bits_per_byte"] - 1e-12
    assert summary["canonical"]["bits_per_byte"] >= summary["certified"]["bits_per_byte_ceiling"] - 1e-12
    gain = summary["gain_bits_per_byte"]
    assert gain["low"] <= gain["value"] <= gain["high"] and gain["value"] >= 0


def test_an_unknown_scoring_is_an_error():
    """Every dispatcher looks its name up in ppl_tok.scoring: no silent fallback to another scoring."""
    with pytest.raises(ValueError, match=r"unknown scoring 'nonsense' .*canonical, beam, canonical\+rest"):
        ScoringConfig("nonsense")
    config = ScoringConfig("canonical")
    object.__setattr__(config, "scoring", "nonsense")  # past the config's own check
    with pytest.raises(ValueError, match="unknown scoring 'nonsense'"):
        score_documents(toy_lm(), corpus_from_texts(["ab"]).documents, config)
    scores = score_documents(toy_lm(), corpus_from_texts(["ab"]).documents, ScoringConfig("canonical"))
    with pytest.raises(ValueError, match="unknown scoring 'importance'"):  # a scoring of requests, not of documents
        corpus_summary(scores, "importance")


def test_marginal_is_the_old_name_of_beam():
    config = ScoringConfig("marginal", search=StringSearchConfig(beam=3))
    assert config == ScoringConfig("beam", search=StringSearchConfig(beam=3))
    assert config.settings() == {"scoring": "beam", "window": None, "beam": 3, "prune": StringSearchConfig.prune,
                                 "budget": None, "prune_against": "offset"}
    with pytest.raises(ValueError, match="prune_against"):
        ScoringConfig("beam", search=StringSearchConfig(prune_against="text"))


def test_corpus_summary_reports_no_floor_for_a_scoring_without_one(monkeypatch):
    """A document scoring whose table entry gives no certified floor reports its gain, and no certified figure."""
    from ppl_tok import scoring
    from ppl_tok.cli.perplexity import summary_lines

    plain = scoring.Scoring("plain", "a test estimate", (scoring.DOCUMENT,), floor=False, ceiling=False,
                            unit=scoring.NATS, doc="the beam's estimate, claimed uncertified")
    monkeypatch.setitem(scoring.SCORINGS, "plain", plain)
    scores = score_documents(toy_lm(), corpus_from_texts(DOCS).documents, ScoringConfig("beam"))
    summary = corpus_summary(scores, "plain", resamples=100)
    assert summary["scoring"] == "plain" and summary["gain_bits_per_byte"]["value"] >= 0
    assert not {"certified", "certified_gain_bits_per_byte", "floor_to_estimate_gap_bits_per_byte"} & set(summary)
    assert not any("certified" in line for line in summary_lines(summary))
    # a scoring with a floor but without its records' floors (lower=None) reports none either
    for s in scores:
        s.lower = None
    assert "certified" not in corpus_summary(scores, "beam", resamples=100)
    # canonical+rest: a floor and no ceiling, so no bits_per_byte_floor
    rest = score_documents(toy_lm(), corpus_from_texts(DOCS).documents, ScoringConfig("canonical+rest", num_samples=4))
    assert "bits_per_byte_floor" not in corpus_summary(rest, "canonical+rest", resamples=100)["certified"]


def test_no_bos_is_a_clear_error():
    from ppl_tok import BigramLM, Vocabulary

    lm = BigramLM.random(Vocabulary.from_tokens([None, "a", "b"]), seed=0, bos_id=None)
    with pytest.raises(ValueError, match="no BOS"):
        score_documents(lm, corpus_from_texts(["ab"]).documents, ScoringConfig("canonical"))


# ------------------------------------------------------------------ store
def _corpus_file(tmp_path, n=24):
    path = tmp_path / "corpus.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"text": DOCS[i % len(DOCS)] + " " + "ab" * (i % 3)}) + "\n")
    return path


def test_store_resumes_and_refuses_other_settings(tmp_path):
    corpus = read_corpus(_corpus_file(tmp_path, 6), field="text")
    ref = run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", batch_docs=2,
                         progress=False)
    path = tmp_path / "run" / PerplexityStore.records_file
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])  # a torn last line
    again = run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", batch_docs=2,
                           progress=False)
    assert path.read_bytes() == data and [s.to_record() for s in again] == [s.to_record() for s in ref]
    with pytest.raises(StoreError, match="beam: folder has 8, this run has 2"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam", search=StringSearchConfig(beam=2)), out=tmp_path / "run",
                       progress=False)
    path.write_bytes(data + b"{broken}\n")
    with pytest.raises(StoreError, match=r"documents.jsonl:7: not a document record"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", progress=False)


def test_run_json_records_the_lm_spec_and_a_folder_without_it_resumes(tmp_path):
    from ppl_tok.lm.spec import LMSpec

    corpus = read_corpus(_corpus_file(tmp_path, 4), field="text")
    lm = toy_lm()
    ref = run_perplexity(lm, corpus, ScoringConfig("marginal"), out=tmp_path / "run", progress=False)
    settings = PerplexityStore.read_settings(tmp_path / "run")
    assert settings["lm"] is None  # an LM built in Python has no spec
    lm.spec = LMSpec(model="toy", backend="toy", bos_id=lm.bos_id)  # as load_lm leaves it
    run_perplexity(lm, corpus, ScoringConfig("marginal"), out=tmp_path / "spec", progress=False, model="toy")
    assert PerplexityStore.read_settings(tmp_path / "spec")["lm"] == lm.spec.to_dict()
    spec = LMSpec(model="toy", dtype="bfloat16")
    run_perplexity(toy_lm(), corpus, ScoringConfig("marginal"), out=tmp_path / "given", progress=False, spec=spec)
    assert PerplexityStore.read_settings(tmp_path / "given")["lm"] == spec.to_dict()
    # a folder from before "lm" resumes, and keeps its run.json
    old = {k: v for k, v in settings.items() if k != "lm"}
    (tmp_path / "run" / "run.json").write_text(json.dumps(old))
    again = run_perplexity(toy_lm(), corpus, ScoringConfig("marginal"), out=tmp_path / "run", progress=False)
    assert [s.to_record() for s in again] == [s.to_record() for s in ref]
    assert PerplexityStore.read_settings(tmp_path / "run") == old


CHILD = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]  # the checkout's ppl_tok, not another install's
from qa_toy import toy_lm
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.strings.beam import StringSearchConfig
config = ScoringConfig("beam", search=StringSearchConfig(beam=16))
run_perplexity(toy_lm(), read_corpus({corpus!r}, field="text"), config, out={out!r}, batch_docs=1, progress=False)
"""


def test_sigkill_at_any_point_resumes_to_the_uninterrupted_store(tmp_path):
    corpus_path = _corpus_file(tmp_path, 40)
    ref = tmp_path / "ref"
    run_perplexity(toy_lm(), read_corpus(corpus_path, field="text"),
                   ScoringConfig("beam", search=StringSearchConfig(beam=16)), out=ref, batch_docs=1, progress=False)
    reference = (ref / PerplexityStore.records_file).read_bytes()
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(TESTS), root=str(TESTS.parent), corpus=str(corpus_path), out=str(out)))
    records = out / PerplexityStore.records_file
    kills = kill_while_appending(script, records, delays=(0.0, 0.013))
    assert kills >= 2, "the child finished before it could be killed"
    assert 0 < line_count(records) < reference.count(b"\n")
    subprocess.run([sys.executable, str(script)], check=True, env=os.environ.copy())
    assert sorted(records.read_bytes().splitlines()) == sorted(reference.splitlines())


# ------------------------------------------------------------------ CLI
def _cli(args, stdin=None):
    return subprocess.run([sys.executable, "-m", "ppl_tok.cli", *args], input=stdin, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, timeout=300)


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    from ppl_tok.cli.main import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{"txt": "b"}\n')
    assert main(["perplexity", str(bad), "--field", "text"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ppl-tok perplexity: error: {bad}:2: missing field 'text' (fields: 'txt'); choose it with --field"]
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"\x7fELF\x00\x01")
    assert main(["perplexity", str(binary)]) == 2
    assert "binary file" in capsys.readouterr().err
    assert main(["perplexity", str(bad), "--field", "text", "--split", "lines"]) == 2
    assert "--split applies to text input" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_json_from_stdin_equals_the_canonical_log_prob(smollm2):
    text = "The cat sat on the mat. It was 42 degrees outside!\n"
    r = _cli(["perplexity", "-", "--json"], stdin=text.encode())
    assert r.returncode == 0, r.stderr.decode()
    out = json.loads(r.stdout)
    ll = smollm2.canonical_log_prob(text)
    assert out["canonical"]["log_likelihood"] == pytest.approx(ll, abs=1e-4)
    assert out["bits_per_byte"] == pytest.approx(-ll / (math.log(2) * len(text.encode())), abs=1e-6)
    assert out["per_document"][0]["words"] == count_words(text)


def test_bench_documents_span_the_lengths_asked():
    from conftest import SHARED
    from ppl_tok.bench.perplexity import bench_documents

    docs = bench_documents(SHARED / "data", 5, 300, 2000)
    assert [len(d.encode()) for d in docs][::4] == [300, 2000]
    assert all(300 - 3 <= len(d.encode()) <= 2000 for d in docs)  # a cut inside a character drops its bytes


def test_bench_resumes_from_its_folder_and_refuses_other_settings(tmp_path, monkeypatch):
    from conftest import SHARED
    from ppl_tok.common.jsonl_store import SettingsMismatchError
    from ppl_tok.bench import perplexity as bench

    knobs = {"data_dir": SHARED / "data", "documents": 2, "min_bytes": 12, "max_bytes": 20,
             "search": StringSearchConfig(beam=2, prune=3.0)}
    first = bench.bench_perplexity("smollm2-135m", out=tmp_path / "b", **knobs)
    assert [r["bytes"] for r in first["rows"]] == [12, 20]
    assert all(r["gain_bits_per_byte"] >= -1e-6 and r["marginal_forwards_per_byte"] > 0 for r in first["rows"])
    rows = (tmp_path / "b" / "documents.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in rows] == [0, 1]
    assert bench.measuring_order(5) == [0, 4, 1, 3, 2] and bench.measuring_order(0) == []
    # a rerun measures nothing: every row comes from the folder
    (tmp_path / "b" / "documents.jsonl").write_text(rows[0] + "\n")  # as if killed after the first document
    calls = []
    import ppl_tok.perplexity.score as score

    original = score.canonical_scores
    monkeypatch.setattr(score, "canonical_scores", lambda *a, **k: calls.append(1) or original(*a, **k))
    again = bench.bench_perplexity("smollm2-135m", out=tmp_path / "b", **knobs)
    assert len(calls) == 1 and again["rows"][0] == first["rows"][0]
    assert again["rows"][1]["bytes"] == 20
    with pytest.raises(SettingsMismatchError, match="beam"):
        bench.bench_perplexity("smollm2-135m", out=tmp_path / "b",
                               **{**knobs, "search": StringSearchConfig(beam=3, prune=3.0)})


def test_bench_lockstep_runs_fewer_calls_for_the_same_beams():
    from conftest import SHARED
    from ppl_tok.bench import perplexity as bench

    r = bench.bench_lockstep("smollm2-135m", data_dir=SHARED / "data", documents=3, min_bytes=15, max_bytes=30,
                             search=StringSearchConfig(beam=2, prune=3.0))
    assert r["alone"]["forwards"] == r["lockstep"]["forwards"] > 0
    assert r["lockstep"]["calls"] < r["alone"]["calls"] and r["calls_ratio"] > 1
    assert r["max_floor_difference_nats"] < 1e-3  # float32 rounding of batched rows only
    assert "fewer calls" in bench.format_lockstep(r)[-1]


def test_bench_prefixes_bounds_the_beams_error_where_the_bracket_closes(monkeypatch):
    from conftest import SHARED
    from ppl_tok.bench import perplexity as bench

    knobs = {"data_dir": SHARED / "data", "documents": 2, "min_bytes": 12, "max_bytes": 20}
    wide = bench.bench_prefixes("smollm2-135m", prefix_bytes=(6, 12), **knobs)
    assert [r["prefix_bytes"] for r in wide["rows"]] == [6, 12]
    for r in wide["rows"]:
        assert r["closed"] == r["documents"] == 2 and r["floor_above_bracket"] == 0
        assert 0 <= r["median_error_nats"] <= r["max_error_nats"] < 0.01  # beam 8 loses next to nothing here
        assert r["within_0.01_bits_per_byte"] == 2 and r["bracket_forwards_per_prefix"] > 0
        assert 0 <= r["max_certain_error_nats"] <= r["max_error_nats"]
    # a beam that lost half a nat of mass on every prefix is reported 0.5 nats further off
    import dataclasses

    import ppl_tok.strings as strings

    original = strings.string_marginals
    monkeypatch.setattr(strings, "string_marginals", lambda *a, **k: [
        dataclasses.replace(r, lower=r.lower - 0.5, estimate=r.estimate - 0.5) for r in original(*a, **k)])
    lossy = bench.bench_prefixes("smollm2-135m", prefix_bytes=(12,), **knobs)
    assert lossy["rows"][0]["max_error_nats"] == pytest.approx(wide["rows"][1]["max_error_nats"] + 0.5, abs=1e-4)
    assert lossy["rows"][0]["within_0.01_bits_per_byte"] == 0
    assert lossy["rows"][0]["max_certain_error_nats"] > 0.49
    assert "closed" in bench.format_prefixes(lossy)[1]
    with pytest.raises(ValueError, match="prefix_bytes"):
        bench.bench_prefixes("smollm2-135m", prefix_bytes=(), **knobs)


def test_differing_spans_and_their_kinds():
    from ppl_tok.perplexity.report import span_kind
    from ppl_tok.perplexity.score import differing_spans

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
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    corpus = read_corpus(path, field="text")
    run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", field="text", progress=False)
    report = study_report(tmp_path / "run", resamples=100, png=tmp_path / "gain.png")
    assert report["documents"] == len(DOCS) and (tmp_path / "gain.png").stat().st_size > 0
    kinds = report["span_kinds"]
    assert kinds["documents"] == len(DOCS)
    assert sum(kinds["gain_share"].values()) == pytest.approx(1.0) or kinds["documents_departing"] == 0
    shares = report["span_gain"]
    assert shares["documents"] == len(DOCS)
    assert sum(shares["gain_share"].values()) + shares["rest_share"] == pytest.approx(1.0)
    records = map(json.loads, open(tmp_path / "run" / "documents.jsonl"))
    gain = sum(s["log_likelihood"] - s["canonical"] for s in records)
    assert sum(shares["gain_nats"].values()) + shares["rest_nats"] == pytest.approx(gain, abs=1e-9)
    study_report(tmp_path / "run", resamples=100, spans_png=tmp_path / "spans.png")
    assert (tmp_path / "spans.png").stat().st_size > 0


def test_cli_marginal_json_reports_certified_figures(tmp_path, capsys, monkeypatch):
    import ppl_tok.lm.cards
    from ppl_tok.cli.main import main

    from ppl_tok.perplexity.score import MARGINAL_CACHE_BYTES

    lm = toy_lm()
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: lm)
    path = tmp_path / "c.txt"
    path.write_text("\n".join(DOCS) + "\n")
    assert main(["perplexity", str(path), "--split", "lines", "--scoring", "marginal", "--json",
                 "--out", str(tmp_path / "run")]) == 0
    assert lm.config.cache_bytes == MARGINAL_CACHE_BYTES  # the beam holds its own states: a small prefix cache
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert out["documents"] == len(DOCS) and len(out["per_document"]) == len(DOCS)
    assert out["certified"]["bits_per_byte_ceiling"] == pytest.approx(out["bits_per_byte"])
    assert out["canonical"]["bits_per_byte"] >= out["bits_per_byte"]
    assert out["gain_bits_per_byte"]["low"] <= out["gain_bits_per_byte"]["value"]
    assert (tmp_path / "run" / "documents.jsonl").read_text().count("\n") == len(DOCS)


def test_cli_rejects_an_unknown_scoring(tmp_path, capsys):
    from ppl_tok.cli.main import main

    path = tmp_path / "c.txt"
    path.write_text("ab\n")
    assert main(["perplexity", str(path), "--scoring", "nonsense"]) == 2
    assert "invalid choice: 'nonsense' (choose from 'canonical', 'beam', 'canonical+rest', 'marginal')" in \
        capsys.readouterr().err


def test_a_folder_stored_under_the_old_name_resumes(tmp_path):
    """Run folders written before the rename say ``marginal``: they resume, and read as ``beam``."""
    from ppl_tok.perplexity.report import read_scores

    corpus = corpus_from_texts(DOCS)
    run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", progress=False)
    settings_file = tmp_path / "run" / "run.json"
    old = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps({**old, "scoring": "marginal"}))
    again = run_perplexity(toy_lm(), corpus, ScoringConfig("marginal"), out=tmp_path / "run", progress=False)
    assert len(again) == len(DOCS) and json.loads(settings_file.read_text())["scoring"] == "marginal"
    settings, scores = read_scores(tmp_path / "run")
    assert settings["scoring"] == "beam" and len(scores) == len(DOCS)


def test_compare_runs_matches_documents_by_text(tmp_path):
    from ppl_tok.perplexity.report import compare_runs

    lm = toy_lm()
    for name, docs, beam in [("wide", DOCS, 16), ("narrow", DOCS[::-1], 1)]:  # the same texts, other indices
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
        run_perplexity(lm, read_corpus(path, field="text"), ScoringConfig("beam", search=StringSearchConfig(beam=beam)),
                       out=tmp_path / name, field="text", progress=False)
    out = compare_runs([tmp_path / "wide", tmp_path / "narrow"])
    assert out["documents"] == len(DOCS)
    wide, narrow = out["runs"]
    assert wide["share_of_first_gain"] == pytest.approx(1.0) and wide["largest_shortfall_nats"] == 0
    assert narrow["forwards_per_byte"] < wide["forwards_per_byte"]
    assert narrow["certified_gain_bits_per_byte"] <= wide["certified_gain_bits_per_byte"] + 1e-12
    assert narrow["largest_shortfall_nats"] >= 0


def test_importance_against_the_beams_floor(tmp_path):
    from ppl_tok.perplexity.report import importance_against_floor

    lm = toy_lm()
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    corpus = read_corpus(path, field="text")
    run_perplexity(lm, corpus, ScoringConfig("beam", search=StringSearchConfig(beam=100_000, prune=1e9)),
                   out=tmp_path / "m", field="text", progress=False)
    run_perplexity(lm, corpus, ScoringConfig("canonical+rest", num_samples=4), out=tmp_path / "is", field="text",
                   progress=False)
    out = importance_against_floor(tmp_path / "is", tmp_path / "m")
    assert out["documents"] == len(DOCS) and out["num_samples"] == 4
    bpb = out["bits_per_byte"]
    assert bpb["beam_floor"] <= bpb["canonical"] + 1e-12  # exact here: every tokenization summed
    q = out["importance_minus_floor_nats"]
    assert q["min"] <= q["median"] <= q["max"]
    assert 0 <= out["documents_below_floor"] <= len(DOCS)
