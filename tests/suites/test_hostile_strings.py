"""The hostile suite of issue 37: the string-level and perplexity commands, the report and the Python API.

Every case is an input a user can give by mistake or on purpose. Each must end in one of two ways:

* refused: exit 2, nothing on standard output, **one** line on standard error that names the input and says
  what to do, no traceback, no "internal error"; a refusal of a size or of a malformed file comes **before the
  model loads** (the loader here counts its calls);
* answered: exit 0 and a figure checked against the same figure computed another way (a silently wrong
  number fails the case as surely as a traceback).

A toy bigram LM (``tests/qa_toy.py``) stands in for the model, so the suite runs in seconds.
"""

from __future__ import annotations

import json
import math

import pytest

import ppl_tok.cli.common
import ppl_tok.lm.cards
from ppl_tok.cli.main import main
from ppl_tok.limits import set_limits
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.run import run_perplexity
from qa_toy import toy_lm

LM = toy_lm()

FILES = {
    "ok.txt": "ab ba b a ab",
    "ok.jsonl": '{"text": "ab ba"}\n{"text": "b a ab"}\n',
    "empty.txt": "",
    "blank.txt": "\n\n  \n",
    "uncovered.txt": "ab xyz\n",
    "bad.jsonl": '{"text": "ab"}\n{"text": \n',
    "missing.jsonl": '{"text": "ab"}\n{"body": "ba"}\n',
    "number.jsonl": '{"text": "ab"}\n{"text": 7}\n',
    "null.jsonl": '{"text": "ab"}\n{"text": null}\n',
    "array.jsonl": '["ab"]\n',
    "surrogate.jsonl": '{"text": "\\ud800a"}\n',
    "nul.jsonl": '{"text": "a\\u0000b"}\n',
    "empty-field.jsonl": '{"text": ""}\n',
    "regions-gap.csv": "item,start,end\n0,0,1\n0,2,5\n",
    "regions-overlap.csv": "item,start,end\n0,0,3\n0,2,5\n",
    "regions-short.csv": "item,start,end\n0,0,2\n",
    "regions-bad.csv": "item,start,end\n0,a,2\n",
    "regions-empty.csv": "item,start,end\n0,0,0\n0,0,5\n",
}
BINARY = {"binary.bin": b"\x7fELF\x00\x01\x02", "latin1.txt": "caf\xe9".encode("latin-1"), "nul.txt": b"a\x00b\n"}


def load(spec, *args, **kwargs):
    """The loader of the cases: the toy LM the spec names, with the spec's BOS (as a real load honours it)."""
    name = getattr(spec, "model", spec)
    lm = toy_lm(seed=1 if name == "toy-bigram-2" else 0)
    lm.name = name if name in ("toy-bigram", "toy-bigram-2") else "toy-bigram"
    if getattr(spec, "bos_id", None) is not None:
        lm.bos_id = spec.bos_id
    if hasattr(spec, "to_dict"):
        lm.spec = spec  # as load_lm records it
    return lm


@pytest.fixture
def world(tmp_path, monkeypatch, capsys):
    """The files of the cases, three run folders of the toy LMs, and a loader that counts its calls."""
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    for name, data in BINARY.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "folder").mkdir()
    (tmp_path / "a-file").write_text("x")
    loads: list[tuple] = []
    for where in (ppl_tok.cli.common, ppl_tok.lm.cards):
        monkeypatch.setattr(where, "load_lm", lambda *a, **k: loads.append(a) or load(*a, **k))
        monkeypatch.setattr(where, "load_vocabulary", lambda *a, **k: LM.vocab)
    for folder, model, scoring in (("run-beam", "toy-bigram", "beam"), ("run-canonical", "toy-bigram", "canonical"),
                                   ("run-other", "toy-bigram-2", "beam")):
        assert main(["perplexity", str(tmp_path / "ok.jsonl"), "--field", "text", "--scoring", scoring,
                     "--model", model, "--out", str(tmp_path / folder)]) == 0
    capsys.readouterr()
    loads.clear()
    return tmp_path, loads


