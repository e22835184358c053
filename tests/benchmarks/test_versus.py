"""The comparison with genlm-bytes (benchmarks/versus.py): errors, containment, genlm's result, our walk."""

import json
import math
import os
import subprocess
import sys

import pytest
from conftest import SHARED

from ppl_tok import FunctionLM, Vocabulary
from ppl_tok.strings import StringSearchConfig, StringState, initial
from tests.strings.test_state import brute_prefix
from benchmarks.versus import (FLOAT_SLACK, GENLM_SCRIPT, Walk, causal_floor, compare, genlm_available,
                                    genlm_walk_from_json, run_genlm, speed_ratios, walk_known, walk_ours)

LN2 = math.log(2)
VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb", "bab"])
WIDE = StringSearchConfig(beam=10_000, prune=math.inf)


def history_lm(seed: int) -> FunctionLM:
    def fn(p):
        row = [float((7 * len(p) + 3 * sum(p) + t * seed) % 5) - 2.0 for t in range(len(VOCAB))]
        row[0] = -2.0
        return row
    return FunctionLM(VOCAB, fn, bos_id=0, log=True)


def reference() -> Walk:
    # byte 2's interval is 0.1 nats wide: not certified at tolerance 1e-3
    return Walk("ref", [-1.0, -2.0, -0.5, -3.0], 2.0, lower=[-1.0, -2.0005, -0.6, -3.0], upper=[-1.0, -2.0, -0.5, -3.0])


def test_errors_are_bits_per_byte_against_the_reference_and_its_certified_bytes():
    theirs = Walk("theirs", [-1.5, -1.5, -0.5], 1.5)  # walked 3 of the 4 bytes
    zero = Walk("zero", [-1.5, -math.inf, -0.5, -3.0], 1.0)
    out = compare(reference(), [theirs, zero])
    assert out["walks"].pop()["zero_probability_bytes"] == [1]
    assert out["certified_bytes"] == 3 and out["first_uncertified_byte"] == 2 and out["bytes"] == 4
    (row,) = out["walks"]
    assert row["bytes"] == 3 and row["bytes_per_s"] == 2.0 and row["zero_probability_bytes"] == []
    assert row["excess_bits_per_byte"] == pytest.approx((0.5 - 0.5 + 0.0) / (3 * LN2))
    assert row["mean_abs_error_bits_per_byte"] == pytest.approx(1.0 / (3 * LN2))
    assert row["max_abs_error_nats"] == pytest.approx(0.5)
    assert row["certified_mean_abs_error_bits_per_byte"] == pytest.approx(1.0 / (2 * LN2))  # bytes 0 and 1
    assert row["inside_reference_interval"] == 1  # only byte 2 (-0.5 in [-0.6, -0.5])
    assert "inside_own_interval" not in row


def test_containment_allows_float32_rounding_only():
    ours = Walk("ours", [-1.0 - FLOAT_SLACK / 2, -2.0, -0.4, -3.0 + 2 * FLOAT_SLACK], 1.0,
                lower=[-1.0, -2.1, -0.6, -3.0], upper=[-1.0, -1.9, -0.5, -3.0], cpu_seconds=0.5)
    out = compare(reference(), [ours, Walk("fast", [-1.0], 0.5, cpu_seconds=0.1)])
    row, fast = out["walks"]
    assert row["inside_own_interval"] == 2  # byte 2 above its upper bound, byte 3 past the slack
    assert row["inside_reference_interval"] == 2
    assert out["reference_inside_own_interval"] and out["reference_bytes_per_cpu_s"] is None
    assert speed_ratios(out, "ours", "fast") == pytest.approx(4.0 / 2.0)
    assert speed_ratios(out, "ours", "fast", "bytes_per_cpu_s") == pytest.approx(8.0 / 10.0)
    assert Walk.from_json(json.loads(json.dumps(ours.to_json()))) == ours
    with pytest.raises(KeyError, match="no walk named"):
        speed_ratios(out, "ours", "genlm")


def test_bad_comparisons_are_clear_errors():
    with pytest.raises(ValueError, match="no certified bounds"):
        compare(Walk("x", [-1.0], 1.0), [])
    with pytest.raises(ValueError, match="has no bytes"):
        compare(reference(), [Walk("empty", [], 1.0)])


