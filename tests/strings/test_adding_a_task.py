"""Adding a string task is one module and one registration (docs/architecture.md, "Adding a string task").

This module is that one module: it defines a toy task, registers it, and the one runner
(:func:`ppl_tok.strings.batch.run_items`) answers it on one prompt, on many in batches, into a resumable
folder that records its own settings and refuses others.
"""

import json

import pytest

from ppl_tok.common.jsonl_store import SettingsMismatchError
from ppl_tok.strings import StringSearchConfig, initial
from ppl_tok.strings.batch import Item, Members, Options, run_items
from ppl_tok.strings.tasks import TASKS, StringTask, register_task, string_task, unregister_task
from tests.strings.test_state import history_lm

NARROW = StringSearchConfig(beam=2, prune=3.0)
PROMPTS = ["ab", "", "bab", "a", "abba"]


class PrefixMass(StringTask):
    """The prompt's prefix probability, certified, shifted by the task's own setting (the context's length)."""

    name = "toy-prefix-mass"
    doc = "log P(prompt is a prefix), with its bracket"

    def answer(self, target, item, options, on_bytes):
        p = target.prefix_log_prob()
        return {"prompt": item.prompt, "lower": p.lower, "upper": p.upper, "shift": len(options.context)}

    def settings(self, options):
        return {"shift": len(options.context)}


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
        run_items(PrefixMass.name, Members((lm,)), items, Options(context="b", config=NARROW), out=tmp_path / "run",
                  batch_size=2)