def one_line(capsys, argv, needles):
    """``ppl-tok ARGV`` exits 2 with nothing on standard output and one line on standard error that holds every
    needle (no traceback, no "internal error"); that line."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, code, out[:300], err)
    assert out == "", out[:300]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def refused(capsys, world, argv, needles, before_load=True):
    tmp, loads = world
    err = one_line(capsys, [a.format(tmp=tmp) for a in argv], [n.format(tmp=tmp) for n in needles])
    if before_load:
        assert not loads, f"the model loaded before the refusal: {err}"


# ------------------------------------------------------------ perplexity: the input
PERPLEXITY_INPUT = [
    (["{tmp}/nope.txt"], ["nope.txt"]),
    (["{tmp}/folder"], ["folder"]),
    (["{tmp}/empty.txt"], ["empty.txt"]),
    (["{tmp}/binary.bin"], ["binary file"]),
    (["{tmp}/latin1.txt"], ["latin1.txt", "UTF-8"]),
    (["{tmp}/nul.txt"], ["nul.txt"]),
    (["{tmp}/bad.jsonl", "--field", "text"], ["bad.jsonl:2"]),
    (["{tmp}/missing.jsonl", "--field", "text"], ["missing.jsonl:2", "missing field 'text'", "--field"]),
    (["{tmp}/number.jsonl", "--field", "text"], ["number.jsonl:2", "'text'"]),
    (["{tmp}/null.jsonl", "--field", "text"], ["null.jsonl:2", "'text'"]),
    (["{tmp}/array.jsonl", "--field", "text"], ["array.jsonl:1"]),
    (["{tmp}/surrogate.jsonl", "--field", "text"], ["surrogate.jsonl:1", "lone surrogate"]),
    (["{tmp}/nul.jsonl", "--field", "text"], ["nul.jsonl:1", "NUL"]),
    (["{tmp}/empty-field.jsonl", "--field", "text"], ["empty-field.jsonl:1"]),
    (["{tmp}/ok.jsonl", "--field", "text", "--split", "lines"], ["--split applies to text input"]),
    (["{tmp}/ok.txt", "--field", "text"], ["ok.txt"]),
    (["{tmp}/ok.txt", "--split", "sentences"], ["--split", "sentences"]),
    (["{tmp}/ok.txt", "--scoring", "best"], ["--scoring", "'best'"]),
    (["{tmp}/ok.txt", "--window", "2"], ["--window"]),
    (["{tmp}/ok.txt", "--window", "x"], ["--window", "'x'"]),
    (["{tmp}/ok.txt", "--beam", "0"], ["--beam"]),
    (["{tmp}/ok.txt", "--beam", "2.5"], ["--beam"]),
    (["{tmp}/ok.txt", "--prune", "nan"], ["--prune"]),
    (["{tmp}/ok.txt", "--prune", "-1"], ["--prune"]),
    (["{tmp}/ok.txt", "--search-budget", "0"], ["--search-budget"]),
    (["{tmp}/ok.txt", "--samples", "0"], ["--samples"]),
    (["{tmp}/ok.txt", "--seed", "-1"], ["--seed"]),
    (["{tmp}/ok.txt", "--seed", str(2**70)], ["--seed"]),
    (["{tmp}/ok.txt", "--limit", "0"], ["--limit"]),
    (["{tmp}/ok.txt", "--batch-size", "0"], ["--batch-size"]),
    (["{tmp}/ok.txt", "--out", "{tmp}/a-file"], ["a-file", "is a file, not a run folder"]),
    (["{tmp}/ok.txt", "--dtype", "int8"], ["--dtype", "int8"]),
    (["{tmp}/ok.txt", "--device", "tpu"], ["--device", "tpu"]),
]


@pytest.mark.parametrize("argv, needles", PERPLEXITY_INPUT, ids=[" ".join(a) for a, _ in PERPLEXITY_INPUT])
def test_perplexity_refuses_bad_input_before_the_model_loads(capsys, world, argv, needles):
    refused(capsys, world, ["perplexity", *argv], needles)


@pytest.mark.parametrize("name, byte", [("uncovered.txt", "0x78"), ("blank.txt", "0x0a")])
def test_perplexity_refuses_text_no_token_covers(capsys, world, name, byte):
    refused(capsys, world, ["perplexity", "{tmp}/" + name], [name, f"covers the byte {byte}"], before_load=False)


@pytest.mark.parametrize("env, needles", [
    ({"PPL_TOK_MAX_TEXT_BYTES": "4"}, ["ok.txt:1", "limit text_bytes=4", "PPL_TOK_MAX_TEXT_BYTES"]),
    ({"PPL_TOK_MAX_CORPUS_BYTES": "4"}, ["ok.txt", "limit corpus_bytes=4", "PPL_TOK_MAX_CORPUS_BYTES"]),
])
def test_perplexity_refuses_sizes_before_the_model_loads(capsys, world, monkeypatch, env, needles):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        refused(capsys, world, ["perplexity", "{tmp}/ok.txt"], needles)
    finally:
        set_limits(None)


# ------------------------------------------------------------ perplexity: a resumed run never mixes settings
RESUMES = [
    (["--scoring", "canonical"], ["scoring", "'beam'", "'canonical'"]),
    (["--beam", "4"], ["beam", "8", "4"]),
    (["--prune", "5"], ["prune"]),
    (["--window", "64"], ["window"]),
    (["--bos-id", "3"], ["bos"]),
    (["--dtype", "bfloat16"], ["dtype", "bfloat16"]),
    (["--model", "toy-bigram-2"], ["model"]),
]


@pytest.mark.parametrize("extra, needles", RESUMES, ids=[" ".join(e) for e, _ in RESUMES])
def test_a_resumed_perplexity_run_refuses_other_settings(capsys, world, extra, needles):
    argv = ["perplexity", "{tmp}/ok.jsonl", "--field", "text", "--scoring", "beam", "--out", "{tmp}/run-beam",
            "--model", "toy-bigram", *extra]
    refused(capsys, world, argv, needles, before_load=False)


def test_a_resumed_perplexity_run_refuses_another_source(capsys, world):
    tmp, _ = world
    (tmp / "ok2.jsonl").write_text('{"text": "b a ab"}\n{"text": "ab ba"}\n')
    refused(capsys, world, ["perplexity", "{tmp}/ok2.jsonl", "--field", "text", "--scoring", "beam", "--out",
                            "{tmp}/run-beam", "--model", "toy-bigram"], ["corpus_sha256"], before_load=False)


def test_a_smaller_limit_summarises_exactly_the_documents_asked_for(capsys, world):
    tmp, _ = world

    code = main(["perplexity", f"{tmp}/ok.jsonl", "--field", "text", "--scoring", "beam", "--out",
                 f"{tmp}/run-beam", "--model", "toy-bigram", "--limit", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    whole = run_perplexity(LM, read_corpus(tmp / "ok.jsonl", field="text"), ScoringConfig("beam"), progress=False)
    first = whole[0]
    summary = out.get("summary", out)
    assert summary["documents"] == 1
    assert summary["bytes"] == first.n_bytes


# ------------------------------------------------------------ perplexity-report
REPORT = [
    (["{tmp}/nope"], ["nope", "is not a run folder"]),
    (["{tmp}/a-file"], ["a-file"]),
    (["{tmp}/folder"], ["folder is not a perplexity run folder", "run.json is missing"]),
    (["{tmp}/run-beam", "--resamples", "0"], ["--resamples"]),
    (["{tmp}/run-beam", "--resamples", "x"], ["--resamples"]),
    (["{tmp}/run-beam", "--png", "{tmp}/no/such/x.png"], ["--png"]),
    (["{tmp}/run-beam", "--png", "{tmp}/folder"], ["--png"]),
    (["{tmp}/run-beam", "--compare", "{tmp}/nope"], ["nope", "is not a run folder"]),
    (["{tmp}/run-beam", "--compare", "{tmp}/run-other"], ["model"]),
    (["{tmp}/run-canonical", "--compare", "{tmp}/run-beam"], ["canonical"]),
    (["{tmp}/run-beam", "--importance", "{tmp}/run-other"], ["canonical+rest"]),
    (["{tmp}/run-beam", "--compare", "{tmp}/run-beam", "--importance", "{tmp}/run-beam"], ["not allowed with"]),
]


@pytest.mark.parametrize("argv, needles", REPORT, ids=[" ".join(a) for a, _ in REPORT])
def test_the_report_refuses_in_one_line(capsys, world, argv, needles):
    refused(capsys, world, ["perplexity-report", *argv], needles, before_load=False)


def test_the_report_checks_the_source_it_reads(capsys, world):
    tmp, _ = world
    (tmp / "ok.jsonl").write_text('{"text": "b a ab"}\n{"text": "ab ba"}\n')  # two lines swapped
    refused(capsys, world, ["perplexity-report", "{tmp}/run-beam"], ["SHA-256"], before_load=False)


def test_the_report_names_a_damaged_record(capsys, world):
    tmp, _ = world
    scores = tmp / "run-beam" / "documents.jsonl"
    scores.write_text(scores.read_text() + '{"doc": 9, "log_lik\n')
    refused(capsys, world, ["perplexity-report", "{tmp}/run-beam"], ["documents.jsonl:"], before_load=False)


# ------------------------------------------------------------ surprisal
SURPRISAL = [
    (["{tmp}/nope.txt"], ["nope.txt"]),
    (["{tmp}/empty.txt"], ["empty.txt"]),
    (["{tmp}/latin1.txt"], ["latin1.txt", "UTF-8"]),
    (["{tmp}/bad.jsonl", "--field", "text"], ["bad.jsonl:2"]),
    (["{tmp}/missing.jsonl", "--field", "text"], ["missing.jsonl:2", "'text'"]),
    (["{tmp}/surrogate.jsonl", "--field", "text"], ["surrogate.jsonl:1"]),
    (["{tmp}/nul.jsonl", "--field", "text"], ["nul.jsonl:1"]),
    (["{tmp}/ok.txt", "--units", "sentence"], ["--units", "sentence"]),
    (["{tmp}/ok.txt", "--format", "xlsx"], ["--format", "xlsx"]),
    (["{tmp}/ok.txt", "--wide", "-1"], ["--wide"]),
    (["{tmp}/ok.txt", "--wide", "nan"], ["--wide"]),
    (["{tmp}/ok.txt", "--beam", "0"], ["--beam"]),
    (["{tmp}/ok.txt", "--prune", "0"], ["--prune"]),
    (["{tmp}/ok.txt", "--out", "{tmp}/ok.txt"], ["ok.txt", "is a file", "new --out folder"]),  # an old rows file
    (["{tmp}/ok.txt", "--regions", "{tmp}/nope.csv"], ["nope.csv"]),
    (["{tmp}/ok.txt", "--regions", "{tmp}/regions-gap.csv"], ["regions-gap.csv"]),
    (["{tmp}/ok.txt", "--regions", "{tmp}/regions-overlap.csv"], ["regions-overlap.csv"]),
    (["{tmp}/ok.txt", "--regions", "{tmp}/regions-short.csv"], ["regions-short.csv"]),
    (["{tmp}/ok.txt", "--regions", "{tmp}/regions-bad.csv"], ["regions-bad.csv"]),
    (["{tmp}/ok.txt", "--regions", "{tmp}/regions-empty.csv"], ["regions-empty.csv"]),
]


@pytest.mark.parametrize("argv, needles", SURPRISAL, ids=[" ".join(a) for a, _ in SURPRISAL])
def test_surprisal_refuses_bad_input_before_the_model_loads(capsys, world, argv, needles):
    refused(capsys, world, ["surprisal", *argv], needles)


def test_surprisal_refuses_text_no_token_covers(capsys, world):
    refused(capsys, world, ["surprisal", "{tmp}/uncovered.txt"], ["uncovered.txt: item 0", "byte 0x78"],
            before_load=False)


# ------------------------------------------------------------ conditional, next, generate
STRINGS = [
    (["conditional", "ab", "--prompt", "b", "--beam", "0"], ["--beam"]),
    (["conditional", "ab", "--prompt", "b", "--prune", "nan"], ["--prune"]),
    (["conditional", "ab", "--prompt", "b", "--prefill", "head"], ["--prefill", "head"]),
    (["conditional", "ab", "--prompt", "b", "--search-budget", "0"], ["--search-budget"]),
    (["conditional", "", "--prompt", "b"], ["empty"]),
    (["conditional", "\ud800", "--prompt", "b"], ["surrogate"]),
    (["next", "--prompt", "ab", "--top", "0"], ["--top"]),
    (["next", "--prompt", "\ud800"], ["surrogate"]),
    (["generate", "--prompt", "ab", "--max-bytes", "0"], ["--max-bytes"]),
    (["generate", "--prompt", "ab", "--temperature", "0"], ["--temperature"]),
    (["generate", "--prompt", "ab", "--temperature", "nan"], ["--temperature"]),
    (["generate", "--prompt", "ab", "--top-p", "0"], ["--top-p"]),
    (["generate", "--prompt", "ab", "--top-p", "1.5"], ["--top-p"]),
    (["generate", "--prompt", "ab", "--seed", "-1"], ["--seed"]),
    (["generate", "--prompt", "ab", "--stop", ""], ["stop string must not be empty"]),
    (["generate", "--prompt", "ab", "--mode", "words"], ["--mode", "words"]),
]


@pytest.mark.parametrize("argv, needles", STRINGS, ids=[" ".join(a) for a, _ in STRINGS])
def test_string_commands_refuse_bad_flags_before_the_model_loads(capsys, world, argv, needles):
    refused(capsys, world, argv, needles)


@pytest.mark.parametrize("argv", [["conditional", "xy", "--prompt", "ab"], ["next", "--prompt", "a z"],
                                  ["generate", "--prompt", "q", "--max-bytes", "2"]])
def test_string_commands_refuse_text_no_token_covers(capsys, world, argv):
    refused(capsys, world, argv, ["no token"], before_load=False)


# ------------------------------------------------------------ answered, and checked another way
def test_conditional_equals_the_difference_of_its_prefix_figures(capsys, world):
    from ppl_tok.strings import initial, string_conditional

    code = main(["conditional", "ba", "--prompt", "ab a", "--json", "--beam", "64", "--prune", "40", "--event", "prefix"])
    got = json.loads(capsys.readouterr().out)
    assert code == 0
    from ppl_tok.strings import StringSearchConfig

    config = StringSearchConfig(beam=64, prune=40.0)
    want = string_conditional(LM, "ab a", "ba", config=config, event="prefix")
    assert got["estimate"] == pytest.approx(want.estimate, abs=1e-9)
    both = initial(LM, "ab aba", config=config).prefix_log_prob().estimate
    alone = initial(LM, "ab a", config=config).prefix_log_prob().estimate
    assert got["estimate"] == pytest.approx(both - alone, abs=1e-6)


def test_next_bytes_sum_to_one(capsys, world):
    code = main(["next", "--prompt", "ab b", "--json"])
    got = json.loads(capsys.readouterr().out)
    assert code == 0
    assert sum(math.exp(v) for v in got["log_probs"].values()) == pytest.approx(1.0, abs=1e-9)
    for key, v in got["log_probs"].items():  # every estimate inside its own certified interval
        assert got["lower"][key] - 1e-12 <= v <= got["upper"][key] + 1e-12


# ------------------------------------------------------------ newer flags: bounds, batches, ensembles, Ray, lazy
BATCH_FILES = {
    "pairs.jsonl": '{"prompt": "ab", "text": " ba"}\n{"prompt": "b", "text": "a"}\n',
    "pairs-bad.jsonl": '{"prompt": "ab", "text": " ba"}\n{"prompt": "b", "text": \n',
    "pairs-missing.jsonl": '{"prompt": "ab", "text": " ba"}\n{"prompt": "b"}\n',
    "pairs-number.jsonl": '{"prompt": 3, "text": " ba"}\n',
    "pairs-surrogate.jsonl": '{"prompt": "\\ud800", "text": " ba"}\n',
    "pairs-empty.jsonl": "",
}
NEWER = [
    (["next", "--prompt", "ab", "--chars", "--min-log-prob", "nan"], ["--min-log-prob", "nan"]),
    (["next", "--prompt", "ab", "--chars", "--min-log-prob", "inf"], ["--min-log-prob", "inf"]),
    (["next", "--prompt", "ab", "--min-log-prob", "-5"], ["--min-log-prob applies to --chars only"]),
    (["generate", "--prompt", "ab", "--greedy", "--temperature", "0.5"], ["--greedy", "--temperature"]),
    (["generate", "--prompt", "ab", "--greedy", "--top-p", "0.5"], ["--greedy", "--top-p"]),
    (["generate", "--prompt", "ab", "--max-bytes", str(10**6)], ["generated_bytes"]),
    (["generate", "--prompt", "ab", "--top-p", "1.5"], ["--top-p", "1.5"]),
    (["conditional", "ab", "--prompt", "b", "--bos-id", "999999"], ["--bos-id 999999", "ids 0.."]),
    (["next", "--prompt", "ab", "--bos-id", "999999"], ["--bos-id 999999"]),
    (["conditional", "--input", "{tmp}/nope.jsonl"], ["nope.jsonl"]),
    (["conditional", "--input", "{tmp}/pairs-bad.jsonl"], ["pairs-bad.jsonl:2"]),
    (["conditional", "--input", "{tmp}/pairs-missing.jsonl"], ["pairs-missing.jsonl:2", "'text'"]),
    (["conditional", "--input", "{tmp}/pairs-number.jsonl"], ["pairs-number.jsonl:1", "'prompt'"]),
    (["conditional", "--input", "{tmp}/pairs-surrogate.jsonl"], ["pairs-surrogate.jsonl:1", "surrogate"]),
    (["conditional", "--input", "{tmp}/pairs-empty.jsonl"], ["pairs-empty.jsonl"]),
    (["conditional", "--input", "{tmp}/pairs.jsonl", "--batch-size", "0"], ["--batch-size"]),
    (["conditional", "--input", "{tmp}/pairs.jsonl", "--out", "{tmp}/a-file"], ["a-file"]),
    (["next", "--input", "{tmp}/pairs-bad.jsonl"], ["pairs-bad.jsonl:2"]),
    (["generate", "--input", "{tmp}/pairs-surrogate.jsonl"], ["pairs-surrogate.jsonl:1"]),
    (["conditional", "ab", "--prompt", "b", "--model", "toy-bigram", "--model", "toy-bigram-2", "--kind", "sum"],
     ["--kind", "'sum'"]),
    (["conditional", "ab", "--prompt", "b", "--model", "toy-bigram", "--model", "toy-bigram-2", "--weight", "1"],
     ["--weight"]),
    (["conditional", "ab", "--prompt", "b", "--model", "toy-bigram", "--weight", "0"], ["--weight"]),
    (["perplexity", "{tmp}/ok.txt", "--ray"], ["--ray", "--out"]),
    (["perplexity", "{tmp}/ok.txt", "--out", "{tmp}/r", "--ray", "--workers", "0"], ["--workers"]),
    (["surprisal", "{tmp}/ok.txt", "--ray"], ["--ray", "--out"]),
    (["perplexity", "{tmp}/ok.txt", "--extend-threshold", "1"], ["--extend-threshold"]),
    (["perplexity", "{tmp}/ok.txt", "--extend-threshold", "-0.1"], ["--extend-threshold"]),
    (["conditional", "ab", "--prompt", "b", "--extend-threshold", "nan"], ["--extend-threshold"]),
    (["perplexity-compare", "{tmp}/run-beam", "{tmp}/nope"], ["nope"]),
    (["perplexity-compare", "{tmp}/run-beam", "--resamples", "0"], ["--resamples"]),
]


@pytest.mark.parametrize("argv, needles", NEWER, ids=[" ".join(a) for a, _ in NEWER])
def test_newer_flags_refuse_bad_input_before_the_model_loads(capsys, world, argv, needles):
    tmp, _ = world
    for name, text in BATCH_FILES.items():
        (tmp / name).write_text(text, encoding="utf-8")
    refused(capsys, world, argv, needles)


def test_comparing_runs_of_different_corpora_is_refused(capsys, world):
    tmp, _ = world
    (tmp / "other.jsonl").write_text('{"text": "ba ab"}\n{"text": "a b"}\n')
    assert main(["perplexity", str(tmp / "other.jsonl"), "--field", "text", "--scoring", "beam", "--model",
                 "toy-bigram-2", "--out", str(tmp / "run-other-corpus")]) == 0
    capsys.readouterr()
    refused(capsys, world, ["perplexity-compare", "{tmp}/run-beam", "{tmp}/run-other-corpus"], ["corpus"],
            before_load=False)


def test_a_batch_of_conditionals_equals_the_conditionals_one_by_one(capsys, world):
    from ppl_tok.strings import StringSearchConfig, string_conditional

    tmp, _ = world
    for name, text in BATCH_FILES.items():
        (tmp / name).write_text(text, encoding="utf-8")
    code = main(["conditional", "--input", str(tmp / "pairs.jsonl"), "--model", "toy-bigram", "--out",
                 str(tmp / "batch"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["items"] == 2 and summary["errors"] == 0
    records = [json.loads(line) for line in (tmp / "batch" / "records.jsonl").read_text().splitlines()]
    records.sort(key=lambda r: r["index"])
    config = StringSearchConfig()
    want = [string_conditional(LM, "ab", " ba", config=config), string_conditional(LM, "b", "a", config=config)]
    assert [r["estimate"] for r in records] == pytest.approx([w.estimate for w in want], abs=1e-9)
    for r in records:  # every estimate inside its own certified interval
        assert r["lower"] <= r["estimate"] <= r["upper"]
