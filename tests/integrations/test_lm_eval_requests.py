"""An lm-eval task's requests read through lm-eval's task API, and the boundary report of a task (toy LM)."""

from __future__ import annotations

import json
import os

import pytest

for _var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")

pytest.importorskip("lm_eval", reason="needs the lm-eval extra: pip install 'ppl-tok[lm-eval]'")

import ppl_tok.cli.common  # noqa: E402
from ppl_tok.cli.main import main  # noqa: E402
from ppl_tok.integrations.lm_eval_requests import task_boundary_report, task_pairs  # noqa: E402
from ppl_tok.strings import StringSearchConfig  # noqa: E402
from ppl_tok.strings.boundary import boundary_report  # noqa: E402
from qa_toy import toy_lm  # noqa: E402

WIDE = StringSearchConfig(beam=10_000, prune=1e6, prefill="exact")


def _test_task(names):
    (name,) = [n for n in names if not n.endswith("_tune")]
    return name


def _expected(test_file):
    """lm-eval's multiple-choice requests of the written task: (context, " " + choice) per question and choice."""
    rows = [json.loads(line) for line in test_file.read_text().splitlines()]
    return [(r["context"], " " + c) for r in rows for c in r["choices"]]


def test_task_pairs_are_the_tasks_requests(toy_tasks):
    test, _, names, folder = toy_tasks
    assert task_pairs(_test_task(names), folder) == _expected(test)
    assert task_pairs(_test_task(names), folder, limit=2) == _expected(test)[:6]  # 3 choices a question
    with pytest.raises(ValueError, match="lm-eval task 'nope' not found in .*give --tasks-dir"):
        task_pairs("nope", folder)
    with pytest.raises(ValueError, match="no such folder"):
        task_pairs(_test_task(names), folder / "missing")


def test_the_report_of_a_task_equals_the_report_of_its_pairs(toy_tasks, tmp_path, capsys, monkeypatch):
    test, _, names, folder = toy_tasks
    lm = toy_lm(3)
    want = boundary_report(lm, _expected(test), WIDE)
    got = task_boundary_report(lm, _test_task(names), folder, config=WIDE)
    assert got.rows == want.rows and got.summary() == want.summary()
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: lm)
    assert main(["boundary", "--task", _test_task(names), "--tasks-dir", str(folder), "--beam", "10000", "--prune", "1e4",
                 "--prefill", "exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"] == f"lm-eval task {_test_task(names)}" and out["requests"] == len(want.rows)
    assert [r["moved"] for r in out["rows"]] == pytest.approx([r["moved"] for r in want.rows], abs=1e-12)
    path = tmp_path / "r.jsonl"
    path.write_text("x\n")
    assert main(["boundary", str(path), "--task", _test_task(names)]) == 2
    assert "give either FILE" in capsys.readouterr().err
