"""Where a search's gain sits (benchmarks/splits.py): splits against enumeration on a toy vocabulary, kinds and
classes by hand, the table's sums, and the stored table of beam 8's paths recomputed."""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.splits import (Split, document_class, format_split_table, read_path_rows, split_kinds, split_table,
                                  splits)
from ppl_tok.mdd import compile_mdd
from ppl_tok.vocabulary import Vocabulary

SURFACES = [b"a", b"b", b" ", b"ab", b"ba", b" a", b" ab", b"aba"]
VOCAB = Vocabulary.from_tokens(SURFACES)


def test_splits_by_hand():
    # " ab ab" canonically [" ab", " ab"]; the path [" ", "ab", " a", "b"]
    canon, path = [6, 6], [2, 3, 5, 1]
    assert splits(canon, path, SURFACES) == [Split(0, (b" ab",), (b" ", b"ab")), Split(3, (b" ab",), (b" a", b"b"))]
    assert splits(canon, canon, SURFACES) == []
    with pytest.raises(ValueError, match="different bytes"):
        splits([6], [2, 3, 0], SURFACES)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"b", b" "]), min_size=1, max_size=9).map(b"".join), st.data())
def test_splits_rebuild_the_path_from_the_canonical_one(text, data):
    """Every tokenization of the text: swapping each split's canonical surfaces for the path's gives the path."""
    paths = list(compile_mdd(text, VOCAB).enumerate())
    canon = list(data.draw(st.sampled_from(paths)))
    path = list(data.draw(st.sampled_from(paths)))
    found = splits(canon, path, SURFACES)
    assert [s.start for s in found] == sorted({s.start for s in found})
    rebuilt, offset, k = [], 0, 0
    pieces = [SURFACES[t] for t in canon]
    while k < len(pieces):
        here = next((s for s in found if s.start == offset), None)
        if here is not None and tuple(pieces[k:k + len(here.canonical)]) == here.canonical:
            rebuilt += here.path
            offset += sum(map(len, here.canonical))
            k += len(here.canonical)
        else:
            rebuilt.append(pieces[k])
            offset += len(pieces[k])
            k += 1
    assert rebuilt == [SURFACES[t] for t in path]
    assert all(s.canonical != s.path and b"".join(s.canonical) == b"".join(s.path) for s in found)


def test_kinds_and_classes():
    first = Split(0, (b"What",), (b"W", b"hat"))
    space = Split(9, (b" After",), (b" ", b"After"))
    rep = Split(20, (b" mouthwash",), (b" mouth", b"wash"))
    one = Split(40, (b" sunscreen",), (b" sun", b"screen"))
    assert split_kinds([first, space, rep, one, Split(60, rep.canonical, rep.path)]) == [
        "first", "space", "repeat", "single", "repeat"]
    assert document_class(["space", "space", "first"]) == "space pattern"
    assert document_class(["space", "first"]) == "first"
    assert document_class(["single", "repeat"]) == "repeat"
    assert document_class(["space"]) == "single"  # one detached space: a split like any other
    assert document_class([]) == "none"


def test_the_table_sums_the_gain_by_class_and_the_kept_share():
    L = math.log
    rows = [  # document 0: the best path detaches two spaces (one at a join); document 1: only the canonical path
        {"index": 0, "canonical_path": [0, 6, 6], "paths": [[[0, 6, 6], L(0.1)], [[0, 2, 3, 2, 3], L(0.3)]]},
        {"index": 1, "canonical_path": [3], "paths": [[[3], L(0.5)], [[0, 1], L(0.1)]]}]
    t = split_table(rows, SURFACES, {0: [1], 1: []}, kept={0: L(2.0), 1: 0.0})
    space, none = t["classes"]["space pattern"], t["classes"]["none"]
    assert space["documents"] == 1 and space["gain_nats"] == pytest.approx(L(0.4 / 0.1))
    assert (space["splits"], space["splits_at_joins"]) == (2, 1)
    assert none["documents"] == 1 and none["gain_nats"] == pytest.approx(L(0.6 / 0.5))
    assert space["kept_share"] == pytest.approx(L(2.0) / L(4.0)) and none["kept_share"] == 0.0
    assert t["gain_nats"] == pytest.approx(L(4.0) + L(1.2))
    assert t["per_document"][0]["splits"][0] == [1, "space", [" ab"], [" ", "ab"], True]
    assert "space pattern" in format_split_table(t)[2]
    with pytest.raises(ValueError, match="not among the benchmark's documents"):
        split_table(rows, SURFACES, {0: []})
    with pytest.raises(ValueError, match="no row in the run to compare"):
        split_table(rows, SURFACES, {0: [], 1: []}, kept={0: 0.0})


