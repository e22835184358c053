"""``python -m benchmarks strings --generation-only`` (``benchmarks/strings.py``'s ``bench_generation``)."""

from __future__ import annotations

import pytest

from ppl_tok import Vocabulary
from ppl_tok.lm.toy import BigramLM


def byte_lm() -> BigramLM:
    """A bigram LM over every byte, a few merges and the end of the string: it spells any text."""
    pieces = [None] + [f"<0x{b:02X}>" for b in range(256)] + ["th", "he", " t", "e ", "in", "the"]
    return BigramLM.random(Vocabulary.from_tokens(pieces), seed=3, bos_id=0)


def test_rows_total_their_seeds_and_ratio_against_the_token_sampler_after_the_same_prompt():
    from conftest import SHARED
    from benchmarks.strings import bench_generation, format_generation

    out = bench_generation(byte_lm(), SHARED / "data", beam=3, n_bytes=12, threshold=0.1, seeds=2)
    assert out["seeds"] == 2 and set(out["token_sampling"]) == {"short", "2 kB"}
    for base in out["token_sampling"].values():
        assert base["seeds"] == 2 and len(base["per_seed_bytes_per_s"]) == 2
        assert base["bytes_per_s"] == pytest.approx(base["bytes"] / base["seconds"])
        assert base["calls_per_byte"] <= base["forwards_per_byte"]  # a prefill call runs many token-forwards
    rows = out["rows"]
    assert len(rows) == 8
    for name, row in rows.items():
        assert row["seeds"] == (1 if "greedy" in name else 2), name
        assert row["ratio"] == pytest.approx(row["bytes_per_s"] / out["token_sampling"][row["prompt"]]["bytes_per_s"])
        assert 0 < row["bytes"] <= 12 * row["seeds"] and row["calls"] >= 1
    # the 2 kB rows prefill the prompt's canonical head: more token-forwards than bytes generated
    assert rows["tokens after 2 kB"]["forwards_per_byte"] > 10
    lines = format_generation(out)
    assert "2 seeds" in lines[0] and len(lines) == 10


def test_seeds_must_be_a_positive_integer():
    from conftest import SHARED
    from benchmarks.strings import bench_generation

    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="seeds must be a positive integer"):
            bench_generation(byte_lm(), SHARED / "data", 3, 12, 0.1, seeds=bad)


def test_at_beam_2_the_beam_rows_are_one_row():
    from conftest import SHARED
    from benchmarks.strings import bench_generation

    out = bench_generation(byte_lm(), SHARED / "data", beam=2, n_bytes=6, threshold=0.1, seeds=1)
    assert len(out["rows"]) == 7 and "bytes, beam 2" in out["rows"]
