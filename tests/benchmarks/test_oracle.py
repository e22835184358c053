"""The oracle's cost of a search's gain (benchmarks/oracle.py): forwards counted by shared prefixes, greedy
against brute force over subsets."""

import itertools
import math
import random

import pytest

from benchmarks.oracle import FoundPaths, format_oracle, oracle_curve
from ppl_tok.common.logspace import logsumexp

L = math.log


def test_forwards_are_the_distinct_prefixes_and_the_greedy_order_is_gain_per_forward():
    doc = FoundPaths((1, 2, 3), (((1, 2, 3), L(0.5)), ((1, 2, 7, 8), L(0.25)), ((9, 3), L(0.2))))
    o = oracle_curve([doc], shares=(0.5, 0.75, 0.99))
    assert o["canonical_forwards"] == 3 and o["gain_nats"] == pytest.approx(L(0.95 / 0.5))
    # (1, 2, 7, 8) shares (1, 2) with the canonical path: 2 new forwards for log(0.75 / 0.5); (9, 3): 2 for log 1.4
    first, second, third = o["points"]
    assert first["forwards_ratio"] == pytest.approx(5 / 3) and first["gain_share"] == pytest.approx(L(1.5) / L(1.9))
    assert second["forwards_ratio"] == third["forwards_ratio"] == pytest.approx(7 / 3)
    assert third["gain_share"] == pytest.approx(1.0)
    assert o["all_paths_forwards_ratio"] == pytest.approx(7 / 3)
    assert "50% at 1.67x" in format_oracle(o)


def _forwards(paths):
    return len({tuple(p[:k]) for p in paths for k in range(1, len(p) + 1)})


def test_the_greedy_cost_is_feasible_and_near_the_best_subset_on_random_documents():
    rng = random.Random(0)
    for trial in range(30):
        docs = []
        for _ in range(2):
            canon = tuple(rng.randrange(3) for _ in range(4))
            paths = {canon: L(rng.uniform(0.2, 0.6))}
            while len(paths) < 5:
                p = tuple(rng.randrange(3) for _ in range(rng.randrange(2, 6)))
                paths.setdefault(p, L(rng.uniform(0.001, 0.2)))
            docs.append(FoundPaths(canon, tuple(paths.items())))
        o = oracle_curve(docs, shares=(0.5, 0.9))
        canon_fw = sum(len(d.canonical) for d in docs)
        options = []  # per document: (forwards, log mass) of every subset holding the canonical path
        for d in docs:
            others = [p for p in d.paths if p[0] != d.canonical]
            lp0 = dict(d.paths)[d.canonical]
            opts = []
            for r in range(len(others) + 1):
                for sub in itertools.combinations(others, r):
                    opts.append((_forwards([d.canonical, *(p for p, _ in sub)]),
                                 logsumexp([lp0, *(lp for _, lp in sub)]) - lp0))
            options.append(opts)
        total = sum(max(g for _, g in opts) for opts in options)
        assert o["gain_nats"] == pytest.approx(total)
        for point in o["points"]:
            best = min(f1 + f2 for (f1, g1), (f2, g2) in itertools.product(*options)
                       if g1 + g2 >= point["share"] * total * (1 - 1e-12))
            assert point["forwards_ratio"] * canon_fw >= best - 1e-9  # never below the best subset
            assert point["forwards_ratio"] * canon_fw <= 1.5 * best  # and near it on these
            assert point["gain_share"] >= point["share"] - 1e-9


def test_bad_found_paths_are_clear_errors():
    with pytest.raises(ValueError, match="not among the found paths"):
        FoundPaths((1, 2), (((1,), -1.0),))
    with pytest.raises(ValueError, match="at most 0"):
        FoundPaths((1,), (((1,), -1.0), ((2,), 0.5)))
    with pytest.raises(ValueError, match="no probability"):
        FoundPaths((1,), (((1,), -math.inf),))
    with pytest.raises(ValueError, match="no documents"):
        oracle_curve([])
    no_gain = oracle_curve([FoundPaths((1,), (((1,), -1.0),))])
    assert [p["forwards_ratio"] for p in no_gain["points"]] == [1.0] * 4


def test_the_stored_beam_8_paths_give_the_documented_curve():
    """results/perplexity/bench50: beam 8's found paths on the 50 benchmark documents (docs/benchmarks.md)."""
    import gzip
    import json
    from pathlib import Path

    from benchmarks.oracle import oracle_of_rows

    folder = Path(__file__).resolve().parents[2] / "results" / "perplexity" / "bench50"
    rows = [json.loads(line) for line in gzip.open(folder / "smollm2-beam8-paths.jsonl.gz", "rt")]
    o = oracle_of_rows(rows)
    assert o["documents"] == 50 and o["documents_without_paths"] == 0 and o["canonical_forwards"] == 12300
    assert o["gain_nats"] == pytest.approx(103.94, abs=0.01)
    ninety = next(p for p in o["points"] if p["share"] == 0.9)
    assert ninety["forwards_ratio"] == pytest.approx(1.48, abs=0.005)
    assert sum(r["forwards"] for r in rows) / o["canonical_forwards"] == pytest.approx(36.35, abs=0.01)
    assert o == json.loads((folder / "smollm2-beam8-oracle.json").read_text())
