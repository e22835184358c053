"""The hostile suite of issue 56 (round four), certificates, resumable files and bounds.

The endings of the suites of issues 37 and 50 (``test_hostile_strings``, whose files, toy loader and
``refused`` this suite shares): refused in one line (before the model loads, where the loader counts its
calls), or answered with a figure checked against the same figure computed another way.
"""

from __future__ import annotations

import json

import pytest

from ppl_tok.cli.main import main
from ppl_tok.infer.adversarial import brute_force
from tests.suites.test_hostile_strings import LM, refused, world  # noqa: F401 - the shared fixture


# ------------------------------------------------------------ 2. a certificate says only what was proved
def test_a_threshold_above_the_max_gives_at_most_the_threshold_never_a_false_max(capsys, world):
    """``adversarial ... --threshold -0.6`` printed "certified: the max over all 19 tokenizations is -1.2048"
    where the max was -0.7044: members between the incumbent and the threshold are pruned unscored."""
    rows = brute_force(LM, "abc abc", "b", distance=3)
    truth, canon = max(f for *_, f in rows), [f for _, d, f in rows if d == 0][0]
    assert canon < truth < -0.6  # the case: the max lies between the canonical's score and the threshold
    argv = ["adversarial", "abc abc", "--target", "b", "--distance", "3", "--model", "toy-bigram", "--threshold"]
    assert main(argv + ["-0.6"]) == 0
    out = capsys.readouterr().out
    assert f"the max over all {len(rows)} tokenizations in the set is at most -0.6000" in out, out
    assert f"the best scored is {canon:.4f}" in out and f"in the set is {canon:.4f}" not in out
    assert main(argv + ["-0.6", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["certificate"] == "at-most" and r["certified_high"] == -0.6 and r["certified_low"] == canon
    assert main(argv + [str(truth - 1.0), "--json"]) == 0  # a threshold below the max: the max is exact
    r = json.loads(capsys.readouterr().out)
    assert r["certificate"] == "exact" and r["certified_low"] == pytest.approx(truth, abs=1e-12)


def test_stop_above_without_a_threshold_is_refused(capsys, world):
    refused(capsys, world, ["adversarial", "abc abc", "--target", "b", "--model", "toy-bigram", "--stop-above"],
            ["--stop-above", "--threshold"])


# ------------------------------------------------------------ 5. bounded and visible
@pytest.mark.parametrize("argv, needles", [
    (["adversarial", "a" * 17_000, "--target", "b"], ["prefix plus prompt plus suffix plus target in bytes is 17,001",
                                                      "lm_bytes=16,384"]),
    (["adversarial", "abc", "--target", "b", "--suffix", "c" * 16_400], ["is 16,404", "lm_bytes"]),
    (["adversarial", "abc", "--target", "b", "--batch-size", "100000"], ["the batch", "limit search_batch=4,096"]),
    (["adversarial", "abc", "--target", "b", "--exact-budget", "2000000"], ["--exact-budget is 2,000,000", "search_forwards"]),
    (["adversarial", "abc", "--target", "b", "--minimize", "--threshold", "-1"], ["--threshold", "--minimize"]),
    (["adversarial", "abc", "--target", "b", "--samples", "4", "--exact-budget", "50"], ["--exact-budget would be ignored",
                                                                                 "--samples"]),
])
def test_adversarial_checks_sizes_and_counts_before_the_load(capsys, world, argv, needles):
    refused(capsys, world, argv + ["--model", "toy-bigram"], needles)


def test_adversarial_without_limits_stops_at_its_default_budget_and_says_what_it_certified(capsys, world,
                                                                                          monkeypatch):
    """With no --distance or budget it ran "until the certificate closes", which it never did, with no output."""
    import ppl_tok.infer.adversarial

    assert ppl_tok.infer.adversarial.DEFAULT_BUDGET == 20_000
    DEFAULT_BUDGET = 1_000  # the same rule at a toy's scale: the command reads the default when it runs
    monkeypatch.setattr(ppl_tok.infer.adversarial, "DEFAULT_BUDGET", DEFAULT_BUDGET)
    prompt = " ab cd abc de ba ab"  # 1,440 tokenizations: brute force can check the ball it closed
    assert main(["adversarial", prompt, "--target", "b", "--model", "toy-bigram", "--json", "--progress"]) == 0
    out, err = capsys.readouterr()
    r = json.loads(out)
    assert not r["closed"] and r["stopped"] == "budget" and 0 < r["forwards"] <= DEFAULT_BUDGET
    assert r["certificate"] == "exact" and r["complete_within"] >= 2 and int(r["certified_size"]) < int(r["size"])
    assert r["certified"].startswith(f"the max over the {r['certified_size']} tokenizations within distance "
                                     f"{r['complete_within']} ")
    assert "adversarial" in err and "examined" in err  # the progress line
    rows = brute_force(LM, prompt, "b", distance=r["complete_within"])
    assert r["certified_low"] == pytest.approx(max(f for *_, f in rows), abs=1e-9) and len(rows) == int(
        r["certified_size"])
    assert main(["adversarial", prompt, "--target", "b", "--model", "toy-bigram"]) == 0
    assert "the default budget: give --exact-budget FORWARDS for more" in capsys.readouterr().out


# ------------------------------------------------------------ 3. every resumable file refuses foreign settings
def _checkpoints_only(capsys, tmp, flags):
    """A run folder holding only ``partial.jsonl`` (its run.json and records removed, as by ``cp`` of one file)."""
    assert main(["perplexity", str(tmp / "ok.jsonl"), "--field", "text", "--scoring", "beam", "--model",
                 "toy-bigram", "--checkpoint-every", "1e-9", "--out", str(tmp / "ck"), *flags]) == 0
    capsys.readouterr()
    partial = tmp / "ck" / "partial.jsonl"
    assert len(partial.read_text().splitlines()) > 3
    (tmp / "ck" / "run.json").unlink()
    (tmp / "ck" / "documents.jsonl").write_text("")
    return partial


def test_a_folder_holding_only_checkpoints_is_not_adopted_under_other_settings(capsys, world):
    """A ``--beam 2 --prune 3`` run's checkpoints were continued as ``--beam 8`` (147 forwards where a clean run
    takes 402) and run.json then written with the new settings."""
    tmp, _ = world
    partial = _checkpoints_only(capsys, tmp, ["--beam", "2", "--prune", "3"])
    argv = ["perplexity", "{tmp}/ok.jsonl", "--field", "text", "--scoring", "beam", "--model", "toy-bigram",
            "--out", "{tmp}/ck"]
    refused(capsys, world, argv + ["--beam", "8", "--prune", "3"],
            ["{tmp}/ck/partial.jsonl", "other settings", "beam: folder has 2, this run has 8 (the folder's run: --beam 2)"],
            before_load=False)
    assert not (tmp / "ck" / "run.json").exists()
    lines = partial.read_text().splitlines(keepends=True)
    partial.write_text("".join(lines[1:]))  # an older ppl-tok's checkpoints: no settings line
    refused(capsys, world, argv + ["--beam", "2", "--prune", "3"],
            ["{tmp}/ck/partial.jsonl", "not the settings", "new --out folder"], before_load=False)
    partial.write_text("".join(lines))  # under its own settings it resumes, to the figures of a clean run
    assert main([a.format(tmp=tmp) for a in argv] + ["--beam", "2", "--prune", "3", "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert main(["perplexity", str(tmp / "ok.jsonl"), "--field", "text", "--scoring", "beam", "--model",
                 "toy-bigram", "--beam", "2", "--prune", "3", "--json"]) == 0
    clean = json.loads(capsys.readouterr().out)
    assert resumed["bits_per_byte"] == pytest.approx(clean["bits_per_byte"], abs=1e-9)


def _learn(tmp, *flags, words="words.txt"):
    return ["learn-proposal", str(tmp / words), "--out", str(tmp / "P.pt"), "--model", "toy-bigram",
            "--steps", "2", "--particles", "4", *flags]


@pytest.fixture
def trained(capsys, world):
    """A proposal file of two training steps on the toy LM (``P.pt``) and its word list."""
    tmp, loads = world
    (tmp / "words.txt").write_text("abc\n ab cd\nbab\n")
    assert main(_learn(tmp) + ["--json"]) == 0
    capsys.readouterr()
    loads.clear()
    return tmp


@pytest.mark.parametrize("flags, needle", [
    (["--lr", "20"], "lr: file has 0.1, this run has 20.0 (--lr 0.1 resumes it)"),
    (["--seed", "3"], "seed: file has 0, this run has 3"),
    (["--particles", "8"], "particles: file has 4, this run has 8"),
])
def test_learn_proposal_refuses_a_resume_under_other_settings_before_the_load(capsys, world, trained, flags,
                                                                               needle):
    """It resumed under another lr, seed or particle count and rewrote its record as if all steps were so."""
    before = (trained / "P.pt").read_bytes()
    argv = _learn(trained, *flags)
    argv[argv.index("--steps") + 1] = "4"  # a repeated flag: argparse takes the last
    refused(capsys, world, [a.replace(str(trained), "{tmp}") for a in argv], ["{tmp}/P.pt", "other settings", needle])
    assert (trained / "P.pt").read_bytes() == before


def test_learn_proposal_refuses_another_word_list_and_another_model(capsys, world, trained):
    (trained / "other.txt").write_text("abc\nbab\n")
    refused(capsys, world, _learn(trained, words="other.txt"), ["{tmp}/P.pt", "texts_sha256: file has"])
    argv = _learn(trained)
    argv[argv.index("toy-bigram")] = "toy-bigram-2"
    refused(capsys, world, argv, ["{tmp}/P.pt", "model: file has 'toy-bigram', this run has 'toy-bigram-2'"],
            before_load=False)
    (trained / "crlf.txt").write_bytes(b"abc\r\n ab cd\r\nbab\r\n")  # the same words with CRLF: the same list
    argv = _learn(trained, "--json", words="crlf.txt")
    argv[argv.index("--steps") + 1] = "3"
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["steps"] == 3


def test_learn_proposal_checks_its_out_file_sizes_and_counts_before_the_load(capsys, world, trained):
    tmp = trained
    refused(capsys, world, _learn(tmp)[:3] + ["{tmp}/nodir/x.pt"] + _learn(tmp)[4:],
            ["--out {tmp}/nodir/x.pt", "{tmp}/nodir does not exist"])
    refused(capsys, world, _learn(tmp)[:3] + [""] + _learn(tmp)[4:], ["--out ''", "not a file"])
    (tmp / "long.txt").write_text("abc\n" + "ab" * 9000 + "\n")
    refused(capsys, world, _learn(tmp, words="long.txt"), ["{tmp}/long.txt:2's length in bytes is 18,000",
                                                           "lm_bytes=16,384"])
    refused(capsys, world, _learn(tmp)[:-2] + ["--particles", "2000000"], ["--particles", "limit samples"])


@pytest.mark.parametrize("weights", [["-50", "0", "0", "0"], [1.0, 2.0], None, "abc"])
def test_a_proposal_file_with_malformed_weights_is_one_line_naming_it(capsys, world, trained, weights):
    import torch

    data = torch.load(trained / "P.pt", weights_only=True)
    data["weights"] = weights
    torch.save(data, trained / "P.pt")
    refused(capsys, world, _learn(trained), ["{tmp}/P.pt", "'weights' holds", "retrain"])
    refused(capsys, world, ["marginal", "abc", "--model", "toy-bigram", "--proposal", "learned", "--proposal-file",
                            "{tmp}/P.pt"], ["{tmp}/P.pt", "'weights' holds"])
