"""The knob table: a setting's share of a reference run's gain, its cost, and the certified brackets checked."""

import json
import math

import pytest

from benchmarks.knobs import against_reference, format_knob_table, knob_table, read_rows

LN2 = math.log(2)


def _row(index, n, gain_nats, fwd, lower=None, width_nats=10.0, canonical=-100.0):
    row = {"index": index, "bytes": n, "canonical_forwards_per_byte": 0.25, "marginal_forwards_per_byte": fwd,
           "canonical_bytes_per_s": 100.0, "marginal_bytes_per_s": 10.0,
           "gain_bits_per_byte": gain_nats / (LN2 * n), "bracket_width_bits_per_byte": width_nats / (LN2 * n)}
    if lower is not None:
        row.update(canonical_nats=canonical, lower_nats=lower, upper_nats=lower + width_nats)
    return row


def _folder(path, rows, **settings):
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"beam": 8, "prune": 12.0, **settings}))
    (path / "documents.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_share_of_the_gain_and_cost_are_byte_weighted_sums(tmp_path):
    ref = {0: _row(0, 100, 2.0, 8.0), 1: _row(1, 300, 6.0, 8.0)}
    rows = [_row(0, 100, 1.0, 1.0, lower=-99.0), _row(1, 300, 6.0, 0.5, lower=-94.0), _row(2, 50, 9.0, 1.0)]
    c = against_reference(rows, ref)
    assert c["documents"] == 2 and c["bytes"] == 400
    assert c["share_of_gain"] == pytest.approx(7.0 / 8.0)
    assert c["forwards_ratio"] == pytest.approx((100 * 1.0 + 300 * 0.5) / (400 * 0.25))
    assert c["reference_forwards_ratio"] == pytest.approx(8.0 / 0.25)
    assert (c["brackets_meet"], c["brackets_checked"]) == (2, 2)
    # a floor above the reference's certified ceiling is a bug, and counted
    bad = [_row(0, 100, 1.0, 1.0, lower=-50.0)]
    assert against_reference(bad, ref)["brackets_meet"] == 0


def test_the_table_reads_folders_and_bad_input_is_named(tmp_path):
    ref = _folder(tmp_path / "ref", [_row(0, 100, 2.0, 8.0)])
    lazy = _folder(tmp_path / "lazy", [_row(0, 100, 1.8, 1.0, lower=-98.2)], extend_threshold=0.001)
    t = knob_table([lazy], ref)
    (r,) = t["rows"]
    assert r["extend_threshold"] == 0.001 and r["share_of_gain"] == pytest.approx(0.9)
    assert "0.001" in format_knob_table(t)[2]
    with pytest.raises(ValueError, match="not the same documents"):
        against_reference([_row(0, 120, 1.0, 1.0)], read_rows(ref))
    with pytest.raises(ValueError, match="no document in common"):
        against_reference([_row(5, 100, 1.0, 1.0)], read_rows(ref))
    run = tmp_path / "run"
    run.mkdir()
    (run / "documents.jsonl").write_text(json.dumps({"index": 0, "n_bytes": 10}) + "\n")
    with pytest.raises(ValueError, match="not a bench perplexity row"):
        read_rows(run)
    with pytest.raises(ValueError, match="not a bench perplexity folder"):
        read_rows(tmp_path / "nowhere")
