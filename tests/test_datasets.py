import gzip
import json

import pytest

from conftest import SHARED
from ppl_tok.datasets import DatasetError, continuation, find_data_files, load_questions, texts_of


def test_real_files_load_with_expected_sizes():
    sizes = {f.name: len(load_questions(f)) for f in find_data_files(SHARED / "data")}
    assert sizes == {"hellaswag_val.jsonl.gz": 10042, "dev.jsonl": 500, "test.jsonl": 500} or \
        sorted(sizes.values()) == [500, 500, 1954, 10042]


def test_formats_follow_the_paper_tasks():
    siqa = load_questions(SHARED / "data" / "socialiqa" / "dev.jsonl")
    assert siqa[0].context.startswith("Q: ") and siqa[0].context.endswith("\nA:")
    assert siqa[0].label == 2 and len(siqa[0].choices) == 3
    obqa = load_questions(SHARED / "data" / "openbookqa" / "dev.jsonl")
    assert obqa[0].id == "8-376" and obqa[0].choices[obqa[0].label] == "Deep sea animals"
    hs = load_questions(SHARED / "data" / "hellaswag" / "hellaswag_val.jsonl.gz")
    assert all("[" not in q.context for q in hs[:500])
    # `ind` repeats in the file (433 values), so the id is the line number: unique
    assert len({q.id for q in hs}) == len(hs) == 10042 and hs[0].id == "1"
    assert list(texts_of(obqa[:1]))[1] == " Deep sea animals" == continuation("Deep sea animals")


@pytest.mark.parametrize("line,match", [
    ("{not json", "not valid JSON"),
    ('{"question": {"stem": "q", "choices": [{"text": "a", "label": "A"}]}, "answerKey": "B"}', "answerKey"),
    ('{"answerKey": "A"}', "missing field 'question'"),
    ("[1, 2]", "expected a JSON object"),
])
def test_malformed_rows_name_file_and_line(tmp_path, line, match):
    f = tmp_path / "dev.jsonl"
    good = '{"question": {"stem": "q", "choices": [{"text": "a", "label": "A"}]}, "answerKey": "A"}'
    f.write_text(good + "\n" + line + "\n")
    with pytest.raises(DatasetError, match=match) as err:
        load_questions(f)
    assert "dev.jsonl:2" in str(err.value)


def test_broken_gzip_and_missing_labels(tmp_path):
    bad = tmp_path / "hellaswag_val.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b broken")
    with pytest.raises(DatasetError, match="cannot read"):
        load_questions(bad)
    siqa = tmp_path / "dev.jsonl"
    siqa.write_text(json.dumps({"context": "c", "question": "q", "answerA": "a", "answerB": "b",
                                "answerC": "c"}) + "\n")
    (tmp_path / "dev-labels.lst").write_text("1\n2\n")
    with pytest.raises(DatasetError, match="1 rows but dev-labels.lst has 2 labels"):
        load_questions(siqa)
    with pytest.raises(DatasetError, match="no data file"):
        load_questions(tmp_path / "none.jsonl")
    empty = tmp_path / "empty" / "hellaswag_val.jsonl.gz"
    empty.parent.mkdir()
    with gzip.open(empty, "wt") as f:
        f.write("\n")
    with pytest.raises(DatasetError, match="hellaswag_val.jsonl.gz: no rows"):
        load_questions(empty)
    good = tmp_path / "hs" / "hellaswag_val.jsonl.gz"
    good.parent.mkdir()
    with gzip.open(good, "wt") as f:
        f.write(json.dumps({"activity_label": "A", "ctx_a": "x", "ctx_b": "y", "label": 5,
                            "endings": ["a", "b"]}) + "\n")
    with pytest.raises(DatasetError, match="label 5 does not index 2 endings"):
        load_questions(good)


OBQA_GOOD = {"question": {"stem": "q", "choices": [{"text": "a", "label": "A"}, {"text": "b", "label": "B"}]},
             "answerKey": "A"}
