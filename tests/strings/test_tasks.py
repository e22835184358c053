"""The registered string tasks through the one runner: surprisal as a task (issue 45 item 1, issue 47 item 4)."""

import json

import pytest

from ppl_tok.common.jsonl_store import SettingsMismatchError
from ppl_tok.strings.batch import Item, Members, Options, answer, run_items
from ppl_tok.strings.surprisal import surprisals
from ppl_tok.strings.tasks import TASKS, SurprisalParams, string_task
from ppl_tok.strings import StringSearchConfig
from tests.strings.test_state import history_lm
from tests.strings.test_surprisal import VOCAB

TEXTS = ["ab ba.", "b ab a", "a b. ab", "ba"]
WIDE = StringSearchConfig(beam=10_000, prune=1e4)  # every prefix kept (a finite prune: run.json is JSON)


def test_surprisal_is_a_registered_task_that_walks_its_batches():
    assert "surprisal" in TASKS and string_task("surprisal").walks_items and not string_task("surprisal").ensembles


def test_surprisal_through_the_runner_equals_surprisals_and_its_folder_resumes(tmp_path):
    """Each item's record holds the units of ``surprisals`` of it alone (batches walked in lockstep: to 1e-9 on a
    toy LM); regions per item; a rerun of the folder computes nothing; other settings are refused."""
    lm = history_lm(3, VOCAB)
    items = [Item(n, t) for n, t in enumerate(TEXTS)] + [Item(4, "ab ba", regions=((0, 3), (3, 5)))]
    options = Options(config=WIDE, params=SurprisalParams(final="end"))
    run = run_items("surprisal", Members((lm,)), items, options, out=tmp_path / "run", batch_size=2)
    assert run.computed == 5 and run.errors == 0
    for record, it in zip(run.records, items):
        units = "word" if it.regions is None else list(it.regions)
        want = surprisals(lm, it.prompt, units=units, config=WIDE, final="end")
        assert [u["text"] for u in record["units"]] == [w.text for w in want]
        assert [u["surprisal"] for u in record["units"]] == pytest.approx([w.surprisal for w in want], abs=1e-9)
        assert [u["canonical"] for u in record["units"]] == pytest.approx([w.canonical for w in want], abs=1e-9)
    again = run_items("surprisal", Members((lm,)), items, options, out=tmp_path / "run", batch_size=2)
    assert again.computed == 0 and again.records == run.records
    stored = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert [r["index"] for r in stored] == [0, 1, 2, 3, 4]
    with pytest.raises(SettingsMismatchError, match="final: folder has 'end', this run has 'boundary'"):
        run_items("surprisal", Members((lm,)), items, Options(config=WIDE, params=SurprisalParams(final="boundary")), out=tmp_path / "run",
                  batch_size=2)


def test_one_item_an_error_and_an_ensemble():
    """One prompt is a batch of one; an item no token covers is its own error record, the others answered; an
    ensemble is refused naming the fix."""
    lm = history_lm(3, VOCAB)
    one = answer("surprisal", Members((lm,)), Item(0, "b ab a"), Options(config=WIDE))
    assert [u["surprisal"] for u in one["units"]] == pytest.approx(
        [u.surprisal for u in surprisals(lm, "b ab a", config=WIDE)], abs=1e-9)
    run = run_items("surprisal", Members((lm,)), [Item(0, "ab c"), Item(1, "ab")], Options(config=WIDE))
    assert "unit 1 (' c'" in run.records[0]["error"] and "units" in run.records[1]
    with pytest.raises(ValueError, match="walks one LM: give one model"):
        run_items("surprisal", Members((lm, history_lm(4, VOCAB))), [Item(0, "ab")], Options(config=WIDE))


def test_entropy_is_a_setting_of_the_record():
    lm = history_lm(3, VOCAB)
    run = run_items("surprisal", Members((lm,)), [Item(0, "ab ba.")], Options(config=WIDE, params=SurprisalParams(entropy=True)))
    assert all(u["next_token_entropy"] >= 0 for u in run.records[0]["units"])
