"""Fixtures of the integration tests: lm-eval task files of a toy QA study."""

import pytest

from ppl_tok.integrations.lm_eval_tasks import write_tasks
from qa_toy import write_questions


@pytest.fixture
def toy_tasks(tmp_path):
    test = write_questions(tmp_path / "test.jsonl", 5, seed=1)
    tune = write_questions(tmp_path / "tune.jsonl", 3, seed=2)
    names = write_tasks(str(test), tmp_path / "tasks", tune=tune)
    return test, tune, names, tmp_path / "tasks"