HS_GOOD = {"activity_label": "A", "ctx_a": "x", "ctx_b": "y", "label": 0, "endings": ["a", "b"]}


@pytest.mark.parametrize("name,row,match", [
    ("hellaswag_val.jsonl", {**HS_GOOD, "endings": ["a", 7]}, "ending 1 should be a string, got 7"),
    ("hellaswag_val.jsonl", {**HS_GOOD, "label": True}, "field 'label' should be int, got True"),
    ("dev.jsonl", {**OBQA_GOOD, "question": {"stem": "q", "choices": [{"text": 3, "label": "A"}]}},
     "choice text 0 should be a string, got 3"),
])
def test_wrongly_typed_fields_are_clear_errors(tmp_path, name, row, match):
    f = tmp_path / name
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetError, match=match) as err:
        load_questions(f)
    assert f"{name}:1" in str(err.value)


def test_latin1_file_names_the_path_and_line(tmp_path):
    f = tmp_path / "dev.jsonl"
    f.write_bytes(json.dumps(OBQA_GOOD).encode() + b"\n" + json.dumps({**OBQA_GOOD, "id": "caf\xe9"},
                                                                       ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(DatasetError, match=r"dev.jsonl:2: not UTF-8"):
        load_questions(f)


def test_bad_socialiqa_label_cites_the_labels_file_line(tmp_path):
    row = json.dumps({"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c"})
    siqa = tmp_path / "dev.jsonl"
    siqa.write_text("\n".join([row] * 3) + "\n")
    (tmp_path / "dev-labels.lst").write_text("1\n\n2\n7\n")  # the third label is on line 4
    with pytest.raises(DatasetError, match=r"dev-labels.lst:4: label '7' \(for dev.jsonl line 3\)"):
        load_questions(siqa)


def test_data_file_is_the_one_layout(tmp_path):
    from ppl_tok.datasets import DATA_FILES, DATA_ROOT, TASKS, data_file, labels_file

    assert DATA_ROOT == "../shared/data" and TASKS == tuple(DATA_FILES) == ("hellaswag", "socialiqa", "openbookqa")
    assert data_file("openbookqa", "dev", SHARED / "data") == SHARED / "data" / "openbookqa" / "dev.jsonl"
    assert data_file("hellaswag", "val", SHARED / "data") == SHARED / "data" / "hellaswag" / "hellaswag_val.jsonl.gz"
    assert labels_file(data_file("socialiqa", "dev", SHARED / "data")).name == "dev-labels.lst"
    # nothing there: the first accepted name, for the caller's message
    assert data_file("hellaswag", "val", tmp_path) == tmp_path / "hellaswag" / "hellaswag_val.jsonl"
    # the task's own folder is accepted too; a plain file is preferred to a gzipped one
    (tmp_path / "hellaswag_val.jsonl").write_text("{}\n")
    (tmp_path / "hellaswag_val.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    assert data_file("hellaswag", "val", tmp_path) == tmp_path / "hellaswag_val.jsonl"
    with pytest.raises(ValueError, match="no 'test' split of 'socialiqa'"):
        data_file("socialiqa", "test")
    assert [f.relative_to(SHARED / "data").as_posix() for f in find_data_files(SHARED / "data")] == [
        "hellaswag/hellaswag_val.jsonl.gz", "socialiqa/dev.jsonl", "openbookqa/dev.jsonl", "openbookqa/test.jsonl"]


def test_the_bundled_openbookqa_is_the_shared_one_byte_for_byte_and_loads_like_it():
    from ppl_tok.datasets import BUNDLED_DATA, data_file

    for split in ("dev", "test"):
        bundled, shared = data_file("openbookqa", split, BUNDLED_DATA), data_file("openbookqa", split, SHARED / "data")
        assert bundled.parent == BUNDLED_DATA / "openbookqa" and bundled.read_bytes() == shared.read_bytes()
        assert len(load_questions(bundled)) == 500
