"""`make gpu-check` (ppl_tok.bench.gpucheck): arguments, the report, and a quick run of some parts on the CPU."""

import json

import pytest
import torch

import ppl_tok.lm.cards
from ppl_tok.bench import gpucheck
from ppl_tok.cli.main import main

from conftest import SHARED


def test_bad_arguments_are_one_line_errors(capsys, tmp_path):
    assert main(["bench", "gpu-check", "--parts", "engine,warp"]) == 2
    assert "--parts: unknown ['warp']" in capsys.readouterr().err
    if not torch.cuda.is_available():  # the default device is cuda
        assert main(["bench", "gpu-check", "--out", str(tmp_path / "unused")]) == 2
        assert "error: device 'cuda' is not available" in capsys.readouterr().err


def test_the_command_returns_1_when_a_part_fails(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(gpucheck, "bracket", lambda lm: 1 / 0)
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: object())
    assert main(["bench", "gpu-check", "--device", "cpu", "--parts", "bracket", "--out", str(tmp_path)]) == 1
    assert "1 part(s) failed" in capsys.readouterr().err and (tmp_path / "report.json").is_file()


def test_targets_are_judged_for_the_device_and_never_at_toy_sizes():
    parts = {"tests": {"passed": True}, "syncs": {"syncs_per_step": 2.5},
             "engine": {"ratio_to_raw": 0.95, "ratio_to_raw_at_engine_shapes": 0.85, "questions_per_min": 600.0,
                        "many_ratio_to_raw": 0.2}}
    cpu = {(t["part"], t["figure"]): t["met"] for t in gpucheck._judge(parts, "cpu", quick=False)}
    assert cpu == {("tests", "passed"): True, ("syncs", "syncs_per_step"): False,
                   ("engine", "ratio_to_raw"): True, ("engine", "ratio_to_raw_at_engine_shapes"): False,
                   ("engine", "questions_per_min"): True}
    gpu = {(t["part"], t["figure"]): t["met"] for t in gpucheck._judge(parts, "cuda", quick=False)}
    assert gpu[("engine", "questions_per_min")] is True and gpu[("engine", "many_ratio_to_raw")] is False
    quick = {(t["part"], t["figure"]): t["met"] for t in gpucheck._judge(parts, "cpu", quick=True)}
    assert quick[("engine", "ratio_to_raw")] is None and quick[("syncs", "syncs_per_step")] is False


@pytest.mark.slow
def test_a_quick_check_on_the_cpu_writes_its_report(tmp_path):
    report = gpucheck.check("cpu", data=SHARED / "data", out=tmp_path, quick=True, parts=("syncs", "bracket", "qa"))
    assert not [name for name, part in report["parts"].items() if "error" in part]
    assert report["parts"]["syncs"]["syncs_per_step"] <= 2
    assert report["parts"]["qa"]["run_json_device"] == "cpu" and report["parts"]["bracket"]["closed"]
    assert json.loads((tmp_path / "report.json").read_text())["device"] == "cpu"
    assert "| syncs |" in (tmp_path / "report.md").read_text()


def test_a_run_of_some_parts_adds_them_to_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(gpucheck, "run_tests", lambda device, tests: {"passed": True})
    monkeypatch.setattr(gpucheck, "bracket", lambda lm: {"closed": True})
    import ppl_tok.lm.cards

    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: object())
    gpucheck.check("cpu", out=tmp_path, quick=True, parts=("tests",))
    report = gpucheck.check("cpu", out=tmp_path, quick=True, parts=("bracket",))
    assert set(report["parts"]) == {"tests", "bracket"} and report["targets"][0]["met"] is True
    assert set(json.loads((tmp_path / "report.json").read_text())["parts"]) == {"tests", "bracket"}


def test_the_tests_part_reads_a_checkout_only_when_given_one(tmp_path):
    assert "no test folder given" in gpucheck.run_tests("cpu", None)["skipped"]
    assert "none of" in gpucheck.run_tests("cpu", tmp_path)["skipped"]
    assert all(not f.startswith("tests/") for f in gpucheck.TEST_FILES)
