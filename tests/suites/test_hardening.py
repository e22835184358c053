"""Hostile input (issue 24): every bad argument is a clear error before any work; no silent misreading.

Fast: toy LMs and the llama2 vocabulary; a model that loads where none should makes the test fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import ppl_tok.lm.cards
import ppl_tok.cli.common
from conftest import LLAMA2, ROOT
from ppl_tok.cli.main import main
from ppl_tok.datasets import DatasetError, read_multiple_choice
from ppl_tok.infer.importance import marginal, marginals
from ppl_tok.limits import LimitError, Limits, set_limits
from qa_toy import toy_lm, write_questions


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, out, err, *needles):
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert "internal error" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def no_model(monkeypatch):
    """Loading any model or vocabulary fails the test: the checks must come first."""
    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")

    for where in (ppl_tok.cli.common, ppl_tok.lm.cards):
        monkeypatch.setattr(where, "load_lm", refuse)
        monkeypatch.setattr(where, "load_vocabulary", refuse)


@pytest.fixture
def toy_model(monkeypatch):
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda name, **kw: toy_lm())


# ------------------------------------------------------------ the Python API
@pytest.mark.parametrize("call, error, message", [
    (lambda lm: marginals("hey", lm, 2), TypeError, "texts must be a sequence of texts, got the str 'hey'"),
    (lambda lm: marginals([" a", " b", " c"], lm, 2, contexts="xyz"), TypeError, "contexts must be a sequence"),
    (lambda lm: marginals([" a"], lm, 2.5), TypeError, "num_samples must be an integer, got 2.5"),
    (lambda lm: marginals([" a"], lm, True), TypeError, "num_samples must be an integer"),
    (lambda lm: marginals([" a"], lm, 0), ValueError, "num_samples must be >= 1"),
    (lambda lm: marginals([" a"], lm, 2, seeds=[2**80]), ValueError, "seeds[0] must be an integer in 0..4294967295"),
    (lambda lm: marginals([" a", None], lm, 2), TypeError, "texts[1] must be a str, got NoneType"),
    (lambda lm: marginal(None, lm, 2), TypeError, "text must be a str, got NoneType"),
    (lambda lm: marginal(" a", lm, 2, seed=-1), ValueError, "seed must be an integer in 0..4294967295"),
    (lambda lm: marginal(" a", lm, 2, context=None), TypeError, "context must be a str or a sequence of token ids"),
    (lambda lm: marginal(" a", lm, 10**12), LimitError, "limit samples=1,048,576"),
    (lambda lm: marginals([" a"] * 5000, lm, 1000), LimitError, "limit particles="),
    (lambda lm: marginals([" a"] * 1200, lm, 4, contexts=["ab " * 40] * 1200), LimitError, "limit batch_bytes="),
])
def test_api_arguments_are_checked_and_named(call, error, message):
    with pytest.raises(error) as info:
        call(toy_lm())
    assert message in str(info.value)


def test_limits_are_validated_and_raised_by_the_environment(monkeypatch):
    with pytest.raises(ValueError, match="Limits.samples must be a positive integer"):
        Limits(samples=0)
    monkeypatch.setenv("PPL_TOK_MAX_SAMPLES", "10")
    with pytest.raises(LimitError, match="PPL_TOK_MAX_SAMPLES"):
        marginal(" a", toy_lm(), 11)
    assert marginal(" a", toy_lm(), 10).num_samples == 10
    monkeypatch.setenv("PPL_TOK_MAX_SAMPLES", "ten")
    with pytest.raises(ValueError, match="PPL_TOK_MAX_SAMPLES='ten' is not an integer"):
        marginal(" a", toy_lm(), 10)
    monkeypatch.delenv("PPL_TOK_MAX_SAMPLES")
    set_limits(Limits(samples=3))
    try:
        with pytest.raises(LimitError, match="samples=3"):
            marginal(" a", toy_lm(), 4)
    finally:
        set_limits(None)


# ---------------------------------------------------------------- the CLI
def test_counts_are_decimal_strings_with_log10(capsys):
    code, out, _ = run(capsys, "count", " Tokenizations grow rapidly", "--tokenizer", str(LLAMA2), "--json")
    data = json.loads(out)
    assert code == 0 and isinstance(data["count"], str) and int(data["count"]) > 2**20
    assert data["log10_count"] == pytest.approx(len(data["count"]) - 1, abs=1)


@pytest.mark.parametrize("argv, message", [
    (["marginal", " a", "--samples", str(10**12)], "--samples is 1,000,000,000,000, more than the limit samples="),
    (["score", " a", "--context", "word " * 8000], "more than the limit lm_bytes="),
    (["conditional", " a", "--prompt", "word " * 8000], "more than the limit lm_bytes="),
    (["generate", "--prompt", "word " * 8000, "--max-bytes", "4"], "more than the limit lm_bytes="),
    (["distribution", " a", "--png", "nodir/x.png"], "the folder nodir does not exist"),
    (["marginal", " a", "--exact", "--max-paths", str(10**30)], "more than the limit paths="),
    (["marginal", " a", "--bounds", "1e-3", "--exact-budget", str(10**12)], "--exact-budget is 1,000,000,000,000"),
    (["canonicity", "--samples", "1000", "--max-tokens", "1000"], "--samples times --max-tokens is 1,000,000"),
    (["mdd", " a", "--dot", ""], "expected a file name"),
    (["canonicity", "--png", "/"], "is a folder, not a file"),
])
def test_cli_limits_and_paths_before_any_work(capsys, no_model, argv, message):
    one_line_error(*run(capsys, *argv), message)


def test_a_text_file_is_read_no_further_than_the_limit(capsys, tmp_path, no_model, monkeypatch):
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 5000)
    monkeypatch.setenv("PPL_TOK_MAX_TEXT_BYTES", "1000")
    one_line_error(*run(capsys, "count", "--file", str(big)), "big.txt's length in bytes (at least) is 1,001",
                   "PPL_TOK_MAX_TEXT_BYTES")


def test_sat_refuses_more_variables_than_the_limit(capsys, tmp_path):
    f = tmp_path / "f.cnf"
    f.write_text("p cnf 30000 1\n1 2 3 0\n")
    one_line_error(*run(capsys, "sat", str(f), "--time-budget", "5"), "limit dimacs_variables=1,000",
                   "PPL_TOK_MAX_DIMACS_VARIABLES")


def test_broken_pipe_is_a_normal_end(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(" tongueless" * 7_000, encoding="utf-8")  # 77 kB of JSON: more than a pipe holds (64 kB)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = (f"{sys.executable} -m ppl_tok.cli count --file {text} --tokenizer {LLAMA2} --json | head -c 10; "
           "echo \" ${PIPESTATUS[0]}\"")
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout == '{"text": " 0\n' and done.stderr == ""


def test_invalid_model_config_is_a_clear_error(capsys, tmp_path, smollm2):
    from ppl_tok.lm.cards import cache_dir

    source = cache_dir() / "smollm2-135m" / "model"
    folder = tmp_path / "model"
    folder.mkdir()
    for f in source.iterdir():
        if f.name != "ppl-tok-manifest.json":  # a plain Hugging Face folder
            (folder / f.name).symlink_to(f)
    config = (source / "config.json").read_text()
    assert '"hidden_size": 576,' in config
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(config.replace('"hidden_size": 576,', '"hidden_size": -5,'))
    code, out, err = run(capsys, "score", " hi", "--model", str(folder))
    one_line_error(code, out, err, "config.json is invalid")


# ---------------------------------------------------------------------- QA
def _qa(tmp_path, *extra, test=None):
    test = test or write_questions(tmp_path / "test.jsonl", 4, seed=1)
    return main(["qa", "run", "--dataset", str(test), "--model", "toy", "--samples", "4", *extra])


def test_qa_run_out_must_name_a_folder(tmp_path, capsys, no_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _qa(tmp_path, "--out", "") == 2
    assert "argument --out: expected a folder, got ''" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.jsonl"]
    (tmp_path / "file").write_text("x")
    assert _qa(tmp_path, "--out", str(tmp_path / "file")) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_qa_run_limits_before_the_model_loads(tmp_path, capsys, no_model):
    assert _qa(tmp_path, "--out", str(tmp_path / "run"), "--samples", str(10**12)) == 2
    assert "limit samples=" in capsys.readouterr().err
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"id": "huge", "context": "x" * 1_000_000, "choices": ["a", "b"], "label": 0}) + "\n")
    assert _qa(tmp_path, "--out", str(tmp_path / "run"), test=big) == 2
    err = capsys.readouterr().err
    assert "test question 'huge'" in err and "limit lm_bytes=" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_lone_surrogate_and_bom_in_jsonl(tmp_path, capsys, no_model):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"context": "c", "choices": ["a", "b"], "label": 0}\n'
                   '{"context": "c", "choices": ["a\\ud800", "b"], "label": 0}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: a string holds the lone surrogate U\+D800"):
        read_multiple_choice(bad)
    assert _qa(tmp_path, "--out", str(tmp_path / "run"), test=bad) == 2
    assert "bad.jsonl:2: a string holds the lone surrogate" in capsys.readouterr().err
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + b'{"context": "c", "choices": ["a", "b"], "label": 1}\n')
    assert read_multiple_choice(bom)[0].label == 1


def test_failed_run_that_stored_nothing_leaves_no_folder(tmp_path, capsys, toy_model, monkeypatch):
    import ppl_tok.qa.run as qa_run

    def fail(*a, **k):
        raise ValueError("the LM failed")

    monkeypatch.setattr(qa_run, "score_batch", fail)
    assert _qa(tmp_path, "--out", str(tmp_path / "run")) == 2
    assert "the LM failed" in capsys.readouterr().err and not (tmp_path / "run").exists()
    existing = tmp_path / "mine"
    existing.mkdir()
    assert _qa(tmp_path, "--out", str(existing)) == 2
    assert existing.is_dir()  # a folder the user made is theirs to keep


def _finished_run(tmp_path):
    assert _qa(tmp_path, "--out", str(tmp_path / "run"), "--json", "--scores", "exact") == 0
    return tmp_path / "run"


def _edit(path, n, change):
    lines = path.read_text().splitlines(keepends=True)
    lines[n] = change(lines[n])
    path.write_text("".join(lines))


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('"log_p":[', '"log_p":[NaN,', 1), "scores.jsonl:1: answer 0: field 'log_p'"),
    (lambda s: s.replace('"log_p":[', '"log_p":[1e999,', 1), "scores.jsonl:1: answer 0: field 'log_p'"),
    (lambda s: s.replace('"log_p":[', '"log_p":["Infinity",', 1), "scores.jsonl:1: answer 0: field 'log_p'"),
    (lambda s: json.dumps({**json.loads(s), "kind": "greedy"}) + "\n", "scores.jsonl:1: unknown record kind 'greedy'"),
    (lambda s: json.dumps({**json.loads(s), "label": 7}) + "\n", "scores.jsonl:1: label 7 does not index"),
    (lambda s: json.dumps({**json.loads(s), "choices": [{**c, "log_p": c["log_p"][:2]}
                                                        for c in json.loads(s)["choices"]]}) + "\n",
     "scores.jsonl:1: answer 0: log_p, log_q, is_canonical and samples hold [2, 4, 4, 4] entries"),
])
def test_damaged_scores_lines_name_file_and_line(tmp_path, capsys, toy_model, edit, message):
    run_dir = _finished_run(tmp_path)
    _edit(run_dir / "scores.jsonl", 0, edit)
    capsys.readouterr()
    assert main(["qa", "report", str(run_dir), "--runs", "2", "--resamples", "10"]) == 2
    one_line_error(2, "", capsys.readouterr().err, message)


def test_report_refuses_damaged_settings_and_edited_labels(tmp_path, capsys, toy_model):
    run_dir = _finished_run(tmp_path)
    settings_path = run_dir / "run.json"
    good = json.loads(settings_path.read_text())
    for change, message in (({"scores_version": 99}, "written with scores version 99, newer than"),
                            ({"num_samples": "four"}, "the setting 'num_samples' is 'four'")):
        settings_path.write_text(json.dumps({**good, **change}))
        capsys.readouterr()
        assert main(["qa", "report", str(run_dir)]) == 2
        one_line_error(2, "", capsys.readouterr().err, "run.json: " + message)
    settings_path.write_text(json.dumps(good))
    records = [json.loads(line) for line in (run_dir / "scores.jsonl").read_text().splitlines()]
    first = next(r for r in records if r["kind"] == "exact")
    first["label"] = (first["label"] + 1) % len(first["choices"])
    (run_dir / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["qa", "report", str(run_dir)]) == 2
    one_line_error(2, "", capsys.readouterr().err, "disagree")


# ------------------------------------------------------------------ lm-eval
lm_eval_mod = pytest.importorskip("lm_eval", reason="needs the lm-eval extra")


@pytest.mark.parametrize("args, message", [
    ("num_samples=2.5", "num_samples=2.5: expected an integer"),
    ("num_samples=0", "num_samples=0: expected an integer >= 1"),
    ("num_samples=abc", "num_samples='abc': expected an integer"),
    ("alpha=2", "alpha=2: expected a finite number in [0, 1]"),
    ("batch_size=0", "batch_size=0"),
    ("tolerance=-1", "tolerance=-1: expected a finite number > 0"),
    ("dtype=int8", "dtype='int8'"),
    ("scoring=greedy", "scoring='greedy'"),
    ("colour=red", "unknown model argument 'colour'"),
    ("model=no-such-model", "model='no-such-model'"),
])
def test_lm_eval_model_args_are_checked_and_named(args, message):
    from ppl_tok.integrations.lm_eval import ModelArgumentError, PPLTokLM

    with pytest.raises(ModelArgumentError) as info:
        PPLTokLM.create_from_arg_string(args)  # as lm-eval's CLI builds the model from --model_args
    assert message in str(info.value)


def test_lm_eval_cli_bad_model_args_are_one_line_before_lm_eval_reads_its_tasks(tmp_path, capsys, monkeypatch):
    import lm_eval.__main__

    from ppl_tok.integrations import lm_eval as ppl_lm_eval

    test = write_questions(tmp_path / "test.jsonl", 2, seed=1)
    names = ppl_lm_eval.write_tasks(str(test), tmp_path / "tasks")

    def too_late():
        raise AssertionError("lm-eval's command line ran (its task index: about 20 s) before --model_args were checked")

    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", too_late)
    with pytest.raises(SystemExit) as done:
        ppl_lm_eval.cli(["--model", "ppl-tok", "--model_args", "num_samples=2.5", "--tasks", names[0],
                         "--include_path", str(tmp_path / "tasks")])
    err = capsys.readouterr().err  # (lm-eval's loggers may hold the stream of an earlier test: judge the last line)
    last = err.strip().splitlines()[-1]
    assert done.value.code == 2 and last == "ppl-tok-lm-eval: error: --model_args: num_samples=2.5: expected an integer"


@pytest.mark.slow  # ~20 s: a fresh interpreter loads lm-eval and the task
@pytest.mark.parametrize("args, message", [
    ("num_samples=2.5", "num_samples=2.5: expected an integer"),  # checked before lm-eval runs
    ("model=no-such-model", "model='no-such-model': unknown model 'no-such-model': expected one of the cards"),
])  # found only when lm-eval builds the model, after reading its tasks
def test_lm_eval_cli_bad_model_args_without_traceback(tmp_path, args, message):
    from ppl_tok.integrations import lm_eval as ppl_lm_eval

    test = write_questions(tmp_path / "test.jsonl", 2, seed=1)
    names = ppl_lm_eval.write_tasks(str(test), tmp_path / "tasks")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "ppl_tok.integrations.lm_eval", "--model", "ppl-tok", "--model_args",
                           args, "--tasks", names[0], "--include_path", str(tmp_path / "tasks")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"ppl-tok-lm-eval: error: --model_args: {message}")


def test_lm_eval_write_tasks_on_a_malformed_file(tmp_path, capsys):
    from ppl_tok.integrations import lm_eval as ppl_lm_eval

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"context": "c", "choices": ["a\\udc80", "b"], "label": 0}\n')
    with pytest.raises(SystemExit) as done:
        ppl_lm_eval.cli(["write-tasks", "--dataset", str(bad), "--out", str(tmp_path / "tasks")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "bad.jsonl:1: a string holds the lone surrogate" in err
    shutil.rmtree(tmp_path / "tasks", ignore_errors=True)


# ------------------------------------------------------------------ memory
RSS_SCRIPT = """
import gc, os, random, torch
torch.set_num_threads(1)
import transformers as tf
from ppl_tok import Vocabulary
from ppl_tok.lm.hf import HFLanguageModel
from ppl_tok.infer.importance import marginals

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

