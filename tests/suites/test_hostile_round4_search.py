"""The hostile suite of issue 56 (round four), certificates, resumable files and bounds.

The endings of the suites of issues 37 and 50 (``test_hostile_strings``, whose files, toy loader and
``refused`` this suite shares): refused in one line (before the model loads, where the loader counts its
calls), or answered with a figure checked against the same figure computed another way.
"""

from __future__ import annotations

import json

import pytest

from ppl_tok.cli.main import main
from ppl_tok.infer.adversarial import brute_force
from tests.suites.test_hostile_strings import LM, refused, world  # noqa: F401 - the shared fixture


# ------------------------------------------------------------ 2. a certificate says only what was proved
def test_a_threshold_above_the_max_gives_at_most_the_threshold_never_a_false_max(capsys, world):
    """``adversarial ... --threshold -0.6`` printed "certified: the max over all 19 tokenizations is -1.2048"
    where the max was -0.7044: members between the incumbent and the threshold are pruned unscored."""
    rows = brute_force(LM, "abc abc", "b", distance=3)
    truth, canon = max(f for *_, f in rows), [f for _, d, f in rows if d == 0][0]
    assert canon < truth < -0.6  # the case: the max lies between the canonical's score and the threshold
    argv = ["adversarial", "abc abc", "--target", "b", "--distance", "3", "--model", "toy-bigram", "--threshold"]
    assert main(argv + ["-0.6"]) == 0
    out = capsys.readouterr().out
    assert f"the max over all {len(rows)} tokenizations in the set is at most -0.6000" in out, out
    assert f"the best scored is {canon:.4f}" in out and f"in the set is {canon:.4f}" not in out
    assert main(argv + ["-0.6", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["certificate"] == "at-most" and r["certified_high"] == -0.6 and r["certified_low"] == canon
    assert main(argv + [str(truth - 1.0), "--json"]) == 0  # a threshold below the max: the max is exact
    r = json.loads(capsys.readouterr().out)
    assert r["certificate"] == "exact" and r["certified_low"] == pytest.approx(truth, abs=1e-12)


def test_stop_above_without_a_threshold_is_refused(capsys, world):
    refused(capsys, world, ["adversarial", "abc abc", "--target", "b", "--model", "toy-bigram", "--stop-above"],
            ["--stop-above", "--threshold"])
