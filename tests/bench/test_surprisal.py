"""``ppl_tok/bench/surprisal.py``: held-out items cut to a word count, and the benchmark's output (structure only:
no timing is asserted)."""

import pytest

from conftest import SHARED
from ppl_tok.bench.surprisal import bench_surprisal, format_surprisal, held_out_items
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.surprisal import word_spans


def test_items_hold_exactly_the_words_asked_for(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("One two three.\n\n  Four five six seven.\nEight\n")
    items = held_out_items(path, 5)
    assert items == ["One two three.", "Four"]  # "three" and "." are two words: punctuation splits
    assert sum(len(word_spans(t)) for t in items) == 5
    assert len(held_out_items(path, 100)) == 3
    obqa = held_out_items(SHARED / "data" / "openbookqa" / "test.jsonl", 40)
    assert sum(len(word_spans(t)) for t in obqa) == 40
    with pytest.raises(FileNotFoundError, match="no such file"):
        held_out_items(tmp_path / "missing.txt", 5)
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="no text"):
        held_out_items(tmp_path / "empty.txt", 5)


def test_bench_surprisal_reports_both_columns_and_their_ratio(smollm2, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("A cat.\nIt sat here.\n")
    result = bench_surprisal(smollm2, path, words=5, config=StringSearchConfig(beam=2))
    assert (result["words"], result["items"], result["beam"]) == (5, 2, 2)
    for column in ("canonical", "strings"):
        m = result[column]
        assert m["words"] == 5 and m["seconds"] > 0 and m["forwards"] > 0 and m["calls"] > 0
        assert m["words_per_second"] == pytest.approx(5 / m["seconds"])
    assert result["time_ratio"] == pytest.approx(result["strings"]["seconds"] / result["canonical"]["seconds"])
    assert result["strings"]["forwards"] > result["canonical"]["forwards"]
    # canonical_surprisals is surprisals' canonical column (float32 rounding of batched forwards apart)
    assert result["strings"]["max_column_difference_bits"] < 1e-3
    assert 0 <= result["strings"]["informative_share"] <= 1
    lines = format_surprisal(result)
    assert "strings / canonical" in lines[-2] and "3x target" in lines[-2] and "one forward" in lines[-1]
    assert result["one_forward"]["calls"] <= result["canonical"]["calls"]
