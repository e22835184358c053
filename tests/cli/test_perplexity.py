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
