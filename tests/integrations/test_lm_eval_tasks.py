"""lm-eval task files of the QA study (ppl_tok.integrations.lm_eval_tasks); lm-eval itself is not needed."""

import json

from ppl_tok.qa.data import load_study


def test_write_tasks_holds_the_qa_study(toy_tasks):
    test, tune, names, folder = toy_tasks
    assert names == ["ppltok_test_tune", "ppltok_test"]
    study = load_study(str(test), tune=tune)
    rows = [json.loads(line) for line in (folder / "ppltok_test.jsonl").read_text().splitlines()]
    assert [(r["id"], r["context"], tuple(r["choices"]), r["label"]) for r in rows] == \
        [(q.id, q.context, q.choices, q.label) for q in study.splits["test"]]
    assert {r["split"] for r in rows} == {"test"}
