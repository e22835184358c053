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


def _run(split, method, a, n, error, forwards=10, lower=None):
    truth = -10.0
    est = truth + error
    return {"split": split, "method": method, "a": a, "num_samples": n, "error": error, "forwards": forwards,
            "log_marginal": est, "statement": "uncalibrated", "ess": 10.0, "log_se": 0.1, "num_nonzero": n,
            "certified_lower": est if lower is None else lower, "bracket": None, "distinct": 5, "support": 9}


def test_the_defensive_share_is_chosen_by_the_tuning_splits_p90_then_median():
    rows = ([_run("tune", "learned a=0", 0.0, 256, e) for e in (0.0, 0.0, 0.0, 2.0)]
            + [_run("tune", "learned a=0.1", 0.1, 256, e) for e in (0.2, 0.2, 0.2, 0.3)]
            + [_run("tune", "learned a=0.3", 0.3, 256, e) for e in (0.1, 0.1, 0.1, 0.3)])
    assert bench.choose_defensive(rows, (0.0, 0.1, 0.3), 256) == 0.3  # equal p90 0.3: the smaller median
    assert bench.choose_defensive(rows, (0.0, 0.1, 0.3, 0.5), 256) == 0.3  # an a never run is never chosen
    assert bench.choose_defensive(rows, (0.0,), 256) == 0.0


def test_the_defensive_summary_counts_runs_off_by_a_nat_that_no_warning_flags():
    rows = [_run("heldout", "learned a=0.3", 0.3, 256, e) for e in (0.05, -1.5, 0.2)]
    rows[1]["certified_lower"] = rows[1]["log_marginal"] - 0.5  # 1.5 nats low, above every bound: unwarned
    rows.append(_run("heldout", "learned a=0.3", 0.3, 256, -2.0, lower=-11.5))  # below its lower bound: warned
    (entry,) = bench.summarize_runs(rows)
    assert entry["runs"] == 4 and entry["bad"] == 2 and entry["bad_unwarned"] == 1 and entry["warned"] == 1
    assert entry["median_error"] == pytest.approx((0.2 + 1.5) / 2)
    lines = bench.format_defensive({"weights": [1, 0, 0, 0], "steps": 1, "chosen_a": 0.3, "summary": [entry]})
    assert lines[2].split()[:4] == ["heldout", "learned", "a=0.3", "256"]


def test_the_defensive_benchmark_is_wired(capsys, monkeypatch):
    seen = {}
    monkeypatch.setattr(bench, "bench_defensive", lambda model, **kw: seen.update(kw, model=model) or {})
    monkeypatch.setattr(bench, "format_defensive", lambda r: ["done"])
    code, out, _ = run(capsys, "benchmarks", "learned-defensive", "--tune", "2", "--heldout", "3", "--grid", "0",
                       "0.5", "--device", "cpu")
    assert code == 0 and out == "done\n" and seen["grid"] == (0.0, 0.5) and seen["heldout"] == 3
