"""``benchmarks/memory_document.py``: one long document's marginal, its peak RSS and trace (structure only, on a
40-byte document; the 20 kB figures are in docs/benchmarks.md)."""

from ppl_tok.strings.beam import StringSearchConfig


def test_bench_memory_document_reports_its_settings_and_trace(capsys):
    from conftest import SHARED
    from benchmarks import memory_document as bench

    graced = StringSearchConfig(beam=2, prune=3.0, extend_threshold=0.2, boundary_threshold=1e-3)
    r = bench.bench_memory_document("smollm2-135m", data_dir=SHARED / "data", n_bytes=40, search=graced, every=10)
    assert r["bytes"] == 40 and r["boundary_threshold"] == 1e-3 and "rejoin_threshold" not in r
    assert [t["offset"] for t in r["trace"]] == sorted(t["offset"] for t in r["trace"]) and len(r["trace"]) >= 3
    assert r["peak_rss_mb"] >= r["rss_after_load_mb"] > 0 and r["forwards_per_byte"] > 0
    assert "boundary threshold 0.001" in bench.format_memory_document(r)[0]
    assert len(capsys.readouterr().err.strip().splitlines()) == len(r["trace"])  # one stderr line per mark
