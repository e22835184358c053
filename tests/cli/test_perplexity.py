"""``ppl-tok perplexity-report`` (``ppl_tok/cli/perplexity.py``): the study figures of a run folder through the
command line, and its bad input as one-line errors (no traceback)."""

import json

import pytest

import ppl_tok.lm.cards
from ppl_tok.cli.main import main
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.run import run_perplexity
from qa_toy import toy_lm
import math
import os
import subprocess
import sys
from ppl_tok.perplexity import (
    count_words,
)
from tests.perplexity import DOCS as PPL_DOCS, TESTS

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
    assert main(["perplexity-report", str(run_folder), "--resamples", "50", "--seed", "7", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents"] == len(DOCS) and report["bootstrap"] == {"resamples": 50, "seed": 7}
    assert main(["perplexity-report", str(run_folder), "--resamples", "50", "--seed", "7"]) == 0
    text = capsys.readouterr().out  # a readable table: the figures and the bootstrap that made the interval
    assert f"documents: {len(DOCS)}" in text and "bootstrap: resamples 50, seed 7" in text
    assert "gain_bits_per_byte: " in text and not text.lstrip().startswith("{")
    assert main(["perplexity-report", str(run_folder), "--resamples", "50", "--seed", "7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == report  # the seed repeats the interval
    assert main(["perplexity-report", str(run_folder), "--compare", str(run_folder), "--json"]) == 0
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


def test_perplexity_compare_prints_a_table_and_strict_json(run_folder, tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    run_perplexity(toy_lm(1), read_corpus(path, field="text"), ScoringConfig("beam"), out=tmp_path / "other",
                   model="toy-other", field="text", progress=False)
    assert main(["perplexity-compare", str(run_folder), str(tmp_path / "other"), "--resamples", "30"]) == 0
    text = capsys.readouterr().out
    assert "toy-bigram - toy-other" in text and "30 resamples, seed 0" in text
    assert main(["perplexity-compare", str(run_folder), str(tmp_path / "other"), "--json", "--seed", "4"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert report["bootstrap"]["seed"] == 4 and report["scorings"][0]["differences"][0]["minus"] == "toy-other"
    assert main(["perplexity-compare", str(run_folder), str(tmp_path / "missing")]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert main(["perplexity-compare", str(run_folder), str(run_folder)]) == 2
    err = capsys.readouterr().err
    assert "every folder is a run of toy-bigram" in err and len(err.strip().splitlines()) == 1


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


def test_cli_marginal_json_reports_certified_figures(tmp_path, capsys, monkeypatch):
    import ppl_tok.lm.cards
    from ppl_tok.cli.main import main

    from ppl_tok.scorings.documents import MARGINAL_CACHE_BYTES

    lm = toy_lm()
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: lm)
    path = tmp_path / "c.txt"
    path.write_text("\n".join(PPL_DOCS) + "\n")
    assert main(["perplexity", str(path), "--split", "lines", "--scoring", "marginal", "--json",
                 "--out", str(tmp_path / "run")]) == 0
    assert lm.config.cache_bytes == MARGINAL_CACHE_BYTES  # the beam holds its own states: a small prefix cache
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert out["documents"] == len(PPL_DOCS) and len(out["per_document"]) == len(PPL_DOCS)
    assert out["certified"]["bits_per_byte_ceiling"] == pytest.approx(out["bits_per_byte"])
    assert out["canonical"]["bits_per_byte"] >= out["bits_per_byte"]
    assert out["gain_bits_per_byte"]["low"] <= out["gain_bits_per_byte"]["value"]
    assert (tmp_path / "run" / "documents.jsonl").read_text().count("\n") == len(PPL_DOCS)


def test_cli_rejects_an_unknown_scoring(tmp_path, capsys):
    from ppl_tok.cli.main import main

    path = tmp_path / "c.txt"
    path.write_text("ab\n")
    assert main(["perplexity", str(path), "--scoring", "nonsense"]) == 2
    assert ("invalid choice: 'nonsense' (choose from 'canonical', 'beam', 'prefix', 'with-end', 'canonical+rest', "
            "'canonical-local', 'canonical-global', 'tree', 'marginal')") in capsys.readouterr().err


def test_search_budget_and_its_old_name_budget_set_the_beam_budget_within_the_limit(tmp_path, capsys, monkeypatch):
    import ppl_tok.lm.cards
    from ppl_tok.cli.main import main

    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: toy_lm())
    path = tmp_path / "c.txt"
    path.write_text("\n".join(PPL_DOCS) + "\n")
    for flag in ("--search-budget", "--budget"):
        out = tmp_path / flag.strip("-")
        assert main(["perplexity", str(path), "--split", "lines", "--scoring", "beam", flag, "5", "--json",
                     "--out", str(out)]) == 0
        assert json.loads((out / "run.json").read_text())["budget"] == 5
        err = capsys.readouterr().err
        deprecated = "warning: --budget is deprecated and will be removed: use --search-budget"
        assert (deprecated in err) == (flag == "--budget"), err
    monkeypatch.setenv("PPL_TOK_MAX_SEARCH_FORWARDS", "4")
    assert main(["perplexity", str(path), "--scoring", "beam", "--search-budget", "5"]) == 2
    assert "--search-budget" in capsys.readouterr().err


def test_canonical_plus_rest_with_a_learned_proposal_records_its_checksum(tmp_path, monkeypatch, capsys):
    from qa_toy import learned_proposal_file

    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: toy_lm())
    proposal = learned_proposal_file(tmp_path / "q.pt", toy_lm())
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    base = ["perplexity", str(path), "--field", "text", "--model", "toy", "--scoring", "canonical+rest",
            "--samples", "4", "--json"]
    assert main([*base, "--proposal", "learned", "--proposal-file", str(proposal), "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    settings = json.loads((tmp_path / "r" / "run.json").read_text())
    assert settings["proposal"] == "learned" and len(settings["proposal_sha256"]) == 64
    assert main([*base, "--out", str(tmp_path / "r")]) == 2  # the look-ahead into the learned run's folder
    assert "proposal" in capsys.readouterr().err
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", _no_model)
    assert main(["perplexity", str(path), "--field", "text", "--proposal", "learned", "--proposal-file",
                 str(proposal)]) == 2
    err = capsys.readouterr().err
    assert "is the importance proposal of --scoring canonical+rest" in err and len(err.strip().splitlines()) == 1


def test_the_beam_default_is_the_measured_lazy_setting_and_exhaustive_is_one_flag(tmp_path, capsys, monkeypatch):
    from ppl_tok.scorings.registry import BEAM_LAZY_DEFAULT

    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: toy_lm())
    path = tmp_path / "c.txt"
    path.write_text("\n".join(PPL_DOCS) + "\n")
    base = ["perplexity", str(path), "--split", "lines", "--scoring", "beam", "--json"]
    assert main([*base, "--out", str(tmp_path / "lazy")]) == 0
    assert main([*base, "--exhaustive", "--out", str(tmp_path / "full")]) == 0
    capsys.readouterr()
    lazy, full = (json.loads((tmp_path / r / "run.json").read_text()) for r in ("lazy", "full"))
    shares = {k: v for k, v in BEAM_LAZY_DEFAULT.items() if v is not None}
    assert lazy["exhaustive"] is False and {k: lazy.get(k) for k in shares} == shares
    assert full["exhaustive"] is True and "extend_threshold" not in full
    # a resume under the other setting is refused, naming the flag that resumes it
    assert main([*base, "--out", str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err
    assert "exhaustive: folder has True, this run has False (the folder's run: --exhaustive)" in err
    assert main([*base, "--exhaustive", "--out", str(tmp_path / "lazy")]) == 2
    assert "exhaustive: folder has False, this run has True" in capsys.readouterr().err
    assert main([*base, "--exhaustive", "--out", str(tmp_path / "full")]) == 0  # the same setting resumes
    capsys.readouterr()
    # explicit shares replace the default; --exhaustive with one is an error, and with no beam an ignored flag
    assert main([*base, "--extend-threshold", "0.01", "--out", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "s" / "run.json").read_text())["extend_threshold"] == 0.01
    assert "boundary_threshold" not in json.loads((tmp_path / "s" / "run.json").read_text())
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", _no_model)
    assert main([*base, "--exhaustive", "--extend-threshold", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "--exhaustive runs every kept prefix but --extend-threshold sets lazy extension" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["perplexity", str(path), "--exhaustive"]) == 2
    err = capsys.readouterr().err
    assert "--exhaustive would be ignored: --scoring canonical does not read it (it takes no flags of its own; " \
           "--exhaustive is for --scoring beam, prefix, with-end, tree)" in err