tokens = [None] + list("abcdefgh ") + ["ab", "cd", " a", " b", "ef", "gh", "abc"]
torch.manual_seed(0)
model = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=len(tokens), hidden_size=256, intermediate_size=512,
                            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4))
lm = HFLanguageModel(model, None, 0, vocab=Vocabulary.from_tokens(tokens), name="tiny")
rng = random.Random(0)
word = lambda: "".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6)))
marginals([" ab"], lm, 2); lm.clear_cache(); gc.collect()
base = rss()
results = marginals([" " + word() for _ in range(250)], lm, 4, contexts=[" ".join(word() for _ in range(24))
                                                                         for _ in range(250)])
peak = rss()
del results
lm.clear_cache()
print(base, peak, rss())
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the RSS from /proc")
def test_clear_cache_returns_the_resident_memory_to_the_post_load_level():
    """250 pairs of 24-word contexts at N = 4 on a random 4-layer Llama: the KV pool grows by ~280 MB; clear_cache gives it back."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    base, peak, after = map(float, done.stdout.split())
    assert peak > base + 150  # the run did hold memory
    assert after <= 1.10 * base, (base, peak, after)


def test_unreachable_ray_address_fails_fast_and_clearly():
    import socket
    import time

    from ppl_tok.qa.distributed import check_address

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(ValueError, match="no Ray cluster answers there"):
            check_address(address)
    assert time.monotonic() - start < 10
    with pytest.raises(ValueError, match="expected auto, HOST:PORT or ray://HOST:PORT"):
        check_address("nowhere")
    check_address("auto")
    check_address(None)

