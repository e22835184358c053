"""``ppl-tok adversarial``: the certified search and the sampled mode on SmolLM2, and its one-line errors."""

import pytest

from cli_run import run, strict_json


def test_search_closes_over_a_small_ball(capsys, loaded):
    code, out, _ = run(capsys, "adversarial", "Is a whale a fish?", "--target", " yes", "--distance", "2",
                       "--suffix", "\nAnswer:", "--json")
    assert code == 0
    r = strict_json(out)
    assert r["mode"] == "search" and r["closed"] and r["size"] == "8"
    assert r["bound"] == r["best_log_prob"] >= r["canonical_log_prob"]
    assert r["scored"] + r["pruned"] == 8 and r["forwards"] > 0


def test_budget_gives_a_bracket_and_sampled_mode(capsys, loaded):
    code, out, _ = run(capsys, "adversarial", "Is a whale a fish?", "--target", " yes", "--exact-budget", "60")
    assert code == 0 and "bracket:" in out and ".. 0.0000 over the whole set (stopped: budget" in out
    assert "certified:  the max over the " in out and "tokenizations within distance" in out
    code, out, _ = run(capsys, "adversarial", "Is a whale a fish?", "--target", " yes", "--distance", "2",
                       "--samples", "4", "--threshold", "-5", "--json")
    r = strict_json(out)
    assert code == 0 and r["mode"] == "sample" and r["samples"] == 4 and 0 <= r["fraction_above"] <= 1


@pytest.mark.parametrize("argv, message", [
    (["", "--target", "x"], "the text is empty"),
    (["abc", "--target", "x\udcff"], "--target has the byte 0xFF"),
    (["abc", "--target", " x", "--distance", "9"], "distance 9 is outside 0..3"),
    (["abc", "--target", " x", "--exact-budget", "0"], "expected an integer >= 1, got 0"),
])
def test_bad_input_is_one_line(capsys, loaded, argv, message):
    code, out, err = run(capsys, "adversarial", *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
