"""``benchmarks/surprisal.py``: held-out items cut to a word count, and the benchmark's output (structure only:
no timing is asserted)."""

import pytest

from conftest import SHARED
from benchmarks.surprisal import bench_surprisal, format_surprisal, held_out_items
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


def test_bench_surprisal_reports_the_columns_and_their_ratio(smollm2, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("A cat.\nNo.\nIt sat here.\n")  # 3 + 2 + 1 words (the last item cut)
    result = bench_surprisal(smollm2, path, words=6, config=StringSearchConfig(beam=2), batch=2, per_item=True)
    assert (result["words"], result["items"], result["beam"], result["batch"]) == (6, 3, 2, 2)
    for column in ("canonical", "canonical_1x1", "strings", "strings_1x1"):
        m = result[column]
        assert m["words"] == 6 and m["seconds"] > 0 and m["forwards"] > 0 and m["calls"] > 0
        assert m["words_per_second"] == pytest.approx(6 / m["seconds"])
    assert result["time_ratio"] == pytest.approx(result["strings"]["seconds"] / result["canonical"]["seconds"])
    assert result["strings"]["forwards"] > result["canonical"]["forwards"]
    # batches share calls: two items per canonical forward, and the lockstep walk the longest item's calls
    assert result["canonical"]["calls"] < result["canonical_1x1"]["calls"]
    assert result["strings"]["calls"] < result["strings_1x1"]["calls"]
    # the canonical column inside surprisals_many and alone agree (float32 rounding of batched forwards apart)
    assert result["strings"]["max_column_difference_bits"] < 1e-3 and result["canonical_batch_difference_bits"] < 1e-3
    assert result["strings_1x1"]["mean_surprisal_bits"] == pytest.approx(result["strings"]["mean_surprisal_bits"],
                                                                         abs=1e-3)
    assert 0 <= result["strings"]["informative_share"] <= 1
    lines = format_surprisal(result)
    assert "strings / canonical" in lines[-2] and "3x target" in lines[-2] and "one item per forward" in lines[-1]
    assert any(line.startswith("strings_1x1") for line in lines)
    lazy = bench_surprisal(smollm2, path, words=6, config=StringSearchConfig(beam=2, extend_threshold=0.1),
                           reference=True)
    s = lazy["strings"]
    assert lazy["strings_reference"]["forwards"] >= s["forwards"]
    assert 0 <= s["reference_median_difference_bits"] <= s["reference_p95_difference_bits"] \
        <= s["reference_max_difference_bits"] < 5
    assert "strings_reference" in "\n".join(format_surprisal(lazy)) and "p95" in format_surprisal(lazy)[-1]
    with pytest.raises(ValueError, match="batch must be >= 1"):
        bench_surprisal(smollm2, path, words=2, batch=0)
