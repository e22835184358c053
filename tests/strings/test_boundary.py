"""The boundary report: tokens spanning the join, canonical against the conditional over strings (toy, brute force)."""

import json

import pytest

import ppl_tok.cli.common
from ppl_tok.cli.main import main
from ppl_tok.strings.boundary import boundary_report, move_trailing_space, spans_join
from ppl_tok.strings import StringSearchConfig
from qa_toy import toy_lm
from tests.strings.test_conditional import brute_event
from tests.strings.test_state import brute_prefix

WIDE = StringSearchConfig(beam=10_000, prune=1e6, prefill="exact")
PAIRS = [("ab", "c de"), ("ab", " cd"), ("ab ", "cd"), ("a", "b"), ("", " abc")]


def test_spanning_tokens_and_the_moves_equal_brute_force():
    lm = toy_lm(3)
    assert spans_join(lm, "a", "b") and spans_join(lm, "ab", "c de")  # "ab", "abc" cross the join
    assert not spans_join(lm, "ab", " cd") and not spans_join(lm, "", " abc")
    report = boundary_report(lm, PAIRS, WIDE)
    for r, (c, x) in zip(report.rows, PAIRS):
        c, x = move_trailing_space(c, x)
        assert (r["context"], r["continuation"]) == (c, x)
        before = brute_prefix(lm, c.encode())
        want = brute_event(lm, (c + x).encode(), "boundary") - before
        assert r["conditional"] == pytest.approx(want, abs=1e-9) and r["event"] == "boundary"
        assert r["prefix"] == pytest.approx(brute_prefix(lm, (c + x).encode()) - before, abs=1e-9)
        assert r["canonical"] == pytest.approx(lm.canonical_log_prob(x, c) if c else lm.canonical_log_prob(x),
                                               abs=1e-9)
        assert r["moved"] == pytest.approx(r["conditional"] - r["canonical"], abs=1e-12)
    s = report.summary()
    assert s["requests"] == 5 and s["spanning"] == 2
    assert s["moved"] == sum(abs(r["moved"]) > 0.01 for r in report.rows)
    for r in report.rows:  # each prefix move has one cause, in the order join, prefix event, rest
        want = (None if abs(r["moved_prefix"]) <= 0.01 else "join" if r["spans_join"]
                else "prefix event" if abs(r["moved"]) <= 0.01 else "rest")
        assert r["cause"] == want
    assert sum(s["moved_prefix_by_cause"].values()) == s["moved_prefix"] == sum(r["cause"] is not None
                                                                               for r in report.rows)
    prefix = boundary_report(lm, PAIRS, WIDE, event="prefix")
    assert [r["conditional"] for r in prefix.rows] == pytest.approx([r["prefix"] for r in report.rows], abs=1e-9)
    assert all(r["cause"] in (None, "join", "rest") for r in prefix.rows)  # no prefix-event move under prefix
    assert report.rows[1]["conditional"] == pytest.approx(report.rows[2]["conditional"], abs=1e-12)  # space moved
    with pytest.raises(ValueError, match=r"request 0 \(counted from 0\): the continuation is empty"):
        boundary_report(lm, [("ab", "")])


def test_the_command(tmp_path, capsys, monkeypatch):
    lm = toy_lm(3)
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: lm)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"q": c, "a": x}) + "\n" for c, x in PAIRS))
    assert main(["boundary", str(path), "--fields", "q", "a", "--beam", "10000", "--prune", "1e4", "--prefill",
                 "exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = boundary_report(lm, PAIRS, WIDE)
    assert out["spanning"] == 2 and [r["moved"] for r in out["rows"]] == pytest.approx(
        [r["moved"] for r in want.rows], abs=1e-12)
    assert out["moved_prefix_by_cause"] == want.summary()["moved_prefix_by_cause"]
    assert main(["boundary", str(path), "--fields", "q", "a", "--prefill", "exact"]) == 0
    assert "the prefix event's figure moved in" in capsys.readouterr().out
    assert main(["boundary", str(path)]) == 2
    assert "expected string fields 'context' and 'continuation'" in capsys.readouterr().err
