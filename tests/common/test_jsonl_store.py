import json
import math

import pytest

from ppl_tok.common.jsonl_store import JsonlStore, StoreError


class Runs(JsonlStore):
    @staticmethod
    def key(record):
        return record["id"]


class Log(Runs):
    unique_keys = False
    allow_nan = True


def test_a_lone_file_resumes_after_a_torn_line_and_is_locked(tmp_path):
    path = tmp_path / "sub" / "runs.jsonl"
    with Runs.open_file(path) as store:
        assert store.records == [] and store.path == path
        store.append([{"id": 1}, {"id": 2}])
        with pytest.raises(StoreError, match="being written by another run"):
            Runs.open_file(path)
        with pytest.raises(StoreError, match="already stored"):
            store.append([{"id": 2}])
    with open(path, "a") as f:
        f.write('{"id": 3, "x"')  # a write torn by a kill
    with Runs.open_file(path) as store:
        assert [r["id"] for r in store.records] == [1, 2] and path.read_text().endswith("\n")
        store.append([{"id": 3}])
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == [1, 2, 3]
    path.write_text('{"id": 1}\nnot json\n{"id": 2}\n')
    with pytest.raises(StoreError, match="runs.jsonl:2: not a record"):
        Runs.open_file(path)


def test_a_log_may_repeat_keys_and_hold_infinities(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"id": 1, "v": -Infinity}\n{"id": 1, "v": NaN}\n')  # as bench diagnostics always wrote
    with Log.open_file(path) as store:
        assert len(store.records) == 2 and store.records[0]["v"] == -math.inf
        store.append([{"id": 1, "v": math.inf}])
    assert json.loads(path.read_text().splitlines()[-1])["v"] == math.inf
    with pytest.raises(StoreError, match="repeats line 1"):
        type("KeyedLog", (Runs,), {"allow_nan": True}).open_file(path)
    with pytest.raises(StoreError, match="log.jsonl:1: a number is -inf"):  # a store of standard JSON: damage
        Runs.open_file(path)


def test_a_folder_of_records_without_its_settings_is_refused(tmp_path):
    """Issue 50: a folder whose run.json was removed adopted whatever records it held."""
    folder = tmp_path / "run"
    with Runs.open(folder, {"model": "a"}) as store:
        store.append([{"id": 1}])
    (folder / "run.json").unlink()
    with pytest.raises(StoreError, match="holds records .records.jsonl. but no run.json"):
        Runs.open(folder, {"model": "b"})
    assert not (folder / "run.json").exists()
    (folder / "records.jsonl").write_text("")  # an empty records file is a new folder
    with Runs.open(folder, {"model": "b"}) as store:
        assert store.records == [] and store.settings == {"model": "b"}


@pytest.mark.parametrize("line, message", [
    ('{"id": 1, "v": NaN}', "a number is nan"),
    ('{"id": 1, "v": [1, 1e999]}', "a number is inf"),
    ('{"id": 1, "lp": 0.5}', "'lp' holds 0.5, not a log-probability"),
    ('{"id": 1, "n": -1}', "'n' holds -1, not an integer >= 0"),
    ('{"id": 1, "n": true}', "'n' holds True"),
    ('[1]', "expected a JSON object"),
])
def test_numbers_read_back_are_checked(tmp_path, line, message):
    """Issue 50: edited numbers in a store passed into the reports unchecked."""
    class Checked(Runs):
        fields = {"lp": "log", "n": "count"}

    path = tmp_path / "r.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(StoreError, match=f"r.jsonl:1: .*{message}"):
        Checked.open_file(path)