def test_genlm_results_are_validated():
    good = {"K": 5, "prune_threshold": 0.05, "log_probs": [-1.0, 0.0], "seconds": 4.0, "cpu_seconds": 1.0, "done": True,
            "error": None, "setup_seconds": 9.0, "versions": {"genlm-bytes": "0.2.0"}}
    w = genlm_walk_from_json(json.loads(json.dumps(good)))
    assert w.name == "genlm-bytes K=5, prune_threshold 0.05" and w.bytes_per_s == 0.5
    assert w.info["K"] == 5 and w.info["done"] and w.lower is None and w.bytes_per_cpu_s == 2.0
    with pytest.raises(ValueError, match="no 'seconds'"):
        genlm_walk_from_json({k: v for k, v in good.items() if k != "seconds"})
    for bad in (math.nan, 0.5):
        with pytest.raises(ValueError, match="at byte 1"):
            genlm_walk_from_json({**good, "log_probs": [-1.0, bad]})


def test_our_walk_is_the_chain_rule_with_certified_intervals():
    lm = history_lm(3)
    text = b"abbab"
    walk = walk_ours(lm, text, WIDE)
    prefix = [initial(lm, text[:k], config=WIDE).prefix_log_prob().estimate for k in range(len(text) + 1)]
    assert walk.log_probs == pytest.approx([prefix[k + 1] - prefix[k] for k in range(len(text))], abs=1e-9)
    assert walk.lower == pytest.approx(walk.log_probs, abs=1e-9) and walk.upper == pytest.approx(walk.log_probs, abs=1e-9)
    narrow = walk_ours(lm, text, StringSearchConfig(beam=1, prune=1.0))
    out = compare(walk, [narrow, walk])
    assert out["certified_bytes"] == len(text)
    fast, same = out["walks"]
    assert fast["inside_own_interval"] == len(text) and fast["forwards"] < walk.forwards
    assert same["mean_abs_error_bits_per_byte"] == 0.0 and same["inside_reference_interval"] == len(text)


def test_the_walk_with_the_text_known_gives_the_walks_figures():
    """Per-byte surprisal (the canonical rows run first) is the walk's chain rule, interval for interval."""
    lm = history_lm(3)
    text = b"abbab"
    walk, known = walk_ours(lm, text, WIDE), walk_known(lm, text, WIDE, b"a")
    assert known.log_probs == pytest.approx(walk.log_probs, abs=1e-9) and known.info["text_known"]
    assert known.lower == pytest.approx(walk.lower, abs=1e-9) and known.upper == pytest.approx(walk.upper, abs=1e-9)
    narrow = walk_known(lm, text, StringSearchConfig(beam=1, prune=1.0, prune_against="text"), b"b")
    out = compare(walk, [narrow])
    assert out["walks"][0]["inside_own_interval"] == len(text) and narrow.forwards > 0


def test_the_causal_floor_runs_one_call_per_canonical_token_and_counts_the_greedy_hits():
    text = b"abbabab"
    tokens = history_lm(1).canonical(text.decode())
    assert len(tokens) == 3
    # an LM whose most probable next token is the text's at positions 0 and 1, and another token at 2
    planned = [tokens[0], tokens[1], next(t for t in range(1, len(VOCAB)) if t != tokens[2])]

    def fn(p):
        row = [-3.0] * len(VOCAB)
        row[planned[min(len(p) - 1, 2)]] = 0.0
        return row
    lm = FunctionLM(VOCAB, fn, bos_id=0, log=True)
    floor = causal_floor(lm, text)
    assert floor["canonical_tokens"] == 3 and floor["calls"] == 3  # rows after BOS, t_1 and t_2
    assert floor["bytes"] == len(text) and 0 < floor["bytes_per_cpu_s"] < math.inf
    assert floor["top1"] == pytest.approx(2 / 3) and floor["top1_pairs"] == pytest.approx(1 / 2)
    walk = walk_ours(lm, text, WIDE)
    assert walk.info["calls"] >= floor["calls"]  # a walk of every tokenization cannot call less


