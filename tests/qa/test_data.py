"""QA splits and the generic multiple-choice JSON Lines format."""

import json

import pytest

from conftest import SHARED
from ppl_tok.datasets import DatasetError, read_multiple_choice
from ppl_tok.qa.data import load_study
from qa_toy import write_questions

DATA = SHARED / "data"


def test_generic_jsonl_reads_rows(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"context": "The sky is", "choices": ["blue", "green"], "label": 0}) + "\n\n" +
                    json.dumps({"id": 7, "context": "Two and two", "choices": ["four", "five", "six"], "label": 2})
                    + "\n")
    qs = read_multiple_choice(path)
    assert [q.id for q in qs] == ["1", "7"]
    assert qs[1].choices == ("four", "five", "six") and qs[1].label == 2


@pytest.mark.parametrize("row, message", [
    ({"context": "c", "choices": ["a", "b"], "label": 2}, "label 2 does not index 2 choices"),
    ({"context": "c", "choices": ["a"], "label": 0}, "at least two"),
    ({"context": "c", "choices": ["a", 3], "label": 0}, "choice 1 should be a string"),
    ({"context": "c", "choices": ["a", "b"], "label": True}, "'label' should be int"),
    ({"choices": ["a", "b"], "label": 0}, "missing field 'context'"),
    ({"context": "c", "choices": ["a", "b"], "label": 0, "id": [1]}, "'id' should be a string or an int"),
])
def test_generic_jsonl_errors_name_file_and_line(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"context": "ok", "choices": ["x", "y"], "label": 1}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DatasetError, match=f"bad.jsonl:2: .*{message}"):
        read_multiple_choice(path)


def test_generic_study_test_only_and_with_tune(tmp_path):
    test = write_questions(tmp_path / "t.jsonl", 6, seed=1)
    tune = write_questions(tmp_path / "u.jsonl", 4, seed=2)
    assert load_study(str(test)).sizes() == {"test": 6}
    study = load_study(str(test), tune=tune, limit=5)
    assert study.sizes() == {"tune": 4, "test": 5}
    assert set(study.files) == {str(test), str(tune)}


def test_openbookqa_dev_tunes_test_tests():
    study = load_study("openbookqa", DATA)
    assert study.sizes() == {"tune": 500, "test": 500}
    assert study.splits["tune"][0].id == "8-376"
    assert study.files[str(DATA / "openbookqa" / "test.jsonl")].startswith("feb2bd9b")
    assert load_study("openbookqa", DATA / "openbookqa", limit=3).sizes() == {"tune": 3, "test": 3}


def test_socialiqa_shuffle_is_seeded_disjoint_and_nested():
    small = load_study("socialiqa", DATA, limit=10)
    big = load_study("socialiqa", DATA, limit=20)
    full = load_study("socialiqa", DATA)
    assert full.sizes() == {"tune": 977, "test": 977}
    assert not {q.id for q in full.splits["tune"]} & {q.id for q in full.splits["test"]}
    for split in ("tune", "test"):
        assert small.splits[split] == big.splits[split][:10]
    assert load_study("socialiqa", DATA, limit=10, seed=5).splits["test"] != small.splits["test"]


def test_hellaswag_splits_the_whole_validation_file():
    full = load_study("hellaswag", DATA)  # ids must be unique: `ind` repeats in this file
    assert full.sizes() == {"tune": 5021, "test": 5021}
    ids = [q.id for split in ("tune", "test") for q in full.splits[split]]
    assert len(set(ids)) == 10042
    assert load_study("hellaswag", DATA, limit=500).splits["test"] == full.splits["test"][:500]


def test_builtin_dataset_refuses_tune_and_missing_data(tmp_path):
    with pytest.raises(ValueError, match="--tune"):
        load_study("openbookqa", DATA, tune=tmp_path / "x.jsonl")
    with pytest.raises(DatasetError, match="no openbookqa file"):
        load_study("openbookqa", tmp_path)
    with pytest.raises(DatasetError, match="neither one of"):
        load_study(str(tmp_path / "nothing.jsonl"))


def test_an_empty_file_or_split_is_an_error_not_an_empty_study(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(DatasetError, match="empty.jsonl: no rows"):
        read_multiple_choice(empty)
    with pytest.raises(DatasetError, match="empty.jsonl: no rows"):
        load_study(str(write_questions(tmp_path / "t.jsonl", 3, seed=1)), tune=empty)
    one = tmp_path / "socialiqa"
    one.mkdir()
    (one / "dev.jsonl").write_text(json.dumps({"context": "c", "question": "q", "answerA": "a", "answerB": "b",
                                               "answerC": "c"}) + "\n")
    (one / "dev-labels.lst").write_text("1\n")
    with pytest.raises(DatasetError, match="the tune split of socialiqa has no questions"):
        load_study("socialiqa", tmp_path)
