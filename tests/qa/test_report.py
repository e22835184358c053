"""``qa report`` (``ppl_tok/qa/report.py``) on hand-written records: the scored prefix, and speed figures from
``timing.jsonl`` files."""
import json

import pytest

from ppl_tok.qa.report import _speed, scored_prefix
from ppl_tok.qa.store import TIMING_FILE


def write_timing(folder, lines):
    (folder / TIMING_FILE).write_text("".join(json.dumps(t) + "\n" for t in lines), encoding="utf-8")


def test_local_run_median_is_over_batch_rates(tmp_path):
    write_timing(tmp_path, [{"questions": 4, "seconds": 60.0, "kinds": ["is"]},
                            {"questions": 4, "seconds": 120.0, "kinds": ["is"]},
                            {"questions": 2, "seconds": 600.0, "kinds": ["is"]}])  # a batch slowed by other work
    speed = _speed(tmp_path)
    assert speed["questions"] == 10 and speed["questions_per_minute"] == pytest.approx(600 / 780)
    assert speed["median_batch_questions_per_minute"] == pytest.approx(2.0)
    assert "workers" not in speed


def test_ray_run_median_uses_worker_seconds(tmp_path):
    # Two workers; the driver's seconds (time between appends) alternate short and long and are
    # no batch's time. Each worker takes 120 s per 4-question batch: 2 q/min each, 4 q/min together.
    lines = [{"questions": 4, "seconds": s, "kinds": ["is"], "worker_seconds": ws, "worker": w}
             for s, ws, w in [(120.0, 120.0, 0), (5.0, 125.0, 1), (115.0, 120.0, 0), (10.0, 118.0, 1),
                              (400.0, 500.0, 0)]]  # the last one contended
    write_timing(tmp_path, lines)
    speed = _speed(tmp_path)
    assert speed["workers"] == 2 and speed["worker_seconds"] == pytest.approx(983.0)
    assert speed["median_worker_seconds_per_question"] == pytest.approx(30.0)
    assert speed["median_batch_questions_per_minute"] == pytest.approx(4.0)
    assert speed["questions_per_minute"] == pytest.approx(60 * 20 / 650)
    assert speed["by_kinds"]["is"]["median_batch_questions_per_minute"] == pytest.approx(4.0)


def test_run_resumed_under_ray_takes_both_kinds_of_batch(tmp_path):
    local = [{"questions": 4, "seconds": 80.0, "kinds": ["is"]}] * 2  # 3 q/min
    ray = [{"questions": 4, "seconds": 1.0, "kinds": ["is"], "worker_seconds": 120.0, "worker": w} for w in (0, 1)]
    write_timing(tmp_path, local + ray + ray)  # Ray: 2 workers at 2 q/min each
    speed = _speed(tmp_path)
    assert speed["workers"] == 2 and speed["worker_seconds"] == pytest.approx(480.0)
    assert speed["median_batch_questions_per_minute"] == pytest.approx(4.0)  # median of 3, 3, 4, 4, 4, 4


def test_scored_prefix_is_the_first_questions_scored_on_every_split():
    def records(split, indices, kind="is"):
        return [{"kind": kind, "split": split, "index": i} for i in indices]

    splits = {"tune": 6, "test": 3}
    assert scored_prefix(records("tune", range(6)) + records("test", range(3)), splits) == 6  # finished
    # the shorter split is finished; the longer one decides
    assert scored_prefix(records("tune", [0, 1, 2, 3, 5]) + records("test", range(3)), splits) == 4
    assert scored_prefix(records("tune", range(6)) + records("test", [0, 2]), splits) == 1
    # other kinds (an "exact" record) do not count, nor do splits the run does not have
    assert scored_prefix(records("tune", range(6)) + records("test", range(3), "exact") + records("dev", [0]),
                         splits) == 0
    assert scored_prefix([], {"test": 0}) == 0


def test_a_zero_interval_says_the_same_questions_are_right():
    from ppl_tok.qa.report import _ci

    assert _ci({"diff": 0.0, "low": 0.0, "high": 0.0, "within_noise": True}) == \
        "+0.0 [+0.0, +0.0] (the same questions right)"
    assert _ci({"diff": 0.02, "low": 0.004, "high": 0.04, "within_noise": False}) == "+2.0 [+0.4, +4.0] (significant)"
