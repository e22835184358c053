"""`ppl-tok qa run` / `ppl-tok qa report` end to end (toy LM), and one slow run on SmolLM2."""

import json
import os

import pytest

import ppl_tok.lm.cards
from conftest import SHARED
from ppl_tok.cli.main import main
from ppl_tok.qa.report import FIG5, FIG6, REPORT_MD
from qa_toy import toy_lm, write_questions


@pytest.fixture
def toy_model(monkeypatch):
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda name, **kw: toy_lm())


def _run(tmp_path, *extra):
    test = write_questions(tmp_path / "test.jsonl", 8, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", 8, seed=2)
    return main(["qa", "run", "--dataset", str(test), "--tune", str(tune), "--model", "toy", "--samples", "8",
                 "--out", str(tmp_path / "run"), "--batch-size", "3", *extra])


def test_qa_run_and_report(tmp_path, toy_model, capsys):
    assert _run(tmp_path, "--scores", "exact,most-likely") == 0
    assert "qa report" in capsys.readouterr().out
    assert main(["qa", "report", str(tmp_path / "run"), "--json", "--runs", "8", "--resamples", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["accuracy"]) == {"canonical", "marginal", "marginal-all", "mixture", "canonical+rest", "exact",
                                       "most-likely"}
    changed = report["changed_vs_canonical"]
    assert set(changed) == {"acc", "acc_norm"} and set(changed["acc"]) == set(report["accuracy"]) - {"canonical"}
    assert all(0 <= n <= 8 for m in changed.values() for n in m.values())
    # a classifier that differs from canonical in accuracy changed at least that many answers
    diffs = report["differences_vs_canonical"]["acc"]
    assert all(changed["acc"][c] >= 8 * abs(d["diff"]) - 1e-9 for c, d in diffs.items())
    assert set(report["accuracy"]["canonical"]) == {"tune", "test"}
    assert all(0 <= v <= 1 for c in report["accuracy"].values() for v in c.values())
    rows = report["questions"]["test"]
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(8)]
    assert all(len(r["canonical_log_probs"]) == len(r["exact_log_marginals"]) == 3 for r in rows)
    assert 1 <= report["tuned"]["k"] <= 8 and 0 <= report["tuned"]["alpha"] <= 1
    assert set(report["differences_vs_canonical"]["acc"]["mixture"]) == {"diff", "low", "high", "within_noise"}
    for name in (FIG5, FIG6):
        assert (tmp_path / "run" / name).stat().st_size > 1000
    md = (tmp_path / "run" / REPORT_MD).read_text()
    assert "Table 1" in md and "Table 2" in md and "not certified" in md
    speed = report["speed"]
    assert sum(s["questions"] for s in speed["by_kinds"].values()) == 16 and speed["questions"] == 16
    assert all(s["median_batch_questions_per_minute"] > 0 for s in speed["by_kinds"].values())
    assert "median batch, questions/min" in md


def test_qa_run_takes_the_lm_argument_group_and_records_its_spec(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda spec, **kw: seen.append(spec) or toy_lm())
    assert _run(tmp_path, "--bos-id", "0", "--json") == 0
    settings = json.loads((tmp_path / "run" / "run.json").read_text())
    assert seen[0].bos_id == 0 and settings["bos_id"] == 0 and settings["lm"]["bos_id"] == 0
    capsys.readouterr()
    assert _run(tmp_path, "--json") == 2  # the same folder under the card's BOS: refused, naming the setting
    assert "bos_id: folder has 0, this run has None" in capsys.readouterr().err


def test_qa_summary(tmp_path, toy_model, capsys):
    run = tmp_path / "run"
    assert _run(tmp_path, "--json", "--scores", "exact") == 0
    assert main(["qa", "summary", str(run)]) == 2
    assert f"no report; run `ppl-tok qa report {run}` first" in capsys.readouterr().err
    assert main(["qa", "summary", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such run folder" in capsys.readouterr().err
    assert main(["qa", "report", str(run), "--json", "--runs", "4", "--resamples", "100"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["qa", "summary", str(run), str(run), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2 and rows[0] == rows[1]
    row = rows[0]
    assert row["canonical"] == report["accuracy"]["canonical"]["test"] and row["questions"] == {"test": 8, "tune": 8}
    assert row["marginal"]["k"] == report["tuned"]["k"] and row["mixture"]["alpha"] == report["tuned"]["alpha"]
    assert row["exact"]["diff"] == report["differences_vs_canonical"]["acc"]["exact"]["diff"]
    assert row["exact"]["not_certified"] == report["exact"]["test"]["not_certified"]
    assert row["paper"] == {"model": "Llama2", "marginal": None, "mixture": None}  # a custom data set: no paper numbers
    assert main(["qa", "summary", str(run)]) == 0
    md = capsys.readouterr().out
    assert md.count(f"\n| {row['dataset']} | toy |") == 1 and f"| {100 * row['canonical']:.1f} |" in md
    # touching the scores without changing them keeps the report valid (the check is by content)
    scores = run / "scores.jsonl"
    os.utime(scores, (scores.stat().st_atime, (run / "report.json").stat().st_mtime + 10))
    assert main(["qa", "summary", str(run)]) == 0
    capsys.readouterr()
    # a changed record of an evaluated question makes the report stale: refused
    lines = scores.read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["choices"][0]["canonical_log_prob"] -= 1.0
    lines[0] = json.dumps(first) + "\n"
    scores.write_text("".join(lines))
    assert main(["qa", "summary", str(run)]) == 2
    assert f"the scores it evaluated have changed in {scores}; run `ppl-tok qa report {run}` again" in \
        capsys.readouterr().err
    # a report of the first questions (a run in progress) stays valid while later questions change
    assert main(["qa", "report", str(run), "--limit", "4", "--json", "--runs", "4", "--resamples", "100"]) == 0
    capsys.readouterr()
    later = [n for n, line in enumerate(lines) if json.loads(line)["index"] >= 4]
    changed = json.loads(lines[later[0]])
    changed["choices"][0]["canonical_log_prob"] -= 1.0
    lines[later[0]] = json.dumps(changed) + "\n"
    scores.write_text("".join(lines))
    assert main(["qa", "summary", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["questions"] == {"test": 4, "tune": 4}
    # a report written before the digest existed falls back to the modification times
    report = json.loads((run / "report.json").read_text())
    del report["records_sha256"]
    (run / "report.json").write_text(json.dumps(report))
    os.utime(scores, (scores.stat().st_atime, (run / "report.json").stat().st_mtime + 10))
    assert main(["qa", "summary", str(run)]) == 2
    assert f"is older than {scores}; run `ppl-tok qa report {run} --limit 4` again" in capsys.readouterr().err


def test_qa_report_of_a_run_in_progress(tmp_path, toy_model, capsys):
    run = tmp_path / "run"
    assert _run(tmp_path, "--json") == 0
    capsys.readouterr()
    quick = ["--json", "--runs", "4", "--resamples", "100"]
    assert main(["qa", "report", str(run), "--complete", *quick]) == 0  # a finished run: all of it
    report = json.loads(capsys.readouterr().out)
    assert report["limit"] is None and report["evaluated"] == {"tune": 8, "test": 8}
    # a run in progress: the tune split's question 5 is not scored yet
    scores = run / "scores.jsonl"
    kept = [line for line in scores.read_text().splitlines(keepends=True)
            if (json.loads(line)["split"], json.loads(line)["index"]) != ("tune", 5)]
    scores.write_text("".join(kept))
    assert main(["qa", "report", str(run), *quick]) == 2
    assert (f"the run is unfinished; the first 5 questions of every split are scored (`ppl-tok qa report {run} "
            "--complete` reports those") in capsys.readouterr().err
    assert main(["qa", "report", str(run), "--limit", "6", *quick]) == 2
    assert "the first 5 questions of every split are scored" in capsys.readouterr().err
    assert main(["qa", "report", str(run), "--complete", *quick]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["limit"] == 5 and report["evaluated"] == {"tune": 5, "test": 5}
    assert [q["id"] for q in report["questions"]["test"]] == [f"q{i}" for i in range(5)]
    assert main(["qa", "report", str(run), "--complete", "--limit", "3"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_qa_run_refuses_other_settings(tmp_path, toy_model, capsys):
    assert _run(tmp_path, "--json") == 0
    capsys.readouterr()
    assert _run(tmp_path, "--json", "--seed", "9") == 2
    err = capsys.readouterr().err
    assert "ppl-tok qa: error:" in err and "seed: folder has 0, this run has 9" in err


def test_qa_run_records_the_device_and_refuses_to_resume_on_another(tmp_path, toy_model, capsys):
    assert _run(tmp_path, "--json") == 0
    capsys.readouterr()
    settings = json.loads((tmp_path / "run" / "run.json").read_text())
    assert settings["device"] == "cpu" and "dtype" in settings
    assert _run(tmp_path, "--json", "--device", "cuda:0") == 2
    assert "device: folder has 'cpu', this run has 'cuda'" in capsys.readouterr().err
    assert _run(tmp_path, "--json", "--dtype", "bfloat16") == 2
    assert "dtype: folder has None, this run has 'bfloat16'" in capsys.readouterr().err
    # a folder from before "device" was recorded: CPU runs, resumed on the CPU
    del settings["device"]
    (tmp_path / "run" / "run.json").write_text(json.dumps(settings))
    assert _run(tmp_path, "--json") == 0


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "--batch-size/--batch-questions: expected an integer >= 1, got 0"),
    (["--samples", "-1"], "--samples: expected an integer >= 1, got -1"),
    (["--exact-tolerance", "nan"], "--exact-tolerance/--tolerance: expected a finite number > 0, got 'nan'"),
    (["--time-budget", "0"], "--time-budget: expected a finite number > 0, got '0'"),
    (["--exact-budget", "x"], "--exact-budget/--budget: expected an integer, got 'x'"),
    (["--workers", "0"], "--workers: expected an integer >= 1, got 0"),
    (["--dtype", "float8"], "--dtype: invalid choice: 'float8'"),
    (["--seed", "-3"], "--seed: expected an integer in 0..4294967295, got -3"),
])
def test_qa_run_checks_arguments_before_any_work(tmp_path, capsys, args, message):
    assert _run(tmp_path, *args) == 2  # no toy model: a check that came late would fail on loading "toy"
    err = capsys.readouterr().err
    assert f"ppl-tok qa run: error: argument {message}" in err and "loading" not in err and "toy" not in err
    assert not (tmp_path / "run").exists()


def test_qa_report_of_an_unfinished_run_says_so(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert main(["qa", "report", str(tmp_path / "run")]) == 2
    assert "not a QA run folder" in capsys.readouterr().err


@pytest.mark.slow
def test_qa_smollm2_openbookqa(tmp_path, capsys):
    """SmolLM2 on 1 tuning and 1 test OpenBookQA question, with the exact marginal."""
    assert main(["qa", "run", "--dataset", "openbookqa", "--data-dir", str(SHARED / "data"), "--limit", "1",
                 "--samples", "4", "--scores", "exact", "--exact-budget", "100", "--out", str(tmp_path / "run"),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["qa", "report", str(tmp_path / "run"), "--json", "--runs", "4", "--resamples", "100"]) == 0
    report = json.loads(capsys.readouterr().out)
    q = report["questions"]["test"][0]
    assert q["id"] == "8-343" and len(q["canonical_log_probs"]) == 4
    for lp, ex in zip(q["canonical_log_probs"], q["exact_log_marginals"]):
        assert lp <= ex + 1e-3  # the marginal is at least the canonical probability


def test_qa_run_with_a_learned_proposal_records_it_and_refuses_another_file(tmp_path, toy_model, capsys):
    from qa_toy import learned_proposal_file

    first = learned_proposal_file(tmp_path / "q.pt", toy_lm())
    assert _run(tmp_path, "--json", "--proposal", "learned", "--proposal-file", str(first)) == 0
    capsys.readouterr()
    settings = json.loads((tmp_path / "run" / "run.json").read_text())
    assert settings["proposal"] == "learned" and len(settings["proposal_sha256"]) == 64
    assert main(["qa", "report", str(tmp_path / "run"), "--runs", "4", "--resamples", "100"]) == 0
    assert f"learned proposal (file sha256 {settings['proposal_sha256'][:12]})" in capsys.readouterr().out
    other = learned_proposal_file(tmp_path / "r.pt", toy_lm(), steps=5)
    assert _run(tmp_path, "--json", "--proposal", "learned", "--proposal-file", str(other)) == 2
    assert "proposal_sha256: folder has" in capsys.readouterr().err
    assert _run(tmp_path, "--json") == 2  # the look-ahead into a learned run's folder
    assert "proposal: folder has 'learned', this run has 'lookahead'" in capsys.readouterr().err
    assert _run(tmp_path, "--json", "--proposal", "learned") == 2
    assert "go together" in capsys.readouterr().err


def test_a_run_folder_resumes_under_the_old_flag_name_and_a_refusal_names_the_new_one(tmp_path, toy_model, capsys):
    """Run folders store settings by field (``exact_budget``), not by flag: a folder written with ``--exact-budget``
    resumes under its old name ``--budget`` (one warning line), and a resume with another budget is refused with
    the flag that resumes it."""
    assert _run(tmp_path, "--json", "--scores", "exact", "--exact-budget", "50") == 0
    capsys.readouterr()
    assert _run(tmp_path, "--json", "--scores", "exact", "--budget", "50") == 0
    err = capsys.readouterr().err
    assert "warning: --budget is deprecated and will be removed: use --exact-budget" in err
    assert _run(tmp_path, "--json", "--scores", "exact") == 2
    assert "(the folder's run: --exact-budget 50)" in capsys.readouterr().err
