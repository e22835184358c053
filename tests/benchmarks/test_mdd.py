"""The MDD-compilation benchmark's own functions (benchmarks.mdd)."""

import pytest

from benchmarks.mdd import _take, bench_mdd, format_mdd, load_texts


def test_take_stops_at_the_first_text_that_reaches_the_byte_budget():
    texts = ["ab", "cdé", "f", "gh"]  # 2, 4, 1, 2 bytes
    assert _take(texts, 0) == []
    assert _take(texts, 1) == ["ab"] and _take(texts, 2) == ["ab"]
    assert _take(texts, 3) == ["ab", "cdé"] and _take(texts, 7) == ["ab", "cdé", "f"]
    assert _take(texts, 100) == texts


def test_bench_mdd_counts_the_bytes_it_compiled(tmp_path, smollm2_vocab):
    data = tmp_path / "t.txt"
    data.write_text("Tokenizations grow rapidly.\n\nWith sentence length.\n")
    texts = load_texts(data)
    assert texts == ["Tokenizations grow rapidly.", "With sentence length.\n"]  # the paragraphs of a text file
    with pytest.raises(FileNotFoundError, match="no data folder or text file at"):
        load_texts(tmp_path / "none.txt")
    result = bench_mdd(data, models=["smollm2-135m"], naive_bytes=1)
    assert result["data"] == str(data) and result["texts"] == len(texts) >= 2
    row = result["results"][0]
    assert row["model"] == "smollm2-135m" and row["vocab_size"] == len(smollm2_vocab)
    assert row["trie_bytes"] == sum(len(t.encode()) for t in texts)  # every text within max_bytes
    assert row["naive_bytes"] == len(texts[0].encode())  # a budget of 1 byte: the first text only
    assert row["speedup"] == row["trie_bytes_per_s_on_naive_texts"] / row["naive_bytes_per_s"]
    lines = format_mdd(result)
    assert lines[0] == f"MDD compilation on {data} ({len(texts)} texts)" and lines[2].startswith("smollm2-135m ")
    assert lines[2].endswith(f"{row['speedup']:>7.0f}x {row['ten_kb_seconds']:>10.3f}s")
