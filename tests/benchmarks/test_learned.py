"""``python -m benchmarks learned`` (benchmarks.learned): the summary's statistics, and the command wired to it."""

import pytest

from cli_run import run
from benchmarks import learned as bench


def _row(errors, forwards):
    return {"text": "x", "log_p": -1.0, "runs": [{"method": m, "num_samples": 64, "error": e, "forwards": f}
                                                 for m, e, f in zip(bench.METHODS, errors, forwards)]}


def test_summary_gives_median_p90_and_forwards_ratios():
    rows = [_row((e, e / 10, e / 2), (10, 30, 10)) for e in (1.0, 2.0, 3.0, 4.0, 5.0)]
    summary = {s["method"]: s for s in bench.summarize(rows, (64,))}
    assert summary["lookahead"]["median_error"] == 3.0 and summary["lookahead"]["p90_error"] == pytest.approx(4.6)
    assert summary["stratified"]["median_error"] == pytest.approx(0.3) and summary["stratified"]["forwards_ratio"] == 3
    assert summary["learned"]["forwards_ratio"] == 1 and summary["learned"]["strings"] == 5
    lines = bench.format_learned({"weights": [1, 0, 0, 0], "steps": 2, "train_texts": ["a"], "train_seconds": 1.0,
                                  "rows": rows, "summary": bench.summarize(rows, (64,))})
    assert len(lines) == 5 and lines[2].split()[:2] == ["lookahead", "64"]


def test_quick_mode_is_wired(capsys, monkeypatch):
    seen = {}
    monkeypatch.setattr(bench, "bench_learned", lambda model, **kw: seen.update(kw, model=model) or {})
    monkeypatch.setattr(bench, "format_learned", lambda r: ["done"])
    code, out, _ = run(capsys, "benchmarks", "learned", "--quick", "--device", "cpu")
    assert code == 0 and out == "done\n" and seen["sizes"] == (16,) and seen["heldout"] == 3 and seen["device"] == "cpu"
