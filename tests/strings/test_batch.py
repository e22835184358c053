"""Many prompts at once (strings.batch): each record equals the one-prompt API's figures, batches and resumes
change nothing, a folder with other settings is refused, an item's own error is its record."""

import json
import math

import pytest

from ppl_tok.common.jsonl_store import SettingsMismatchError
from ppl_tok.strings import StringSearchConfig, initial, next_char_log_probs, string_conditional
from ppl_tok.strings.builtin_tasks import ConditionalTaskParams
from ppl_tok.strings.batch import (Item, Members, Options, StringsStore, answer, batch_settings, item_seed, run_items,
                                   storable, walk)
from ppl_tok.strings.ensemble import Ensemble, ensemble_conditional
from ppl_tok.strings.tasks import GenerateParams, NextParams
from ppl_tok.strings.generate import generate
from tests.strings.test_ensemble import OTHER
from tests.strings.test_state import WIDE, history_lm

PAIRS = [("ab", "ba"), ("", "abba"), ("bab", "a"), ("a", "bbab"), ("abba", "b")]
ITEMS = [Item(i, p, t, f"pairs:{i + 1}") for i, (p, t) in enumerate(PAIRS)]
NARROW = StringSearchConfig(beam=2, prune=3.0)


def test_conditionals_equal_string_conditional():
    lm = history_lm(3)
    run = run_items("conditional", Members((lm,)), ITEMS, Options(config=NARROW), batch_size=2)
    assert run.computed == len(ITEMS) and run.stored == 0 and run.errors == 0
    for item, record in zip(ITEMS, run.records):
        want = string_conditional(lm, item.prompt, item.text, config=NARROW)
        assert record["index"] == item.index and record["where"] == item.where
        assert (record["lower"], record["estimate"], record["upper"]) == (want.lower, want.estimate, want.upper)
        assert record["canonical_tokens"] == lm.canonical_log_prob(item.text, item.prompt) if item.prompt else True
        assert "seconds" not in record  # a timing, not a figure: the records of a resumed run equal an uninterrupted one's


def test_next_bytes_and_characters_equal_the_state():
    lm = history_lm(2)
    items = [Item(i, p) for i, (p, _) in enumerate(PAIRS)]
    for chars in (False, True):
        run = run_items("next", Members((lm,)), items, Options(config=NARROW, params=NextParams(chars=chars)))
        for item, record in zip(items, run.records):
            state = initial(lm, item.prompt, config=NARROW)
            want = next_char_log_probs(state).to_dict() if chars else state.next_byte_log_probs().to_dict()
            assert record["log_probs" if not chars else "chars"] == storable(want["log_probs" if not chars else "chars"])
            assert record["unit"] == ("char" if chars else "byte")


def test_generations_draw_from_the_items_own_seed_whatever_the_batch():
    lm = history_lm(3)
    items = [Item(i, p) for i, (p, _) in enumerate(PAIRS)]
    for mode in ("bytes", "tokens"):
        options = Options(config=WIDE, params=GenerateParams(max_bytes=6, seed=11, mode=mode))
        one = run_items("generate", Members((lm,)), items, options, batch_size=1).records
        three = run_items("generate", Members((lm,)), items, options, batch_size=3).records
        alone = run_items("generate", Members((lm,)), items[3:4], options).records
        assert one == three and alone == one[3:4]
        for item, record in zip(items, one):
            want = generate(lm, item.prompt, 6, seed=item_seed(11, item.index), config=WIDE, mode=mode, progress=False)
            assert record["text"] == want.text and record["seed"] == item_seed(11, item.index)
        assert len({r["seed"] for r in one}) == len(items)


def test_an_ensemble_item_equals_the_ensemble_api():
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    members = Members((a, b), "product", (1.0, 0.5))
    with pytest.raises(ValueError, match="add --event prefix"):  # the default event, boundary: one LM's only
        answer("conditional", members, ITEMS[0], Options(config=WIDE))
    record = answer("conditional", members, ITEMS[0], Options(config=WIDE, params=ConditionalTaskParams(event="prefix")))
    want = ensemble_conditional(Ensemble.of([a, b], "ab", "product", [1.0, 0.5], config=WIDE), "ba")
    assert record["estimate"] == want.estimate and record["kind"] == "product"
    record = answer("next", members, Item(0, "ab"), Options(config=WIDE))
    assert record["log_probs"] == Ensemble.of([a, b], "ab", "product", [1.0, 0.5], config=WIDE).next_bytes().to_dict()[
        "log_probs"]


