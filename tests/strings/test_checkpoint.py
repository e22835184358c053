"""A long walk saved mid-string and rebuilt (``ppl_tok/strings/checkpoint.py``, issue 51): the records, and a walk
resumed from any of them ending on the uninterrupted walk's floats (the toy LM's rows do not depend on the batch)."""

from __future__ import annotations

import json
import math

import pytest

from ppl_tok.strings import string_marginals
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.checkpoint import (CHECKPOINT_VERSION, join_pruned, pruned_delta, rebuild_states,
                                        trie_paths)
from ppl_tok.strings.events import string_events
from qa_toy import toy_lm

TEXTS = ["ab cd abc de fgh ba ab cd ef gh a" * 2, " a b c abc hgfe"]
CONFIG = StringSearchConfig(beam=4)


def _figures(results):
    return [{k: v for k, v in r.to_dict().items() if k != "seconds"} for r in results]


def _saved(walk, **kw):
    """The results of ``walk`` on a fresh toy LM, and each text's records (through JSON, as the store keeps them)."""
    records: dict[int, list] = {k: [] for k in range(len(TEXTS))}

    def save(out):
        for k, r in out:
            records[k].append(json.loads(json.dumps(r, allow_nan=False)))

    return walk(toy_lm(), TEXTS, None, CONFIG, checkpoint=save, checkpoint_every=0, **kw), records


def test_sweep_records_hold_the_frontier_as_a_trie_and_the_pruned_masses_as_deltas():
    ref = string_marginals(toy_lm(), TEXTS, None, CONFIG)
    got, records = _saved(string_marginals)
    assert _figures(got) == _figures(ref)  # saving changes nothing
    first = records[0]
    assert len(first) > 10 and all(r["version"] == CHECKPOINT_VERSION and r["walk"] == "sweep" for r in first)
    offsets = [r["offset"] for r in first]
    assert offsets[:-1] == sorted(set(offsets[:-1])) and offsets[-1] == offsets[-2] and first[-1]["done"] and not any(r["done"] for r in first[:-1])
    assert all(r["pruned_from"] == sum(len(q["pruned"]) for q in first[:k]) for k, r in enumerate(first))
    paths = trie_paths(first[-1]["nodes"])
    assert {paths[n] for n, _ in first[-1]["found"]} == set(ref[0].paths and dict(ref[0].paths))
    assert math.isclose(max(lp for _, lp in first[-1]["found"]), ref[0].best_log_prob, rel_tol=0, abs_tol=0)
    mid = first[len(first) // 2]
    assert mid["open"] and all(o > mid["offset"] for o, *_ in mid["open"])  # pending hypotheses lie ahead


@pytest.mark.parametrize("walk", [string_marginals, string_events])
def test_a_walk_resumed_from_any_record_ends_on_the_uninterrupted_floats(walk):
    ref = walk(toy_lm(), TEXTS, None, CONFIG)
    _, records = _saved(walk)
    steps = len(records[0])
    assert steps > 10
    for n in range(0, steps, 11):
        resumed = walk(toy_lm(), TEXTS, None, CONFIG, resume=[records[0][:n + 1], records[1][:n + 1]])
        assert (_figures(resumed) if walk is string_marginals else resumed) == (
            _figures(ref) if walk is string_marginals else ref), n


def test_a_resumed_walk_runs_less_than_the_whole_walk_and_reports_the_bytes_already_read():
    lm = toy_lm()
    string_events(lm, TEXTS, None, CONFIG)
    whole = lm.stats.forwards
    _, records = _saved(string_events)
    half = [r[: len(r) * 3 // 4] for r in records.values()]
    lm, seen = toy_lm(), []
    string_events(lm, TEXTS, None, CONFIG, resume=half, on_bytes=seen.append)
    assert lm.stats.forwards < whole
    assert seen[0] == sum(r[-1]["offset"] for r in half) and sum(seen) == sum(len(t) for t in TEXTS)


def test_pruned_deltas_join_back_and_a_broken_chain_is_refused():
    assert pruned_delta(None, [1.0, 2.0]) == (0, [1.0, 2.0])
    assert pruned_delta([1.0, 2.0], [1.0, 2.0, 3.0]) == (2, [3.0])
    assert pruned_delta([1.0, 2.0, 3.0], [1.0, 3.0]) == (1, [3.0])  # a revived mass left the list
    steps = [{"pruned_from": 0, "pruned": [1.0, 2.0]}, {"pruned_from": 2, "pruned": [3.0]},
             {"pruned_from": 1, "pruned": [4.0]}]
    assert join_pruned(steps) == [1.0, 4.0]
    with pytest.raises(ValueError, match="keeps 5 pruned masses of a list of 2"):
        join_pruned([steps[0], {"pruned_from": 5, "pruned": [], "step": 1}])
    with pytest.raises(ValueError, match="names parent 3, not an earlier node"):
        trie_paths([[-1, 1], [3, 2]])


def test_rebuilt_states_are_those_of_the_walk_one_call_per_depth():
    lm = toy_lm()
    root = lm.initial()
    paths = [(1, 2, 3), (1, 2, 4), (1, 5), (6,)]
    before = lm.stats.calls
    states = rebuild_states(lm, root, paths)
    assert lm.stats.calls - before == 3  # the trie's depth
    fresh = toy_lm()
    for p in paths:
        assert states[p].tokens == root.tokens + p
        assert states[p].log_probs.tolist() == fresh.state(fresh.prefix_ids() + p).log_probs.tolist()


def test_a_record_of_another_layout_or_walk_is_refused():
    _, records = _saved(string_marginals)
    old = [dict(r, version=0) for r in records[0][:2]]
    with pytest.raises(ValueError, match="layout version 0"):
        string_marginals(toy_lm(), TEXTS, None, CONFIG, resume=[old, None])
    with pytest.raises(ValueError, match="not of a string state"):
        string_events(toy_lm(), TEXTS, None, CONFIG, resume=[records[0][:2], None])
