import json

import pytest

from conftest import LLAMA2
from ppl_tok.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_count_json_llama2(capsys):
    code, out, _ = run(capsys, "count", " Tokenizations grow rapidly with sentence length",
                       "--tokenizer", str(LLAMA2), "--json")
    assert code == 0 and json.loads(out) == {"text": " Tokenizations grow rapidly with sentence length",
                                             "count": 350973997920}


def test_tokenize(capsys):
    code, out, _ = run(capsys, "tokenize", " tongueless", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == 597
    assert [t["token"] for t in data["canonical"]] == ["\u0120tong", "uel", "ess"]


def test_mdd_exports(capsys, tmp_path):
    code, out, _ = run(capsys, "mdd", " Bird", "--tokenizer", str(LLAMA2), "--dot", str(tmp_path / "b.dot"),
                       "--png", str(tmp_path / "b.png"), "--json")
    assert code == 0 and json.loads(out)["count"] == 14
    assert (tmp_path / "b.dot").read_text().startswith("digraph")
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_score(capsys):
    code, out, _ = run(capsys, "score", " Paris", "--context", "The capital of France is", "--json")
    data = json.loads(out)
    assert code == 0 and -1.0 < data["canonical_log_prob"] < 0


@pytest.mark.parametrize("argv,message", [
    (["count", ""], "empty string"),
    (["count", "a\x04b"], "U+0004"),
    (["count", "x", "--model", "no-such-model"], "unknown model"),
    (["mdd", "x"], "--dot FILE"),
])
def test_errors_are_clear_and_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_bench_mdd_on_a_small_file(capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Tokenizations grow rapidly.\n\nWith sentence length.\n")
    code, out, _ = run(capsys, "bench", "mdd", "--data", str(text), "--models", "smollm2-135m",
                       "--naive-bytes", "40", "--json")
    row = json.loads(out)["results"][0]
    assert code == 0 and row["speedup"] > 1 and row["naive_bytes"] > 0


def test_marginal_exact_json(capsys):
    code, out, _ = run(capsys, "marginal", " tongueless", "--exact", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == 597
    assert data["exact_log_marginal"] == pytest.approx(-24.683, abs=1e-3)
    assert data["canonical_log_prob"] < data["log_marginal"]


def test_marginal_without_exact_says_what_is_missing(capsys):
    code, _, err = run(capsys, "marginal", " tongueless")
    assert code == 2 and "--exact" in err
