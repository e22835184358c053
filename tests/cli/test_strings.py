"""``ppl-tok conditional``, ``generate`` and ``next`` on the bundled SmolLM2."""

import json
import math

import pytest

import ppl_tok.cli.common
from ppl_tok.cli.main import main
from ppl_tok.strings import string_conditional


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_conditional_fixes_the_prompt_boundary(capsys, smollm2):
    code, out, _ = run(capsys, "conditional", "--prompt", "The capital of France is P", "aris", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["lower"] <= data["estimate"] <= data["upper"] <= 0.0
    assert data["estimate"] > -0.1  # "P" then "aris": near certain over strings ...
    assert data["canonical_tokens"] < -10  # ... and very unlikely after the canonical token "P"
    code, out, _ = run(capsys, "conditional", "--prompt", " wo", "rld", "--beam", "2")
    assert code == 0 and "certified in [" in out


def test_conditional_through_the_tree(capsys, smollm2):
    """--search tree: the items through the token tree (its own estimand); here every factor's head ends before the
    reach of the join, so the figure is the walk's to float tolerance."""
    args = ("conditional", "--prompt", "The capital of France is P", "aris", "--json")
    walk = json.loads(run(capsys, *args)[1])
    code, out, _ = run(capsys, *args, "--search", "tree")
    tree = json.loads(out)
    assert code == 0 and tree["prefill"] == "tree" and tree["greedy"] is None
    assert tree["lower"] <= tree["estimate"] <= tree["upper"] <= 0.0
    assert tree["estimate"] == pytest.approx(walk["estimate"], abs=1e-3)
    assert tree["canonical_tokens"] == pytest.approx(walk["canonical_tokens"], abs=1e-4)


def test_generate_greedy_and_stop(capsys, smollm2):
    code, out, _ = run(capsys, "generate", "--prompt", "The capital of France is", "--max-bytes", "12", "--greedy",
                       "--stop", ".", "--json")
    data = json.loads(out)
    assert code == 0 and data["text"] == " Paris" and data["stopped"] == "stop"
    for mode in ("tokens", "bytes"):
        code, out, _ = run(capsys, "generate", "--prompt", "Once", "--max-bytes", "4", "--seed", "3", "--mode", mode)
        assert code == 0 and out.startswith("Once") and f"bytes (max-bytes, {mode} mode)" in out


@pytest.mark.slow  # three next-byte and next-character rows on SmolLM2: about 14 CPU-s
def test_next_bytes_and_characters(capsys, smollm2):
    code, out, _ = run(capsys, "next", "--prompt", "The capital of France is P", "--json")
    data = json.loads(out)
    assert code == 0 and data["unit"] == "byte"
    assert max(data["log_probs"], key=data["log_probs"].get) == str(ord("a"))
    assert abs(math.fsum(math.exp(v) for v in data["log_probs"].values()) - 1) < 1e-9
    code, out, _ = run(capsys, "next", "--prompt", "caf", "--chars", "--json")
    data = json.loads(out)
    assert code == 0 and data["unit"] == "char" and max(data["chars"], key=lambda c: data["chars"][c][0]) == "é"
    total = [e[0] for e in data["chars"].values()] + [data["end"][0], data["other"]]
    assert abs(math.fsum(math.exp(v) for v in total) - 1) < 1e-6
    code, out, _ = run(capsys, "next", "--prompt", "caf", "--chars", "--top", "3")
    assert code == 0 and len([line for line in out.splitlines() if "[" in line]) == 4  # the prefix line + 3 rows


def test_bad_arguments_exit_2_with_one_line(capsys):
    for argv, message in [(["generate", "--top-p", "1.5"], "argument --top-p: expected a share of the mass in (0, 1]"),
                          (["generate", "--max-bytes", "0"], "expected an integer >= 1"),
                          (["generate", "--mode", "tokens", "--greedy"], "mode 'tokens'"),
                          (["conditional", "aris"], "--prompt"),
                          (["conditional", "--prompt", "a", "b", "--beam", "0"], "expected an integer >= 1")]:
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv,message", [
    (["next", "--chars", "--min-log-prob", "nan"], "argument --min-log-prob: expected a finite number of nats or -inf"),
    (["next", "--chars", "--min-log-prob", "inf"], "argument --min-log-prob: expected a finite number"),
    (["next", "--min-log-prob", "-5"], "--min-log-prob applies to --chars only"),
    (["generate", "--greedy", "--temperature", "0.5"], "--greedy takes the most probable byte"),
    (["generate", "--greedy", "--top-p", "0.9"], "--temperature and --top-p do not apply"),
    (["generate", "--max-bytes", "100000"], "more than the limit generated_bytes=65,536"),
])
def test_string_commands_refuse_before_the_model_loads(capsys, no_work, argv, message):
    """Issue 37: `--min-log-prob nan` was named by its Python name after the model loaded; the rest ran."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and message in err and out == "" and len(err.strip().splitlines()) == 1, err


def test_bos_id_is_checked_against_the_vocabulary_before_the_weights_load(capsys, monkeypatch, smollm2_vocab):
    def refuse(*a, **k):
        raise AssertionError("the weights loaded before --bos-id was checked")

    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", refuse)
    monkeypatch.setattr(ppl_tok.cli.common, "load_vocabulary", lambda *a, **k: smollm2_vocab)
    for argv in (["next", "--prompt", "a"], ["conditional", "--prompt", "a", "b"], ["score", "x"]):
        code, _, err = run(capsys, *argv, "--bos-id", "999999")
        assert code == 2 and "--bos-id 999999 is not a token of smollm2-135m (ids 0..49151)" in err, err


def test_a_prompt_past_the_window_is_refused_before_any_walk(capsys, loaded):
    """SmolLM2 splits digits: 10,000 of them need 10,001 positions at least, past its window of 8,192. `next`
    and `generate` did not check; `conditional` warned "scored out of distribution" and walked for hours."""
    before = loaded.stats.forwards
    digits = "1234567890" * 1000
    for argv in (["next", "--prompt", digits], ["generate", "--prompt", digits],
                 ["conditional", "--prompt", digits, "1"], ["marginal", digits]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "needs 1000" in err and "context window of 8192" in err, err
        assert "shorten" in err and len(err.strip().splitlines()) == 1
    assert loaded.stats.forwards == before


def test_next_shows_whitespace_and_flags_uninformative_rows(capsys, loaded):
    code, out, _ = run(capsys, "next", "--prompt", "The cat", "--top", "5")
    assert code == 0 and "\u2420" in out.split("\n", 2)[2]  # " " after "The cat" shown as ␠
    code, out, _ = run(capsys, "next", "--prompt", "The quick brown fox jumps over the", "--beam", "1", "--prune", "1",
                       "--prefill", "exact", "--json")
    data = json.loads(out)
    assert data["tolerance_nats"] > 0 and data["prefix"]["tolerance_nats"] == data["tolerance_nats"]
    assert data["informative"] is False and data["uninformative_rows"]
    assert data["hint"].startswith("uninformative") and "a wider beam (now 1)" in data["hint"]


def test_generate_in_tokens_mode_reports_a_certified_log_probability(capsys, loaded):
    code, out, _ = run(capsys, "generate", "--prompt", "Once upon a", "--max-bytes", "8", "--seed", "1", "--json")
    data = json.loads(out)
    assert code == 0 and data["mode"] == "tokens" and data["log_prob"] is None
    assert data["log_prob_lower"] <= 0 and data["tokens_log_prob"] < 0
    cond = string_conditional(loaded, "Once upon a", data["text"], event="prefix")  # the bytes drawn, as a prefix
    assert data["log_prob_lower"] <= cond.upper
    code, out, _ = run(capsys, "generate", "--prompt", "Once upon a", "--max-bytes", "8", "--seed", "1")
    assert code == 0 and "log p >= " in out



@pytest.mark.slow  # four generations on SmolLM2 through the command line: about 16 CPU-s
def test_generate_canonical_draws_canonical_tokens(capsys, smollm2):
    """``generate --canonical``: the prompt's tokens and the drawn ones are the encoding of their text; seeded;
    the flags of byte sampling are refused, one clear error each."""
    argv = ("generate", "--canonical", "--prompt", "The capital of France is", "--max-bytes", "20", "--json")
    code, out, _ = run(capsys, *argv, "--seed", "2")
    data = json.loads(out)
    assert code == 0 and data["canonical"] and data["tokens"]
    vocab = smollm2.vocab
    assert vocab.encode(data["prompt"] + data["text"]) == vocab.encode(data["prompt"]) + data["tokens"]
    assert data["log_prob_local"] >= data["log_prob"] - 1e-9
    assert json.loads(run(capsys, *argv, "--seed", "2")[1])["tokens"] == data["tokens"]
    for flag in (["--greedy"], ["--temperature", "0.5"], ["--stop", "x"]):
        code, _, err = run(capsys, *argv, *flag)
        assert code != 0 and f"{flag[0]} does not apply" in err