def test_rows_without_paths_are_refused_naming_the_fix(tmp_path):
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"index": 0, "bytes": 3}\n')
    with pytest.raises(ValueError, match="measure with bench perplexity --paths"):
        read_path_rows(bad)
    bad.write_text('{"index": 0,\n')
    with pytest.raises(ValueError, match="rows.jsonl:1: not a JSON line"):
        read_path_rows(bad)
    with pytest.raises(ValueError, match="cannot read"):
        read_path_rows(tmp_path / "missing.jsonl")


def test_the_stored_table_of_beam_8_recomputes(capsys):
    """results/perplexity/bench50: beam 8's paths, against the three shares' run (docs/benchmarks.md)."""
    from cli_run import run
    from conftest import SHARED

    root = Path(__file__).resolve().parents[2] / "results" / "perplexity"
    stored = json.loads((root / "bench50" / "smollm2-beam8-splits.json").read_text())
    code, out, err = run(capsys, "benchmarks", "perplexity", "splits", "--data-dir", str(SHARED / "data"),
                         str(root / "bench50" / "smollm2-beam8-paths.jsonl.gz"), "--reference",
                         str(root / "knobs" / "lazy-2026-11-25" / "mixed50-cand-all"), "--json")
    assert code == 0, err
    t = json.loads(out)
    assert t == stored
    assert t["gain_nats"] == pytest.approx(103.94, abs=0.01) and t["kept_nats"] / t["gain_nats"] == pytest.approx(
        0.476, abs=0.001)
    assert [d["index"] for d in t["per_document"] if d["class"] == "space pattern"] == [15, 35, 41]


def test_split_costs_sum_to_the_paths_difference_and_own_is_the_split_alone():
    """A non-Markov toy LM: each split's own part is the log-ratio over its bytes given the histories, the after
    parts the shared tokens' change; together log p(path) - log p(canonical)."""
    from benchmarks.splits import split_costs
    from ppl_tok.lm.toy import FunctionLM

    vocab = Vocabulary.from_tokens([None, "a", "b", " ", "ab", " ab", " a"])
    lm = FunctionLM(vocab, lambda p: [float((5 * len(p) + 3 * sum(p) + 2 * t) % 7) - 3.0 for t in range(7)],
                    bos_id=0, log=True)
    canonical, path = [5, 1, 5, 4], [3, 4, 1, 6, 2, 1, 2]  # " ab" a " ab" ab  against  " " ab a " a" b a b
    costs = split_costs(lm, canonical, path)
    assert [c["start"] for c in costs] == [0, 4, 7]
    assert sum(c["own"] + c["after"] for c in costs) == pytest.approx(lm.log_prob(path) - lm.log_prob(canonical))
    # the second split (" ab" at byte 4 against " a", "b"), after the first and the shared "a"
    own = (lm.log_prob(path[:5]) - lm.log_prob(path[:3])) - (lm.log_prob(canonical[:3]) - lm.log_prob(canonical[:2]))
    assert costs[1]["own"] == pytest.approx(own)
    after = (lm.log_prob(path[:3]) - lm.log_prob(path[:2])) - (lm.log_prob(canonical[:2]) - lm.log_prob(canonical[:1]))
    assert costs[0]["after"] == pytest.approx(after)  # the shared "a" after the first split
    assert split_costs(lm, canonical, canonical) == []


@pytest.mark.slow
def test_the_stored_costs_of_three_documents_recompute(smollm2):
    """results/perplexity/bench50/smollm2-beam8-split-costs.json: own and after parts of beam 8's best paths."""
    from benchmarks.splits import split_costs

    root = Path(__file__).resolve().parents[2] / "results" / "perplexity" / "bench50"
    stored = {d["index"]: d for d in json.loads((root / "smollm2-beam8-split-costs.json").read_text())["per_document"]}
    rows = {r["index"]: r for r in read_path_rows(root / "smollm2-beam8-paths.jsonl.gz")}
    for i in (15, 21, 39):
        best = max(rows[i]["paths"], key=lambda p: p[1])[0]
        costs = split_costs(smollm2, rows[i]["canonical_path"], best)
        assert [c["own"] for c in costs] == pytest.approx(stored[i]["own_nats"], abs=1e-3)
        assert [c["after"] for c in costs] == pytest.approx(stored[i]["after_nats"], abs=1e-3)
