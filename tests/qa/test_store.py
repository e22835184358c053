"""The QA run folder: settings checks, durability, resumption after SIGKILL, standard JSON."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import ppl_tok.qa.run as qa_run
from ppl_tok.qa import SettingsMismatchError, load_study, run_study, study_settings
from ppl_tok.qa.store import SCORES_FILE, ScoreStore, StoreError, decode_log, encode_log, read_records, records_digest
from qa_toy import toy_lm, write_questions
from sigkill import killed_twice_then_finished

TESTS = Path(__file__).resolve().parents[1]


def _study(tmp_path, n=12):
    test = write_questions(tmp_path / "test.jsonl", n, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", n, seed=2)
    return load_study(str(test), tune=tune)


def _settings(study, **kw):
    return study_settings(study, model="toy-bigram", samples=kw.pop("samples", 8), seed=kw.pop("seed", 3), **kw)


def _strict_json(line):
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")
    return json.loads(line, parse_constant=refuse)


def test_log_encoding_is_standard_json():
    # one convention with every --json output ("-Infinity"); null, as ppl-tok 0.2 stored -inf, still reads
    assert encode_log(-math.inf) == "-Infinity" and decode_log("-Infinity") == -math.inf
    assert decode_log(None) == -math.inf
    with pytest.raises(ValueError, match="a number or"):
        decode_log("Infinity")
    from ppl_tok.scorings.records import is_log as _is_log

    assert _is_log("-Infinity") and _is_log(None) and _is_log(-1.5)  # null: a folder of ppl-tok 0.2
    assert not any(_is_log(v) for v in ("Infinity", "NaN", math.nan, math.inf, True, "-1.5"))
    assert decode_log(encode_log(-1.5)) == -1.5
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            encode_log(bad)


def test_records_hold_every_score_and_only_standard_json(tmp_path):
    study = _study(tmp_path, n=3)
    store = run_study(study, toy_lm(), tmp_path / "run", _settings(study, scores=["exact"]), progress=False)
    lines = (tmp_path / "run" / SCORES_FILE).read_text().splitlines()
    assert len(lines) == 2 * 3 * 2  # (is, exact) x questions x splits
    records = [_strict_json(line) for line in lines]
    _strict_json((tmp_path / "run" / "run.json").read_text())
    first = records[0]
    assert first["kind"] == "is" and first["split"] == "tune" and first["index"] == 0
    choice = first["choices"][0]
    assert len(choice["log_p"]) == len(choice["log_q"]) == len(choice["samples"]) == len(choice["is_canonical"]) == 8
    lm = toy_lm()
    q = study.splits["tune"][0]
    assert lm.vocab.decode(choice["canonical"]) == (" " + q.choices[0]).encode()
    assert choice["canonical_log_prob"] == pytest.approx(lm.canonical_log_prob(" " + q.choices[0], q.context))
    exact = next(r for r in records if r["kind"] == "exact")
    assert (exact["split"], exact["index"]) == ("tune", 0) and {"lower", "upper", "closed"} <= set(exact["choices"][0])
    assert store.settings["scores"] == ["exact"]


def test_other_settings_are_refused_naming_them(tmp_path):
    study = _study(tmp_path, n=2)
    run_study(study, toy_lm(), tmp_path / "run", _settings(study), progress=False)
    with pytest.raises(SettingsMismatchError, match=r"samples: folder has 8, this run has 16(.|\n)*seed: folder has 3"):
        run_study(study, toy_lm(), tmp_path / "run", _settings(study, samples=16, seed=4), progress=False)
    other = load_study(str(tmp_path / "test.jsonl"))  # no tuning split: the split sizes differ
    with pytest.raises(SettingsMismatchError, match="splits"):
        run_study(other, toy_lm(), tmp_path / "run", _settings(other), progress=False)


def test_another_release_resumes_but_another_scores_version_is_refused(tmp_path, monkeypatch):
    study = _study(tmp_path, n=2)
    first = _settings(study)
    assert first["scores_version"] == qa_run.SCORES_VERSION
    run_study(study, toy_lm(), tmp_path / "run", first, progress=False)
    before = (tmp_path / "run" / SCORES_FILE).read_bytes()
    # a folder written before scores_version existed (ppl-tok 0.1.0) holds version-1 scores
    legacy = {k: v for k, v in first.items() if k != "scores_version"}
    (tmp_path / "run" / "run.json").write_text(json.dumps(legacy))
    store = run_study(study, toy_lm(), tmp_path / "run", {**first, "ppl_tok_version": "9.9"}, progress=False)
    assert store.settings["ppl_tok_version"] == first["ppl_tok_version"]  # the creator's, for the reader
    assert (tmp_path / "run" / SCORES_FILE).read_bytes() == before
    with pytest.raises(SettingsMismatchError, match="scores_version: folder has 1, this run has 2"):
        run_study(study, toy_lm(), tmp_path / "run", {**first, "scores_version": 2}, progress=False)


def test_run_json_records_the_lm_spec_and_num_samples(tmp_path):
    from ppl_tok.lm.spec import LMSpec
    from ppl_tok.qa.run import run_lm_spec

    study = _study(tmp_path, n=2)
    spec = LMSpec(model="toy-bigram", device="cuda:1", dtype="bfloat16", bos_id=0)
    settings = study_settings(study, lm=spec, samples=8, seed=3)
    assert settings["lm"] == spec.to_dict() and settings["num_samples"] == 8 and "samples" not in settings
    assert (settings["model"], settings["dtype"], settings["device"]) == ("toy-bigram", "bfloat16", "cuda")
    assert _settings(study, dtype="float16")["lm"] == LMSpec(model="toy-bigram", dtype="float16").to_dict()
    assert run_lm_spec(settings, "cpu") == LMSpec(model="toy-bigram", device="cpu", dtype="bfloat16", bos_id=0)
    # a folder from before the spec: rebuilt from model and dtype
    assert run_lm_spec({"model": "m", "dtype": None, "samples": 4}, None) == LMSpec(model="m")
    with pytest.raises(TypeError, match="come from the LMSpec"):
        study_settings(study, lm=spec, model="other", samples=8, seed=3)
    with pytest.raises(TypeError, match="needs the LM"):
        study_settings(study, samples=8, seed=3)


def test_a_folder_from_before_num_samples_and_lm_resumes_and_reads_as_before(tmp_path):
    from ppl_tok.qa.report import evaluate
    from ppl_tok.qa.run import check_settings

    study = _study(tmp_path, n=3)
    settings = _settings(study)
    run_study(study, toy_lm(), tmp_path / "new", settings, progress=False)
    run_study(study, toy_lm(), tmp_path / "old", settings, progress=False, batch_questions=1)
    # an old folder: N under "samples", no "lm", only the first question scored
    old = {("samples" if k == "num_samples" else k): v for k, v in settings.items() if k != "lm"}
    (tmp_path / "old" / "run.json").write_text(json.dumps(old))
    lines = (tmp_path / "old" / SCORES_FILE).read_text().splitlines(keepends=True)
    (tmp_path / "old" / SCORES_FILE).write_text("".join(lines[:2]))
    assert check_settings(old, "run.json") is old
    with pytest.raises(SettingsMismatchError, match="samples: folder has 8, this run has 16"):
        run_study(study, toy_lm(), tmp_path / "old", _settings(study, samples=16), progress=False)
    store = run_study(study, toy_lm(), tmp_path / "old", settings, progress=False)
    assert store.settings == old and json.loads((tmp_path / "old" / "run.json").read_text()) == old
    assert sorted(map(json.dumps, store.records)) == sorted(
        json.dumps(r) for r in read_records(tmp_path / "new" / SCORES_FILE))
    a, b = evaluate(tmp_path / "old", runs=4, resamples=50), evaluate(tmp_path / "new", runs=4, resamples=50)
    assert a["accuracy"] == b["accuracy"] and a["records_sha256"] == b["records_sha256"]
    with pytest.raises(StoreError, match="'samples' is 0"):
        check_settings({**old, "samples": 0}, "run.json")
    with pytest.raises(StoreError, match="'num_samples' is missing"):
        check_settings({k: v for k, v in old.items() if k != "samples"}, "run.json")
    with pytest.raises(StoreError, match="'lm' is not an LM spec"):
        check_settings({**settings, "lm": {"model": "x", "window": 3}}, "run.json")


def test_scores_may_grow_and_only_the_missing_ones_are_computed(tmp_path, monkeypatch):
    study = _study(tmp_path, n=2)
    run_study(study, toy_lm(), tmp_path / "run", _settings(study), progress=False)
    calls = []
    real = qa_run.marginals
    monkeypatch.setattr(qa_run, "marginals", lambda *a, **k: calls.append(1) or real(*a, **k))
    store = run_study(study, toy_lm(), tmp_path / "run", _settings(study, scores=["most-likely"]), progress=False)
    assert not calls  # the importance samples were stored already
    assert store.settings["scores"] == ["most-likely"]
    assert sum(r["kind"] == "most-likely" for r in store.records) == 4


def test_finished_run_is_never_recomputed(tmp_path, monkeypatch):
    study = _study(tmp_path, n=3)
    run_study(study, toy_lm(), tmp_path / "run", _settings(study), progress=False)
    before = (tmp_path / "run" / SCORES_FILE).read_bytes()

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(qa_run, "marginals", boom)
    run_study(study, toy_lm(), tmp_path / "run", _settings(study), progress=False)
    assert (tmp_path / "run" / SCORES_FILE).read_bytes() == before


def test_scores_do_not_depend_on_batching(tmp_path):
    study = _study(tmp_path, n=5)
    run_study(study, toy_lm(), tmp_path / "a", _settings(study), batch_questions=1, progress=False)
    run_study(study, toy_lm(), tmp_path / "b", _settings(study), batch_questions=4, progress=False)
    assert (tmp_path / "a" / SCORES_FILE).read_bytes() == (tmp_path / "b" / SCORES_FILE).read_bytes()


def test_records_digest_ignores_line_order_and_later_questions(tmp_path):
    study = _study(tmp_path, n=4)
    run_study(study, toy_lm(), tmp_path / "run", _settings(study), progress=False)
    records = list(read_records(tmp_path / "run" / SCORES_FILE))
    sizes = {"tune": 2, "test": 2}
    digest = records_digest(records, sizes)
    assert records_digest(records[::-1], sizes) == digest  # a Ray run appends batches as they finish
    later = [r for r in records if r["index"] >= 2]
    later[0]["choices"][0]["canonical_log_prob"] += 1.0
    assert records_digest(records, sizes) == digest  # a question past the sizes does not count
    assert records_digest(records, {"tune": 3, "test": 2}) != digest
    earlier = next(r for r in records if r["index"] < 2)
    earlier["choices"][0]["log_q"][0] += 1e-9
    assert records_digest(records, sizes) != digest


def test_torn_last_line_is_cut_and_recomputed(tmp_path):
    study = _study(tmp_path, n=4)
    settings = _settings(study, scores=["exact"])
    run_study(study, toy_lm(), tmp_path / "ref", settings, progress=False)
    reference = (tmp_path / "ref" / SCORES_FILE).read_bytes()
    lines = reference.splitlines(keepends=True)
    for cut in (3, 7):  # keep `cut` whole lines and half of the next one
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / "run.json").write_bytes((tmp_path / "ref" / "run.json").read_bytes())
        torn = b"".join(lines[:cut]) + lines[cut][: len(lines[cut]) // 2]
        (tmp_path / "run" / SCORES_FILE).write_bytes(torn)
        # a reader (a report of a run in progress) sees the complete records only
        assert list(read_records(tmp_path / "run" / SCORES_FILE)) == [json.loads(x) for x in lines[:cut]]
        run_study(study, toy_lm(), tmp_path / "run", settings, progress=False)
        assert (tmp_path / "run" / SCORES_FILE).read_bytes() == reference


def test_corrupt_or_repeated_lines_are_errors_naming_the_line(tmp_path):
    study = _study(tmp_path, n=2)
    run_study(study, toy_lm(), tmp_path / "run", _settings(study), progress=False)
    path = tmp_path / "run" / SCORES_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{not json}\n" + "".join(lines[1:]))
    with pytest.raises(StoreError, match=r"scores.jsonl:2: not a score record"):
        ScoreStore.open(tmp_path / "run", json.loads((tmp_path / "run" / "run.json").read_text()))
    path.write_text(lines[0] + lines[1] + lines[0])
    with pytest.raises(StoreError, match=r"scores.jsonl:3: record .* repeats line 1"):
        list(read_records(path))


CHILD = """
import sys
sys.path.insert(0, {tests!r})
from qa_toy import toy_lm
from ppl_tok.qa import load_study, run_study, study_settings
study = load_study({test!r}, tune={tune!r})
settings = study_settings(study, model="toy-bigram", samples=16, seed=3, scores=["exact"])
run_study(study, toy_lm(), {out!r}, settings, batch_questions=2, progress=False)
"""


@pytest.mark.slow  # three child processes, each importing torch: 205 s of the loaded profile (issue 45)
def test_sigkill_at_any_point_resumes_to_the_uninterrupted_store(tmp_path):
    study = _study(tmp_path, n=20)
    settings = _settings(study, samples=16, scores=["exact"])
    run_study(study, toy_lm(), tmp_path / "ref", settings, batch_questions=2, progress=False)
    reference = (tmp_path / "ref" / SCORES_FILE).read_bytes()
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(TESTS), test=str(tmp_path / "test.jsonl"),
                                   tune=str(tmp_path / "tune.jsonl"), out=str(out)))
    killed_twice_then_finished(script, out / SCORES_FILE, reference.count(b"\n"), delays=(0.0, 0.017))
    # The same records, byte for byte. A kill between two lines of one batch's write regroups the later
    # batches, and a batch writes its importance records before its exact ones, so the line order may differ.
    assert sorted((out / SCORES_FILE).read_bytes().splitlines()) == sorted(reference.splitlines())
    assert len(list(read_records(out / SCORES_FILE))) == reference.count(b"\n")


def test_two_runs_never_write_one_folder_at_once(tmp_path):
    study = _study(tmp_path, n=2)
    settings = _settings(study)
    holder = ScoreStore.open(tmp_path / "run", settings)
    with pytest.raises(StoreError, match="being written by another run"):
        run_study(study, toy_lm(), tmp_path / "run", settings, progress=False)
    holder.close()
    with pytest.raises(StoreError, match="closed"):
        holder.append([])
    store = run_study(study, toy_lm(), tmp_path / "run", settings, progress=False)  # free again
    assert len(store.records) == 4
    # a process killed while holding the folder leaves it free (the kernel drops its lock)
    code = (f"from ppl_tok.qa.store import ScoreStore; import json, os, signal; "
            f"s = ScoreStore.open({str(tmp_path / 'run')!r}, json.load(open({str(tmp_path / 'run' / 'run.json')!r}))); "
            f"os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", code], check=False)
    with ScoreStore.open(tmp_path / "run", settings) as again:
        assert len(again.records) == 4


def test_the_lm_backend_is_compared_and_a_folder_from_before_lm_is_transformers(tmp_path):
    """Issue 37: the number-changing parts of the recorded LMSpec are compared (the backend was not)."""
    from ppl_tok.lm.spec import LMSpec

    study = _study(tmp_path, n=2)
    settings = study_settings(study, lm=LMSpec(model="toy-bigram"), samples=8, seed=3)
    run_study(study, toy_lm(), tmp_path / "run", settings, progress=False)
    other = study_settings(study, lm=LMSpec(model="toy-bigram", backend="other"), samples=8, seed=3)
    with pytest.raises(SettingsMismatchError, match="backend: folder has 'transformers', this run has 'other'"):
        run_study(study, toy_lm(), tmp_path / "run", other, progress=False)
    old = {k: v for k, v in settings.items() if k != "lm"}  # a folder from before "lm"
    (tmp_path / "run" / "run.json").write_text(json.dumps(old))
    run_study(study, toy_lm(), tmp_path / "run", settings, progress=False)
    with pytest.raises(SettingsMismatchError, match="backend: folder has 'transformers', this run has 'other'"):
        run_study(study, toy_lm(), tmp_path / "run", other, progress=False)
