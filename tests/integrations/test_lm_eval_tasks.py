"""lm-eval task files of the QA study (ppl_tok.integrations.lm_eval_tasks); lm-eval itself is not needed."""

import json

from ppl_tok.integrations.lm_eval_tasks import write_tasks
from ppl_tok.qa.data import load_study
from qa_toy import write_questions


def test_write_tasks_holds_the_qa_study(toy_tasks):
    test, tune, names, folder = toy_tasks
    assert names == ["ppltok_test_tune", "ppltok_test"]
    study = load_study(str(test), tune=tune)
    rows = [json.loads(line) for line in (folder / "ppltok_test.jsonl").read_text().splitlines()]
    assert [(r["id"], r["context"], tuple(r["choices"]), r["label"]) for r in rows] == \
        [(q.id, q.context, q.choices, q.label) for q in study.splits["test"]]
    assert {r["split"] for r in rows} == {"test"}


def test_the_task_yaml_points_at_its_data_file_and_the_name_is_sanitised(tmp_path):
    test = write_questions(tmp_path / "my-set.v2.jsonl", 4, seed=3)
    assert write_tasks(str(test), tmp_path / "tasks", limit=2) == ["ppltok_my_set_v2"]
    config = json.loads((tmp_path / "tasks" / "ppltok_my_set_v2.yaml").read_text())  # JSON is YAML
    data = tmp_path / "tasks" / "ppltok_my_set_v2.jsonl"
    assert config["task"] == "ppltok_my_set_v2" and config["dataset_kwargs"]["data_files"]["test"] == str(data.resolve())
    assert (config["doc_to_text"], config["doc_to_choice"], config["doc_to_target"]) == ("context", "choices", "label")
    assert [m["metric"] for m in config["metric_list"]] == ["acc", "acc_norm"]
    assert len(data.read_text().splitlines()) == 2  # --limit
