"""``python -m benchmarks perplexity`` (``benchmarks/perplexity.py``): documents, resumption, lockstep, prefixes (its
``--memory-bytes``: tests/bench/test_memory.py)."""

from __future__ import annotations
import json
import pytest
from ppl_tok.strings.beam import StringSearchConfig


def test_bench_documents_span_the_lengths_asked():
    from conftest import SHARED
    from benchmarks.perplexity import bench_documents

    docs = bench_documents(SHARED / "data", 5, 300, 2000)
    assert [len(d.encode()) for d in docs][::4] == [300, 2000]
    assert all(300 - 3 <= len(d.encode()) <= 2000 for d in docs)  # a cut inside a character drops its bytes


@pytest.mark.slow  # three benchmark runs on SmolLM2: about 20 CPU-s
def test_bench_resumes_from_its_folder_and_refuses_other_settings(tmp_path, monkeypatch):
    from conftest import SHARED
    from ppl_tok.common.jsonl_store import SettingsMismatchError
    from benchmarks import perplexity as bench

    knobs = {"data_dir": SHARED / "data", "documents": 2, "min_bytes": 12, "max_bytes": 20,
             "search": StringSearchConfig(beam=2, prune=3.0)}
    first = bench.bench_perplexity("smollm2-135m", out=tmp_path / "b", **knobs)
    assert [r["bytes"] for r in first["rows"]] == [12, 20]
    assert all(r["gain_bits_per_byte"] >= -1e-6 and r["marginal_forwards_per_byte"] > 0 for r in first["rows"])
    rows = (tmp_path / "b" / "documents.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in rows] == [0, 1]
    assert bench.measuring_order(5) == [0, 4, 1, 3, 2] and bench.measuring_order(0) == []
    # a rerun measures nothing: every row comes from the folder
    (tmp_path / "b" / "documents.jsonl").write_text(rows[0] + "\n")  # as if killed after the first document
    calls = []
    import ppl_tok.scorings.canonical as score

    original = score.canonical_scores
    monkeypatch.setattr(score, "canonical_scores", lambda *a, **k: calls.append(1) or original(*a, **k))
    again = bench.bench_perplexity("smollm2-135m", out=tmp_path / "b", **knobs)
    assert len(calls) == 1 and again["rows"][0] == first["rows"][0]
    assert again["rows"][1]["bytes"] == 20
    with pytest.raises(SettingsMismatchError, match="beam"):
        bench.bench_perplexity("smollm2-135m", out=tmp_path / "b",
                               **{**knobs, "search": StringSearchConfig(beam=3, prune=3.0)})
    graced = StringSearchConfig(beam=2, prune=3.0, extend_threshold=0.2, boundary_threshold=1e-3,
                                rejoin_threshold=1e-6)
    with pytest.raises(SettingsMismatchError, match="boundary_threshold"):  # every lazy setting is compared
        bench.bench_perplexity("smollm2-135m", out=tmp_path / "b", **{**knobs, "search": graced})
    lazy = bench.bench_perplexity("smollm2-135m", out=tmp_path / "c", **{**knobs, "search": graced})
    assert (lazy["boundary_threshold"], lazy["rejoin_threshold"]) == (1e-3, 1e-6)
    assert "rejoin threshold 1e-06" in bench.format_perplexity(lazy)[0]


@pytest.mark.slow  # three documents alone and in lockstep on SmolLM2: about 12 CPU-s
def test_bench_lockstep_runs_fewer_calls_for_the_same_beams():
    from conftest import SHARED
    from benchmarks import perplexity as bench

    r = bench.bench_lockstep("smollm2-135m", data_dir=SHARED / "data", documents=3, min_bytes=15, max_bytes=30,
                             search=StringSearchConfig(beam=2, prune=3.0))
    assert r["alone"]["forwards"] == r["lockstep"]["forwards"] > 0
    assert r["lockstep"]["calls"] < r["alone"]["calls"] and r["calls_ratio"] > 1
    assert r["max_floor_difference_nats"] < 1e-3  # float32 rounding of batched rows only
    assert "fewer calls" in bench.format_lockstep(r)[-1]


@pytest.mark.slow  # the beams against the closed brackets on SmolLM2: about 11 CPU-s
def test_bench_prefixes_bounds_the_beams_error_where_the_bracket_closes(monkeypatch):
    from conftest import SHARED
    from benchmarks import perplexity as bench

    knobs = {"data_dir": SHARED / "data", "documents": 2, "min_bytes": 12, "max_bytes": 20}
    wide = bench.bench_prefixes("smollm2-135m", prefix_bytes=(6, 12), **knobs)
    assert [r["prefix_bytes"] for r in wide["rows"]] == [6, 12]
    for r in wide["rows"]:
        assert r["closed"] == r["documents"] == 2 and r["floor_above_bracket"] == 0
        assert 0 <= r["median_error_nats"] <= r["max_error_nats"] < 0.01  # beam 8 loses next to nothing here
        assert r["within_0.01_bits_per_byte"] == 2 and r["bracket_forwards_per_prefix"] > 0
        assert 0 <= r["max_certain_error_nats"] <= r["max_error_nats"]
    # a beam that lost half a nat of mass on every prefix is reported 0.5 nats further off
    import dataclasses

    import ppl_tok.strings as strings

    original = strings.string_marginals
    monkeypatch.setattr(strings, "string_marginals", lambda *a, **k: [
        dataclasses.replace(r, lower=r.lower - 0.5, estimate=r.estimate - 0.5) for r in original(*a, **k)])
    lossy = bench.bench_prefixes("smollm2-135m", prefix_bytes=(12,), **knobs)
    assert lossy["rows"][0]["max_error_nats"] == pytest.approx(wide["rows"][1]["max_error_nats"] + 0.5, abs=1e-4)
    assert lossy["rows"][0]["within_0.01_bits_per_byte"] == 0
    assert lossy["rows"][0]["max_certain_error_nats"] > 0.49
    assert "closed" in bench.format_prefixes(lossy)[1]
    with pytest.raises(ValueError, match="prefix_bytes"):
        bench.bench_prefixes("smollm2-135m", prefix_bytes=(), **knobs)


def test_bench_keeps_the_found_paths_and_prices_their_gain(tmp_path):
    from conftest import SHARED
    from benchmarks import perplexity as bench
    from ppl_tok.common.logspace import logsumexp

    knobs = {"data_dir": SHARED / "data", "documents": 2, "min_bytes": 12, "max_bytes": 20,
             "search": StringSearchConfig(beam=4, prune=8.0)}
    plain = bench.bench_perplexity("smollm2-135m", out=tmp_path / "b", limit=1, **knobs)
    assert plain["oracle"] is None and "paths" not in plain["rows"][0]
    kept = bench.bench_perplexity("smollm2-135m", out=tmp_path / "b", paths=True, **knobs)  # resumes row 0
    (row,) = [r for r in kept["rows"] if "paths" in r]
    lps = [lp for _, lp in row["paths"]]
    assert len(lps) > 1 and logsumexp(lps) == pytest.approx(row["lower_nats"], abs=1e-3)  # the floor is their mass
    canon = dict((tuple(p), lp) for p, lp in row["paths"])[tuple(row["canonical_path"])]
    assert canon == pytest.approx(row["canonical_nats"], abs=1e-3)
    o = kept["oracle"]
    assert o["documents"] == 1 and o["documents_without_paths"] == 1
    assert o["canonical_forwards"] == len(row["canonical_path"]) == row["tokens"]
    assert o["gain_nats"] == pytest.approx(logsumexp(lps) - canon)
    ratios = [p["forwards_ratio"] for p in o["points"]]
    assert ratios == sorted(ratios) and 1.0 <= ratios[0] and ratios[-1] <= o["all_paths_forwards_ratio"]
    assert any(line.startswith("oracle (the found paths") and "1 documents measured without --paths" in line
               for line in bench.format_perplexity(kept))
    json.dumps(kept, allow_nan=False)
