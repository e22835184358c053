"""``ppl-tok bench NAME`` (ppl_tok.cli.bench: the machine checks) and ``python -m benchmarks NAME``
(benchmarks/cli.py: the research benchmarks beside the package): each one's flags and its wiring."""

import json

import pytest

import ppl_tok.cli.main as cli
from cli_run import run
from conftest import SHARED


def test_bench_mdd_on_a_small_file(capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Tokenizations grow rapidly.\n\nWith sentence length.\n")
    code, out, _ = run(capsys, "benchmarks", "mdd", "--data-dir", str(text), "--models", "smollm2-135m",
                       "--naive-bytes", "40", "--json")
    row = json.loads(out)["results"][0]
    assert code == 0 and row["speedup"] > 1 and row["naive_bytes"] > 0


def _subcommands(parser):
    sub = next(a for a in parser._actions if isinstance(a, cli.argparse._SubParsersAction))
    return sub.choices


def test_each_benchmark_shows_only_its_own_flags():
    from benchmarks.__main__ import build_parser

    checks = _subcommands(_subcommands(cli.build_parser())["bench"])
    research = _subcommands(build_parser())
    assert set(checks) == {"engine", "memory", "gpu-check"}
    assert set(research) == {"mdd", "marginal", "most-likely", "estimators", "diagnostics", "learned", "strings",
                             "perplexity", "surprisal", "lm-eval"}
    flags = {name: {o for a in p._actions for o in a.option_strings} for name, p in {**checks, **research}.items()}
    assert "--heldout" in flags["learned"] and not any("--heldout" in f for n, f in flags.items() if n != "learned")
    assert "--genlm-python" in flags["strings"] and not any("--genlm-python" in f for n, f in flags.items()
                                                               if n != "strings")
    assert "--lockstep" in flags["perplexity"] and "--lockstep" not in flags["strings"]
    assert "--max-gen-toks" in flags["lm-eval"] and "--max-gen-toks" not in flags["surprisal"]
    assert "--model" not in flags["mdd"] and "--models" in flags["mdd"]
    assert {"--model", "--device", "--dtype", "--bos-id"} <= flags["engine"]


def test_bench_marginal_quick_mode_is_wired(capsys, monkeypatch):
    from benchmarks import marginal as bench

    seen = {}
    monkeypatch.setattr(bench, "bench_marginal", lambda model, **kw: seen.update(kw, model=model) or {})
    monkeypatch.setattr(bench, "format_marginal", lambda r: ["done"])
    code, out, _ = run(capsys, "benchmarks", "marginal", "--quick", "--dtype", "bfloat16", "--device", "cpu")
    assert code == 0 and out == "done\n"
    assert seen["sizes"] == (8,) and seen["strings"] == (" Tokens",) and seen["dtype"] == "bfloat16"


@pytest.mark.slow
def test_bench_engine_runs_and_reports_ratios(capsys):
    code, out, _ = run(capsys, "bench", "engine", "--questions", "1", "--samples", "2", "--batch-questions", "1",
                       "--big-n", "2", "--data-dir", str(SHARED / "data"), "--json")
    assert code == 0
    r = json.loads(out)
    assert r["questions"] == 1 and r["batched"]["forwards"] > 0
    for part in ("batched", "many_particles"):
        assert r[part]["ratio_to_raw"] > 0
        # the raw baseline at the engine's own shapes: the replay runs the same forwards
        assert r[part]["ratio_to_raw_at_engine_shapes"] > 0 and r[part]["forward_ratio_to_raw_at_engine_shapes"] > 0
        assert r[part]["ratio_to_raw_at_engine_shapes"] <= r[part]["forward_ratio_to_raw_at_engine_shapes"]
        assert r[part]["cpu_ratio_to_raw_at_engine_shapes"] <= r[part]["cpu_forward_ratio_to_raw_at_engine_shapes"]
    assert r["speedup_over_per_answer"] > 0


def test_bench_estimators_is_wired(capsys, monkeypatch):
    from benchmarks import marginal as bench

    seen = {}
    monkeypatch.setattr(bench, "bench_estimators",
                        lambda model, **kw: seen.update(kw, model=model) or {"model": model, "seed": 0, "rows": []})
    code, out, _ = run(capsys, "benchmarks", "estimators", "--samples", "8")
    assert code == 0 and seen["num_samples"] == 8 and seen["model"] == "smollm2-135m"


def test_bench_surprisal_is_wired(capsys, loaded, tmp_path):
    text = tmp_path / "held-out.txt"
    text.write_text("The old man the boat.\n\nA cat sat.\n")
    code, out, _ = run(capsys, "benchmarks", "surprisal", "--text", str(text), "--words", "7", "--beam", "2",
                       "--extend-threshold", "0.01", "--batch-size", "2", "--json")
    result = json.loads(out)
    assert code == 0 and result["words"] == 7 and result["items"] == 2 and result["beam"] == 2
    assert result["extend_threshold"] == 0.01 and result["batch"] == 2 and "strings_1x1" not in result
    assert result["time_ratio"] > 0 and result["strings"]["forwards_per_word"] > 0
    code, _, err = run(capsys, "benchmarks", "surprisal", "--text", str(tmp_path / "missing.txt"))
    assert code == 2 and "--text" in err and "no such file" in err


def test_bench_strings_generation_passes_its_seeds(capsys, monkeypatch):
    from benchmarks import strings as bench
    import ppl_tok.lm.cards as cards

    seen = {}
    monkeypatch.setattr(cards, "load_lm", lambda spec: "lm")
    monkeypatch.setattr(bench, "bench_generation", lambda lm, data, beam, n, threshold, seeds:
                        seen.update(lm=lm, n=n, threshold=threshold, seeds=seeds) or {})
    monkeypatch.setattr(bench, "format_generation", lambda r: ["done"])
    code, out, _ = run(capsys, "benchmarks", "strings", "--generation-only", "--generate-bytes", "30",
                       "--generate-seeds", "3")
    assert code == 0 and seen == {"lm": "lm", "n": 30, "threshold": 0.1, "seeds": 3}
    code, _, err = run(capsys, "benchmarks", "strings", "--generation-only", "--generate-seeds", "0")
    assert code != 0 and "--generate-seeds" in err


def test_bench_perplexity_refuses_run_flags_where_it_makes_no_run(capsys, tmp_path):
    run_flags = (["--paths"], ["--out", str(tmp_path / "o")], ["--corpus", "socialiqa"], ["--limit", "3"],
                 ["--shard", "1/2"], ["--reference", str(tmp_path)])
    for extra in (["--lockstep"], ["--memory-bytes", "100"], ["--prefix-bytes", "40"], ["--table", "x"],
                  ["--splits", "x"]):
        for flag in run_flags:
            if (extra[0], flag[0]) in {("--table", "--reference"), ("--splits", "--reference"),
                                       ("--splits", "--corpus")}:
                continue  # the table's and the splits' own reference, the splits' documents
            code, _, err = run(capsys, "benchmarks", "perplexity", *flag, *extra)
            assert code != 0 and flag[0] in err and extra[0] in err and "Traceback" not in err, (flag, extra, err)
    assert not (tmp_path / "o").exists()
    own = {"--costs": ("--splits",), "--prefix-budget": ("--prefix-bytes", "9"),
           "--prefix-tolerance": ("--prefix-bytes", "0.1")}  # each mode's own flags, refused elsewhere
    for flag, (owner, *value) in own.items():
        for extra in ([], ["--lockstep"], ["--table", "x"]):
            code, _, err = run(capsys, "benchmarks", "perplexity", flag, *value, *extra)
            assert code != 0 and f"{flag} applies to {owner} only" in err and "Traceback" not in err, (extra, err)
    for flag in (["--beam", "3"], ["--prune", "4"], ["--extend-threshold", "0.2"], ["--boundary-threshold", "1e-3"],
                 ["--rejoin-threshold", "1e-6"]):  # the beam's, beside the modes that read stored rows
        for extra in (["--table", "x", "--reference", "y"], ["--splits", "x"]):
            code, _, err = run(capsys, "benchmarks", "perplexity", *flag, *extra)
            assert code != 0 and f"{flag[0]} sets the beam of a run" in err and extra[0] in err, (flag, extra, err)


def test_data_is_the_deprecated_name_of_data_dir(capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(" tokenization\n")
    for flag in ("--data-dir", "--data"):
        code, out, err = run(capsys, "benchmarks", "mdd", flag, str(text), "--models", "smollm2-135m", "--json")
        assert code == 0, err
        assert ("--data is deprecated and will be removed: use --data-dir" in err) == (flag == "--data")


def test_a_backend_other_than_transformers_is_refused_by_the_benchmarks(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "engine", "--backend", "ppl_tok.lm.hf_loader:load_transformers")
    assert code == 2 and "the benchmarks load their models through the transformers backend only" in err
