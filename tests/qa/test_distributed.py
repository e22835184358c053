"""The QA study on Ray actors (a local Ray with 2 CPUs): same records and report as one process.

Toy bigram LMs for the fast tests; one slow test runs two SmolLM2 actors through
``ppl-tok qa run --ray``. Actors load their LM with a loader defined here,
so ``tests/`` goes on the workers' PYTHONPATH.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'ppl-tok[ray]'")

from conftest import SHARED  # noqa: E402

from ppl_tok.qa import report  # noqa: E402
from ppl_tok.qa.data import load_study  # noqa: E402
from ppl_tok.qa.distributed import DistributedError, run_study_ray  # noqa: E402
from ppl_tok.qa.run import run_study, study_settings  # noqa: E402
from ppl_tok.qa.store import read_records, read_timing  # noqa: E402
from qa_toy import toy_lm, write_questions  # noqa: E402
from sigkill import CrashOnceLoader  # noqa: E402


def toy_loader():
    """The toy LM, built inside an actor."""
    return toy_lm()


@pytest.fixture
def toy_study(tmp_path):
    test = write_questions(tmp_path / "test.jsonl", 7, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", 5, seed=2)
    study = load_study(str(test), tune=tune)
    return study, study_settings(study, model="toy", samples=8, seed=5, scores=["exact"])


def _records(folder: Path) -> list:
    return sorted(read_records(folder / "scores.jsonl"), key=lambda r: (r["kind"], r["split"], r["index"]))


def _report(folder: Path) -> dict:
    out = report.evaluate(folder, runs=8, resamples=200)
    out.pop("speed")
    return out


@pytest.fixture
def single(toy_study, tmp_path):
    study, settings = toy_study
    run_study(study, toy_lm(), tmp_path / "single", settings, batch_questions=3, progress=False)
    return tmp_path / "single"


def test_ray_run_equals_a_single_process_run(local_ray, toy_study, single, tmp_path):
    study, settings = toy_study
    run_study_ray(study, toy_loader, tmp_path / "ray", settings, workers=2, batch_questions=2, progress=False)
    assert _records(tmp_path / "ray") == _records(single)
    assert _report(tmp_path / "ray") == _report(single)
    timing = read_timing(tmp_path / "ray")
    assert sum(t["questions"] for t in timing) == 12 and {t["worker"] for t in timing} <= {0, 1}
    # a finished run deals nothing
    run_study_ray(study, toy_loader, tmp_path / "ray", settings, workers=2, batch_questions=2, progress=False)
    assert len(read_timing(tmp_path / "ray")) == len(timing)


@pytest.mark.slow  # ~20 s: Ray worker start-up
def test_a_killed_worker_is_replaced_and_nothing_is_lost_or_repeated(local_ray, toy_study, single, tmp_path):
    study, settings = toy_study
    marker = tmp_path / "crashed"
    run_study_ray(study, CrashOnceLoader(str(marker)), tmp_path / "ray", settings, workers=2, batch_questions=2,
                  progress=False)
    assert marker.exists()  # one worker did die mid-batch
    assert _records(tmp_path / "ray") == _records(single)  # read_records also rejects a repeated record


@pytest.mark.slow  # ~20 s: Ray worker start-up
def test_a_worker_that_keeps_dying_stops_the_run_and_the_rerun_finishes(local_ray, toy_study, single, tmp_path):
    study, settings = toy_study
    with pytest.raises(DistributedError, match="lost to a dead worker 2 times.*run again to resume"):
        run_study_ray(study, CrashOnceLoader(str(tmp_path / "marker"), always=True), tmp_path / "ray", settings,
                      workers=1, batch_questions=4, progress=False, max_retries=1)
    run_study_ray(study, toy_loader, tmp_path / "ray", settings, workers=2, batch_questions=4, progress=False)
    assert _records(tmp_path / "ray") == _records(single)


@pytest.mark.slow  # ~20 s: Ray worker start-up
def test_a_driver_stopped_mid_run_resumes(local_ray, toy_study, single, tmp_path):
    study, settings = toy_study

    class Stop(Exception):
        pass

    def stop(_chunk):
        raise Stop

    with pytest.raises(Stop):
        run_study_ray(study, toy_loader, tmp_path / "ray", settings, workers=2, batch_questions=2, progress=False,
                      on_append=stop)
    stored = len(list(read_records(tmp_path / "ray" / "scores.jsonl")))
    assert 0 < stored < len(_records(single))
    # a torn last line, as a kill during a write leaves it
    with open(tmp_path / "ray" / "scores.jsonl", "a") as f:
        f.write('{"kind": "is", "split"')
    run_study_ray(study, toy_loader, tmp_path / "ray", settings, workers=2, batch_questions=2, progress=False)
    assert _records(tmp_path / "ray") == _records(single)
    assert _report(tmp_path / "ray") == _report(single)


def test_workers_needs_ray(tmp_path, capsys):
    from ppl_tok.cli.main import main

    test = write_questions(tmp_path / "test.jsonl", 2)
    assert main(["qa", "run", "--dataset", str(test), "--model", "toy", "--workers", "2",
                 "--out", str(tmp_path / "run")]) == 2
    assert "--workers needs --ray" in capsys.readouterr().err


@pytest.mark.slow
def test_two_smollm2_actors_on_two_questions(local_ray, tmp_path, capsys):
    """``qa run --ray --workers 2`` on 1 tuning + 1 test OpenBookQA question: the report equals one process's."""
    from ppl_tok.cli.main import main

    args = ["qa", "run", "--dataset", "openbookqa", "--data-dir", str(SHARED / "data"), "--limit", "1",
            "--samples", "4", "--batch-size", "1", "--json"]
    assert main([*args, "--out", str(tmp_path / "single")]) == 0
    assert main([*args, "--out", str(tmp_path / "ray"), "--ray", "--workers", "2"]) == 0
    capsys.readouterr()
    assert {t["worker"] for t in read_timing(tmp_path / "ray")} == {0, 1}
    single, dist = _records(tmp_path / "single"), _records(tmp_path / "ray")
    assert [(r["split"], r["id"]) for r in dist] == [(r["split"], r["id"]) for r in single]
    for a, b in zip(single, dist):
        for ca, cb in zip(a["choices"], b["choices"]):
            assert ca["samples"] == cb["samples"]
            assert cb["log_p"] == pytest.approx(ca["log_p"], abs=1e-4)
            assert cb["canonical_log_prob"] == pytest.approx(ca["canonical_log_prob"], abs=1e-4)
    a, b = _report(tmp_path / "single"), _report(tmp_path / "ray")
    assert a["accuracy"] == b["accuracy"] and a["tuned"] == b["tuned"]