def test_walk_reports_every_byte_and_is_the_state_of_the_prompt():
    lm = history_lm(3)
    seen = []
    state = walk(lm, "abbab", None, Options(config=NARROW), seen.append)
    assert sum(seen) == 5
    want = initial(lm, "abbab", config=NARROW)
    assert state.prefix_log_prob() == want.prefix_log_prob()


def test_a_resumed_run_computes_only_the_missing_items_and_stores_the_same_records(tmp_path):
    lm = history_lm(3)
    ref = run_items("conditional", Members((lm,)), ITEMS, Options(config=NARROW), out=tmp_path / "ref", batch_size=2)
    lines = (tmp_path / "ref" / StringsStore.records_file).read_bytes().splitlines(keepends=True)
    part = tmp_path / "part"
    part.mkdir()
    (part / StringsStore.settings_file).write_bytes((tmp_path / "ref" / StringsStore.settings_file).read_bytes())
    (part / StringsStore.records_file).write_bytes(b"".join(lines[:3]) + lines[3][:10])  # a batch torn mid-write
    again = run_items("conditional", Members((lm,)), ITEMS, Options(config=NARROW), out=part, batch_size=2)
    assert again.stored == 3 and again.computed == 2 and again.records == ref.records
    assert sorted((part / StringsStore.records_file).read_bytes().splitlines()) == sorted(b"".join(lines).splitlines())


def test_a_folder_with_other_settings_is_refused_naming_the_setting(tmp_path):
    lm = history_lm(3)
    run_items("conditional", Members((lm,)), ITEMS, Options(config=NARROW), out=tmp_path, batch_size=2)
    with pytest.raises(SettingsMismatchError, match="beam: folder has 2, this run has 3"):
        run_items("conditional", Members((lm,)), ITEMS, Options(config=StringSearchConfig(beam=3, prune=3.0)),
                  out=tmp_path, batch_size=2)
    with pytest.raises(SettingsMismatchError, match="batch_size: folder has 2, this run has 1"):
        run_items("conditional", Members((lm,)), ITEMS, Options(config=NARROW), out=tmp_path, batch_size=1)
    lazy = StringSearchConfig(beam=NARROW.beam, prune=NARROW.prune, extend_threshold=0.1)
    with pytest.raises(SettingsMismatchError, match="extend_threshold: folder has 0.0, this run has 0.1"):
        run_items("conditional", Members((lm,)), ITEMS, Options(config=lazy), out=tmp_path, batch_size=2)
    split = StringSearchConfig(beam=NARROW.beam, prune=NARROW.prune, boundary_threshold=0.01)
    with pytest.raises(SettingsMismatchError, match="boundary_threshold"):
        run_items("conditional", Members((lm,)), ITEMS, Options(config=split), out=tmp_path, batch_size=2)
    run_json = tmp_path / "run.json"  # a folder from before the setting was recorded resumes at 0
    run_json.write_text(json.dumps({k: v for k, v in json.loads(run_json.read_text()).items()
                                    if k != "extend_threshold"}))
    assert run_items("conditional", Members((lm,)), ITEMS, Options(config=NARROW), out=tmp_path,
                     batch_size=2).computed == 0
    other = history_lm(3, bos_id=None)
    with pytest.raises(SettingsMismatchError, match="models: folder has"):
        run_items("conditional", Members((other,)), ITEMS, Options(config=NARROW), out=tmp_path, batch_size=2)
    settings = batch_settings("generate", Members((lm, other), "product"), Options(params=GenerateParams(seed=4)))
    assert settings["kind"] == "product" and settings["seed"] == 4 and len(settings["models"]) == 2
    assert json.loads(json.dumps(settings)) == settings


def test_an_item_that_cannot_be_answered_is_stored_with_its_error():
    lm = history_lm(3)
    items = [Item(0, "ab", "ba"), Item(1, "abc", "a"), Item(2, "b", "a")]  # no token spells "c"
    run = run_items("conditional", Members((lm,)), items, Options(config=NARROW))
    assert run.errors == 1 and "error" in run.records[1] and "0x63" in run.records[1]["error"]
    assert run.records[2]["estimate"] == string_conditional(lm, "b", "a", config=NARROW).estimate


def test_storable_writes_minus_infinity_as_every_json_output_does_and_refuses_nan():
    assert storable({"a": [-math.inf, 1.5], "b": "x"}) == {"a": ["-Infinity", 1.5], "b": "x"}
    with pytest.raises(ValueError):
        storable(math.nan)
