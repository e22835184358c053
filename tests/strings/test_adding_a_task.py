"""Adding a string task is one module and one registration (docs/architecture.md, "Adding a string task").

This module is that one module: it defines a toy task with a parameter of its own (``shift``, declared once in
its :class:`~ppl_tok.common.params.Params`), registers it, and the one runner
(:func:`ppl_tok.strings.batch.run_items`) answers it on one prompt, on many in batches, into a resumable
folder that records its own settings and refuses others; ``ppl-tok task NAME`` runs it with its own flag
(``--shift``), on one prompt and into a resumed run folder, and refuses another task's flags.
"""

import json
from dataclasses import dataclass

import pytest

import ppl_tok.cli.common
from ppl_tok.cli.main import main
from ppl_tok.common.arguments import integer
from ppl_tok.common.jsonl_store import SettingsMismatchError
from ppl_tok.common.params import Params, param
from ppl_tok.strings import StringSearchConfig, initial
from ppl_tok.strings.batch import Item, Members, Options, run_items
from ppl_tok.strings.tasks import TASKS, StringTask, register_task, string_task, unregister_task
from tests.strings.test_state import history_lm

NARROW = StringSearchConfig(beam=2, prune=3.0)
PROMPTS = ["ab", "", "bab", "a", "abba"]


@dataclass(frozen=True)
class PrefixMassParams(Params):
    shift: int = param(0, "nats subtracted from the bracket's ends", flag="--shift", type=integer(0))


class PrefixMass(StringTask):
    """The prompt's prefix probability, certified, shifted by the task's own parameter."""

    name = "toy-prefix-mass"
    doc = "log P(prompt is a prefix), with its bracket, shifted"
    params = PrefixMassParams

    def answer(self, target, item, options, on_bytes):
        p, shift = target.prefix_log_prob(), self.own(options).shift
        return {"prompt": item.prompt, "lower": p.lower - shift, "upper": p.upper - shift, "shift": shift}


@pytest.fixture
def toy_task():
    register_task(PrefixMass)
    yield string_task(PrefixMass.name)
    unregister_task(PrefixMass.name)


def test_registered_and_then_gone(toy_task):
    assert isinstance(toy_task, PrefixMass) and PrefixMass.name in TASKS
    unregister_task(PrefixMass.name)
    with pytest.raises(ValueError, match="unknown task 'toy-prefix-mass'"):
        run_items(PrefixMass.name, Members((history_lm(2),)), [Item(0, "ab")], Options())
    register_task(PrefixMass)


def test_one_prompt_many_prompts_and_a_resumable_folder(toy_task, tmp_path):
    lm = history_lm(2)
    items = [Item(i, p) for i, p in enumerate(PROMPTS)]
    one = run_items(PrefixMass.name, Members((lm,)), items[:1], Options(config=NARROW))
    assert one.computed == 1 and one.records[0]["lower"] == initial(lm, "ab", config=NARROW).prefix_log_prob().lower
    many = run_items(PrefixMass.name, Members((lm,)), items, Options(config=NARROW), out=tmp_path / "run",
                     batch_size=2)
    for item, record in zip(items, many.records):
        want = initial(lm, item.prompt, config=NARROW).prefix_log_prob()
        assert (record["index"], record["lower"], record["upper"]) == (item.index, want.lower, want.upper)
    settings = json.loads((tmp_path / "run" / "run.json").read_text())
    assert settings["task"] == PrefixMass.name and settings["shift"] == 0  # its own setting, recorded
    again = run_items(PrefixMass.name, Members((lm,)), items, Options(config=NARROW), out=tmp_path / "run",
                      batch_size=2)
    assert again.computed == 0 and again.records == many.records  # resumed: nothing computed again
    with pytest.raises(SettingsMismatchError, match="shift"):
        run_items(PrefixMass.name, Members((lm,)), items, Options(config=NARROW, params=PrefixMassParams(shift=1)),
                  out=tmp_path / "run", batch_size=2)
    with pytest.raises(ValueError, match=r"^shift \(--shift\): expected an integer >= 0, got -1$"):
        PrefixMassParams(shift=-1)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_line_runs_it_with_its_own_flag_and_resumes_its_folder(toy_task, monkeypatch, tmp_path, capsys):
    lm = history_lm(2)
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda spec: lm)
    search = ["--model", "toy", "--beam", "2", "--prune", "3"]
    want = initial(lm, "ab", config=NARROW).prefix_log_prob()
    code, out, _ = run(capsys, "task", PrefixMass.name, "--prompt", "ab", "--shift", "2", *search, "--json")
    record = json.loads(out)
    assert code == 0 and (record["lower"], record["upper"], record["shift"]) == (want.lower - 2, want.upper - 2, 2)
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    folder = tmp_path / "run"
    code, out, _ = run(capsys, "task", PrefixMass.name, "--input", items, "--out", folder, "--shift", "1", *search,
                       "--json")
    assert code == 0 and json.loads(out)["computed"] == len(PROMPTS)
    assert json.loads((folder / "run.json").read_text())["shift"] == 1
    code, out, _ = run(capsys, "task", PrefixMass.name, "--input", items, "--out", folder, "--shift", "1", *search,
                       "--json")
    summary = json.loads(out)
    assert code == 0 and summary["computed"] == 0 and summary["stored_before"] == len(PROMPTS)  # resumed
    code, _, err = run(capsys, "task", PrefixMass.name, "--input", items, "--out", folder, *search)
    assert code != 0 and "shift" in err  # another shift (the default): refused, naming it
    code, _, err = run(capsys, "task", PrefixMass.name, "--prompt", "ab", "--chars", *search)
    assert code == 2 and "--chars would be ignored: TASK toy-prefix-mass does not read it (it takes --shift" in err
    code, _, err = run(capsys, "task", "next", "--prompt", "ab", "--shift", "1", *search)
    assert code == 2 and "--shift is for TASK toy-prefix-mass" in err
