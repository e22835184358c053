"""The surprisal grid's report: errors against exhaustive word by word, both rules, calls per item; the tree knob."""

import json

import pytest

from benchmarks.surprisal_grid import parse_setting, report


def _write(out, name, surprisal, cpu, calls):
    line = {"lo": 0, "knobs": parse_setting(name), "cpu": cpu, "wall": cpu, "canonical_cpu": 1.0, "forwards": 10,
            "calls": calls, "canonical_calls": 1, "surprisal": surprisal}
    (out / f"{name}.jsonl").write_text(json.dumps(line) + "\n")


def test_report_gives_both_rules_and_calls_per_item(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"n_items": 2, "batch": 16, "words": 200}))
    truth = [[1.0] * 100, [2.0] * 100]
    _write(tmp_path, "exhaustive", truth, 30.0, 80)
    near = [[1.0] * 99 + [1.05], [2.0] * 100]  # max 0.05, p99 0: both rules
    _write(tmp_path, "tree=0,extend_threshold=1e-05", near, 3.0, 12)
    far = [[1.02] * 10 + [1.0] * 90, [2.0] * 100]  # p99 0.02: the old rule only
    _write(tmp_path, "extend_threshold=0.1", far, 2.0, 60)
    got = {s["setting"]: s for s in report(tmp_path)["settings"]}
    tree = got["tree=0,extend_threshold=1e-05"]
    assert tree["knobs"] == {"tree": 0, "extend_threshold": 1e-05}
    assert tree["meets"] and tree["meets_issue58"] and tree["max_bits"] == pytest.approx(0.05)
    assert tree["calls_per_item"] == 6 and tree["canonical_calls_per_item"] == 0.5
    assert got["extend_threshold=0.1"]["meets"] and not got["extend_threshold=0.1"]["meets_issue58"]
    assert report(tmp_path)["chosen"] == "extend_threshold=0.1"  # the cheapest under the old rule
