"""``ppl-tok conditional``, ``generate`` and ``next`` on the bundled SmolLM2."""

import json
import math

from ppl_tok.cli.main import main


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


def test_generate_greedy_and_stop(capsys, smollm2):
    code, out, _ = run(capsys, "generate", "--prompt", "The capital of France is", "--max-bytes", "12", "--greedy",
                       "--stop", ".", "--json")
    data = json.loads(out)
    assert code == 0 and data["text"] == " Paris" and data["stopped"] == "stop"
    for mode in ("tokens", "bytes"):
        code, out, _ = run(capsys, "generate", "--prompt", "Once", "--max-bytes", "4", "--seed", "3", "--mode", mode)
        assert code == 0 and out.startswith("Once") and f"bytes (max-bytes, {mode} mode)" in out


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
    for argv, message in [(["generate", "--top-p", "1.5"], "top_p must be in (0, 1]"),
                          (["generate", "--max-bytes", "0"], "expected an integer >= 1"),
                          (["generate", "--mode", "tokens", "--greedy"], "mode 'tokens'"),
                          (["conditional", "aris"], "--prompt"),
                          (["conditional", "--prompt", "a", "b", "--beam", "0"], "expected an integer >= 1")]:
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
