"""The tokenization commands (ppl_tok.cli.tokenization): tokenize, count, mdd, score, marginal, distribution,
canonicity, most-likely, sat."""

import json
import math

import pytest

from cli_run import run, strict_json
from conftest import LLAMA2


def test_count_json_llama2(capsys):
    code, out, _ = run(capsys, "count", " Tokenizations grow rapidly with sentence length",
                       "--tokenizer", str(LLAMA2), "--json")
    assert code == 0 and json.loads(out) == {"text": " Tokenizations grow rapidly with sentence length",
                                             "count": "350973997920", "log10_count": math.log10(350973997920)}


def test_tokenize(capsys):
    code, out, _ = run(capsys, "tokenize", " tongueless", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == "597"
    assert [t["token"] for t in data["canonical"]] == ["\u0120tong", "uel", "ess"]


def test_mdd_exports(capsys, tmp_path):
    code, out, _ = run(capsys, "mdd", " Bird", "--tokenizer", str(LLAMA2), "--dot", str(tmp_path / "b.dot"),
                       "--png", str(tmp_path / "b.png"), "--json")
    assert code == 0 and json.loads(out)["count"] == "14"
    assert (tmp_path / "b.dot").read_text().startswith("digraph")
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_score(capsys):
    code, out, _ = run(capsys, "score", " Paris", "--context", "The capital of France is", "--json")
    data = json.loads(out)
    assert code == 0 and -1.0 < data["canonical_log_prob"] < 0


@pytest.mark.slow
def test_marginal_json_with_exact_and_bounds(capsys):
    code, out, _ = run(capsys, "marginal", " tongueless", "--samples", "16", "--exact", "--bounds", "1e-3", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == "597" and data["num_samples"] == 16
    assert data["exact_log_marginal"] == pytest.approx(-24.683, abs=1e-3)
    assert data["lower"] <= data["exact_log_marginal"] <= data["upper"]
    # the bracket includes the rows' float32 rounding tolerance: 11 bytes, |V| = 49,152 -> 12 u (32 + 4 sqrt V)
    assert data["tolerance_nats"] == pytest.approx(12 * 2.0**-24 * (32 + 4 * 49152**0.5), rel=1e-6)
    assert data["informative"] and data["hint"] is None
    assert {"log_marginal", "canonical_log_prob", "ess", "canonical_estimate", "noncanonical_estimate"} <= set(data)


@pytest.mark.parametrize("proposal", ["uniform", "prior", "stratified"])
def test_marginal_proposals(capsys, proposal):
    code, out, _ = run(capsys, "marginal", " Tokens", "--samples", "8", "--proposal", proposal, "--json")
    data = json.loads(out)
    assert code == 0 and data["proposal"] == proposal
    if proposal == "stratified":
        assert data["log_marginal"] == pytest.approx(-18.5486, abs=1e-3)


def test_distribution_and_png(capsys, tmp_path):
    code, out, _ = run(capsys, "distribution", " Tokens", "--png", str(tmp_path / "d.png"), "--top", "5", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == "52" and len(data["top"]) == 5 and data["top"][0]["canonical"]
    assert (tmp_path / "d.png").stat().st_size > 1000


def test_canonicity(capsys, tmp_path):
    code, out, _ = run(capsys, "canonicity", "--samples", "4", "--max-tokens", "3", "--png", str(tmp_path / "c.png"),
                       "--json")
    data = json.loads(out)
    assert code == 0 and data["lengths"] == [1, 2, 3] and all(0 <= c <= 1 for c in data["canonical"])
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_most_likely(capsys):
    code, out, _ = run(capsys, "most-likely", " tongueless", "--json")
    data = json.loads(out)
    assert code == 0 and data["optimal"]
    assert [t["token"] for t in data["tokens"]] == ["\u0120tongue", "less"]
    assert data["log_prob"] > data["canonical_log_prob"]


def test_sat_mlt_and_msp(capsys, tmp_path):
    f = tmp_path / "f.cnf"
    f.write_text("p cnf 3 3\n1 -2 3 0\n-1 2 0\n2 3 0\n")
    code, out, _ = run(capsys, "sat", str(f), "--problem", "mlt", "--json")
    data = json.loads(out)
    assert code == 0 and data["satisfiable"] and data["string"] == "abcabcabcddd"
    clauses = [(1, -2, 3), (-1, 2), (2, 3)]
    assign = {int(k): v for k, v in data["assignment"].items()}
    assert all(any(assign[abs(lit)] == (lit > 0) for lit in c) for c in clauses)
    code, out, _ = run(capsys, "sat", str(f), "--problem", "msp", "--json")
    assert code == 0 and json.loads(out)["model_count"] == "4"
    u = tmp_path / "u.cnf"
    u.write_text("p cnf 1 2\n1 0\n-1 0\n")
    code, out, _ = run(capsys, "sat", str(u), "--json")
    assert code == 0 and json.loads(out)["satisfiable"] is False
    bad = tmp_path / "bad.cnf"
    bad.write_text("p cnf 2 5\n1 0\n")
    code, _, err = run(capsys, "sat", str(bad))
    assert code == 2 and "announces 5 clauses" in err


def test_counts_of_any_size_print(capsys, loaded):
    text = " tongueless" * 2000  # 22 kB: the count has more than 4300 digits
    code, out, _ = run(capsys, "count", text)
    assert code == 0 and len(out.strip()) > 4300
    code, out, _ = run(capsys, "count", text, "--json")
    data = json.loads(out)  # a JSON string: any reader takes it (a 5000-digit JSON number Python itself refuses)
    assert code == 0 and len(data["count"]) > 4300 and data["count"].isdigit()
    assert data["log10_count"] == pytest.approx(len(data["count"]) - 1, abs=1)
    code, out, _ = run(capsys, "tokenize", text, "--json")
    assert code == 0 and len(json.loads(out)["count"]) > 4300


@pytest.mark.parametrize("command", ["tokenize", "score", "marginal"])
def test_special_token_spellings_are_ordinary_text(capsys, loaded, command):
    extra = ["--samples", "4"] if command == "marginal" else []
    code, out, err = run(capsys, command, "<|endoftext|>", "--json", *extra)
    assert code == 0, err
    data = strict_json(out)
    assert all(t["id"] != 0 for t in data["canonical"])
    if "count" in data:
        assert data["count"] == "132"


def test_mdd_dot_dash_writes_standard_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "mdd", " Bird", "--tokenizer", str(LLAMA2), "--dot", "-")
    assert code == 0 and out.startswith("digraph") and "14 tokenizations" in err
    assert not (tmp_path / "-").exists()


def test_most_likely_top_k_lists_k_in_text(capsys, loaded):
    code, out, _ = run(capsys, "most-likely", " Tokens", "--top", "3")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[:3]] == ["most", "2.", "3."]


def test_sat_time_budget_bounds_a_hard_formula(capsys, tmp_path):
    from ppl_tok.sat import CNF

    f = tmp_path / "hard.cnf"
    f.write_text(CNF.random(20, 85, seed=0).to_dimacs())
    code, out, _ = run(capsys, "sat", str(f), "--time-budget", "1", "--json")
    assert code == 0 and strict_json(out)["satisfiable"] in (None, True)
    code, _, err = run(capsys, "sat", str(f), "--problem", "msp", "--time-budget", "1")
    assert code == 2 and "did not finish within 1 s" in err


def test_learn_proposal_then_marginal_with_it(capsys, tmp_path, monkeypatch):
    """learn-proposal trains (resuming an existing file) and marginal --proposal learned reads the file."""
    import ppl_tok.cli.common
    from toys import EXACT, LM, TEXT

    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: LM)
    words, out = tmp_path / "words.txt", tmp_path / "q.pt"
    words.write_text("abab\nbabb\n\nabba\n", encoding="utf-8")
    code, printed, _ = run(capsys, "learn-proposal", str(words), "--out", str(out), "--steps", "2", "--particles", "4",
                           "--json")
    assert code == 0 and json.loads(printed)["steps"] == 2 and json.loads(printed)["texts"] == 3
    code, printed, _ = run(capsys, "learn-proposal", str(words), "--out", str(out), "--steps", "3", "--particles", "4")
    assert code == 0 and "step 3" in printed
    code, printed, _ = run(capsys, "marginal", TEXT, "--samples", "256", "--proposal", "learned", "--proposal-file",
                           str(out), "--json")
    data = json.loads(printed)
    assert code == 0 and data["proposal"] == "learned_guide" and abs(data["log_marginal"] - EXACT.log_marginal) < 0.2


@pytest.mark.parametrize("argv, message", [
    (["--proposal", "learned"], "--proposal learned and --proposal-file F go together"),
    (["--proposal-file", "q.pt"], "--proposal learned and --proposal-file F go together"),
    (["--proposal", "learned", "--proposal-file", "missing.pt"], "no learned proposal at missing.pt"),
])
def test_marginal_learned_needs_its_file_before_any_model_loads(capsys, no_work, argv, message):
    code, _, err = run(capsys, "marginal", " Tokens", *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
