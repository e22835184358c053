"""The engine benchmark on a tiny random model: the engine's forwards are replayed at their own shapes, the
ratio and the host time per call follow from the timings, the profile names where the time went."""

import pytest

from benchmarks import engine_tiny


@pytest.mark.slow
def test_the_tiny_model_runs_the_engines_workloads_and_their_replay():
    lm = engine_tiny.tiny_lm(layers=1, hidden=16)
    assert lm.model.config.num_hidden_layers == 1 and lm.model.config.hidden_size == 16
    from ppl_tok.datasets import data_file, load_questions

    qs = load_questions(data_file("openbookqa", "dev"))[:1]
    for name in ("importance", "conditional"):
        r = engine_tiny.measure(lm, name, qs, num_samples=4, batch_questions=1, profile=5, repeat=2)
        assert r["calls"] > 0 and r["forwards"] >= r["calls"] and r["repeat"] == 2
        assert r["ratio_to_raw"] == pytest.approx(r["raw_seconds"] / r["seconds"])
        assert r["host_ms_per_call"] == pytest.approx(1e3 * (r["seconds"] - r["raw_seconds"]) / r["calls"])
        assert r["host_cpu_ms_per_call"] == pytest.approx(1e3 * (r["cpu_seconds"] - r["raw_cpu_seconds"]) / r["calls"])
        assert r["meets_target"] == (r["cpu_ratio_to_raw"] >= engine_tiny.TARGET)
        assert any("tottime" in line for line in r["profile_top"])
    lines = engine_tiny.format_engine_tiny({"model": lm.name, "parameters": 1, "questions": 1, "threads": 1,
                                            "workloads": [r]})
    assert "conditional" in lines[1] and "target 0.8" in lines[1]