def test_the_genlm_side_needs_a_transformers_folder_and_its_script_its_arguments():
    with pytest.raises(ValueError, match="transformers folder"):
        run_genlm(sys.executable, history_lm(1), b"ab", 5)
    proc = subprocess.run([sys.executable, str(GENLM_SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
    assert genlm_available(sys.executable + "-missing") is not None


@pytest.mark.slow
def test_the_benchmark_resumes_from_its_folder(tmp_path, smollm2):
    from benchmarks.strings import bench_genlm, format_genlm, running_text

    text = running_text(SHARED / "data", 8, "openbookqa")
    assert len(text.encode()) == 8 and text.startswith(" ")
    args = dict(data=SHARED / "data", n_bytes=8, genlm=(), ours=(StringSearchConfig(beam=1, prune=1.0),),
                reference=StringSearchConfig(beam=4, prune=20.0), keep=tmp_path,
                known=(StringSearchConfig(beam=2, prune=4.0, prune_against="text"),))
    first = bench_genlm(sys.executable, **args)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["known-beam2-p4-text.json", "ours-beam1-p1.json",
                                                          "reference-beam4-p20.json"]
    again = bench_genlm(sys.executable, **args)  # both walks read back, not run again
    assert again["walks"] == first["walks"] and again["certified_bytes"] == first["certified_bytes"] == 8
    assert first["read_back"] == [] and len(again["read_back"]) == 3  # the reference too
    assert any(line.startswith("read back from --genlm-keep") for line in format_genlm(again))
    assert first["walks"][0]["inside_own_interval"] == 8
    assert any("ppl-tok beam 1, prune 1" in line for line in format_genlm(first))
    floor = first["causal_floor"]
    assert floor["calls"] == floor["canonical_tokens"] == len(smollm2.canonical(text)) and floor["ratio_to"] == {}
    assert any(line.startswith("causal floor (one LM call per canonical token") for line in format_genlm(first))
    json.dumps(first, allow_nan=False)


GENLM_PYTHON = os.environ.get("PPL_TOK_GENLM_PYTHON")


@pytest.mark.slow
@pytest.mark.skipif(not GENLM_PYTHON or genlm_available(GENLM_PYTHON) is not None,
                    reason="set PPL_TOK_GENLM_PYTHON to an interpreter with genlm-bytes")
def test_genlm_bytes_agrees_with_the_certified_value_on_smollm2(smollm2):
    text = b" The sun is"
    ours = walk_ours(smollm2, text, StringSearchConfig(beam=32, prune=30.0))
    theirs = run_genlm(GENLM_PYTHON, smollm2, text, 5, 0.0)
    (row,) = compare(ours, [theirs])["walks"]
    assert theirs.info["done"] and row["bytes"] == len(text)
    assert row["max_abs_error_nats"] < 0.05


def test_a_dead_end_is_healed_and_a_byte_no_token_spells_ends_the_walk():
    vocab = Vocabulary.from_tokens([None, "a", "b", "ab", "ba"])
    # "ab" takes all the mass: the prefix "a" (token a) is far below the text's mass and is pruned against
    # it, so no kept prefix can spell a second "a"; the heal revives it
    lm = FunctionLM(vocab, lambda p: [-9.0, -30.0, -30.0, 0.0, -30.0], bos_id=0, log=True)
    narrow = StringSearchConfig(beam=1, prune=1.0, prune_against="text")
    walk = walk_ours(lm, b"aab", narrow)
    exact = walk_ours(lm, b"aab", WIDE)
    assert walk.info["done"] and walk.info["heals"] == 1 and walk.info["healed_bytes"] == [1]
    assert exact.info["heals"] == 0 and exact.info["healed_bytes"] == []
    for k in range(3):  # every figure, the healed one included, inside its interval and near the exact value
        assert walk.lower[k] <= exact.log_probs[k] + 1e-9 <= walk.upper[k] + 2e-9
        assert walk.lower[k] - 1e-9 <= walk.log_probs[k] <= walk.upper[k] + 1e-9
        assert walk.log_probs[k] == pytest.approx(exact.log_probs[k], abs=1e-3)
    state = StringState(lm, "", narrow).extend("aab")
    bracket = state.prefix_log_prob()
    assert state.heals == 1 and bracket.lower <= brute_prefix(lm, b"aab") + 1e-9 <= bracket.upper + 2e-9
    stopped = walk_ours(lm, b"aabc", narrow)  # no token spells "c": nothing to heal
    assert stopped.info["done"] is False and stopped.info["error"].startswith("dead end at byte 3:")
    assert len(stopped.log_probs) == len(stopped.lower) == len(stopped.upper) == 3
