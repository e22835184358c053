"""``ppl-tok perplexity-report`` (``ppl_tok/cli/perplexity.py``): the study figures of a run folder through the
command line, and its bad input as one-line errors (no traceback)."""

import json

import pytest

import ppl_tok.lm.cards
from ppl_tok.cli.main import main
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.run import run_perplexity
from qa_toy import toy_lm

DOCS = ["a b c", "ab ba", "c a b b"]


@pytest.fixture
def run_folder(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    run_perplexity(toy_lm(), read_corpus(path, field="text"), ScoringConfig("beam"), out=tmp_path / "run",
                   field="text", progress=False)
    return tmp_path / "run"


def test_the_report_of_a_folder_and_a_comparison(run_folder, monkeypatch, capsys):
    monkeypatch.setattr(ppl_tok.lm.cards, "load_vocabulary", lambda *a, **k: toy_lm().vocab)
    assert main(["perplexity-report", str(run_folder), "--resamples", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents"] == len(DOCS)
    assert main(["perplexity-report", str(run_folder), "--compare", str(run_folder)]) == 0
    assert json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["{tmp}/missing"], "is not a run folder"),
    (["{run}", "--resamples", "0"], "argument --resamples"),
    (["{run}", "--png", "{tmp}/no/such/folder/x.png"], "argument --png"),
    (["{run}", "--compare", "{run}", "--importance", "{run}"], "not allowed with argument"),
    (["{run}", "--compare", "{tmp}/missing"], "is not a run folder"),
])
def test_bad_input_is_one_line(run_folder, tmp_path, capsys, argv, message):
    argv = [a.format(tmp=tmp_path, run=run_folder) for a in argv]
    assert main(["perplexity-report", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ------------------------------------------------------------ perplexity: refused before the model loads
def _no_model(*args, **kwargs):
    raise AssertionError("the model was loaded before the input was checked")


@pytest.mark.parametrize("line, message", [
    ('{"text": "\\ud800x"}', "c.jsonl:2: field 'text' holds a lone surrogate '\\ud800' at character 0"),
    ('{"text": "a\\u0000b"}', "c.jsonl:2: field 'text' holds a NUL character (an escaped \\u0000) at character 1"),
])
def test_a_jsonl_string_that_is_not_text_is_a_file_line_error(tmp_path, monkeypatch, capsys, line, message):
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", _no_model)
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a b"}\n' + line + "\n")
    assert main(["perplexity", str(path), "--field", "text"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("env, message", [
    ({"PPL_TOK_MAX_TEXT_BYTES": "8"}, "c.txt:1: document 0's length in bytes is 11, more than the limit text_bytes=8"),
    ({"PPL_TOK_MAX_CORPUS_BYTES": "8"}, "c.txt's length in bytes is 11, more than the limit corpus_bytes=8"),
])
def test_the_input_size_is_checked_before_the_model_loads(tmp_path, monkeypatch, capsys, env, message):
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", _no_model)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    path = tmp_path / "c.txt"
    path.write_text("a b c a b c")
    assert main(["perplexity", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_out_naming_a_file_is_one_line_before_the_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", _no_model)
    path = tmp_path / "c.txt"
    path.write_text("a b")
    assert main(["perplexity", str(path), "--out", str(path)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a run folder" in err and len(err.strip().splitlines()) == 1
