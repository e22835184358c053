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
                             "perplexity", "surprisal", "lm-eval", "startup", "learned-defensive", "canonical-step"}
    leaves = {**checks, **research}
    for name in ("perplexity", "strings", "diagnostics"):  # a benchmark with parts: one subcommand per part
        leaves.update({f"{name} {part}": p for part, p in _subcommands(leaves.pop(name)).items()})
    assert {n for n in leaves if n.startswith("perplexity ")} == {f"perplexity {p}" for p in (
        "run", "table", "splits", "memory", "lockstep", "prefixes")}
    assert {n for n in leaves if n.startswith("strings ")} == {f"strings {p}" for p in (
        "all", "prompts", "generation", "prefill", "genlm")}
    flags = {name: {o for a in p._actions for o in a.option_strings} for name, p in leaves.items()}
    held = {"learned", "learned-defensive"}  # the two that split words into tuning and held-out
    assert all("--heldout" in flags[n] for n in held) and not any("--heldout" in f for n, f in flags.items()
                                                                    if n not in held)
    assert "--genlm-keep" in flags["strings genlm"] and not any("--genlm-keep" in f for n, f in flags.items()
                                                                if n != "strings genlm")
    assert "--costs" in flags["perplexity splits"] and not any("--costs" in f for n, f in flags.items()
                                                               if n != "perplexity splits")
    assert "--out" in flags["perplexity run"] and "--out" not in flags["perplexity lockstep"]
    assert "--model" not in flags["diagnostics rescore"] and "--model" in flags["diagnostics run"]
    assert "--max-gen-toks" in flags["lm-eval"] and "--max-gen-toks" not in flags["surprisal"]
    assert "--model" not in flags["mdd"] and "--models" in flags["mdd"]
    assert {"--model", "--device", "--dtype", "--bos-id"} <= flags["engine"]
    assert "--runs" in flags["startup"] and "--model" not in flags["startup"]


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
    code, out, _ = run(capsys, "bench", "engine", "--questions", "1", "--samples", "2", "--batch-size", "1",
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
    code, out, _ = run(capsys, "benchmarks", "strings", "generation", "--generate-bytes", "30",
                       "--generate-seeds", "3")
    assert code == 0 and seen == {"lm": "lm", "n": 30, "threshold": 0.1, "seeds": 3}
    code, _, err = run(capsys, "benchmarks", "strings", "generation", "--generate-seeds", "0")
    assert code != 0 and "--generate-seeds" in err


#: each part of a benchmark with parts, and a flag of another part (issue 45, item 4: the parts are subcommands,
#: so a flag of another part is unknown there, refused by the parser in one line before any work)
OTHER_PARTS_FLAGS = [
    (["perplexity", "table", "d", "--reference", "r"], ["--beam", "3"]),
    (["perplexity", "table", "d", "--reference", "r"], ["--documents", "3"]),
    (["perplexity", "splits", "p"], ["--out", "o"]),
    (["perplexity", "splits", "p"], ["--extend-threshold", "0.2"]),
    (["perplexity", "memory", "--bytes", "100"], ["--documents", "3"]),
    (["perplexity", "lockstep"], ["--progress"]),
    (["perplexity", "lockstep"], ["--out", "o"]),
    (["perplexity", "run"], ["--costs"]),
    (["perplexity", "run"], ["--tolerance", "0.1"]),
    (["perplexity", "prefixes", "--bytes", "9"], ["--paths"]),
    (["strings", "prefill", "--prefill-bytes", "100"], ["--long-bytes", "10"]),
    (["strings", "generation"], ["--prompts", "3"]),
    (["strings", "genlm", "py"], ["--generate-bytes", "9"]),
    (["strings", "prompts"], ["--generate-bytes", "9"]),
    (["strings", "all"], ["--prefill-tail", "9"]),
    (["strings", "all"], ["--genlm-keep", "d"]),
    (["diagnostics", "rescore"], ["--strings", "4"]),
    (["diagnostics", "rescore"], ["--model", "gemma3-270m"]),
]


@pytest.mark.parametrize("part,flag", OTHER_PARTS_FLAGS, ids=[" ".join(p + f) for p, f in OTHER_PARTS_FLAGS])
def test_a_flag_of_another_part_is_refused_in_one_line(capsys, tmp_path, part, flag):
    code, out, err = run(capsys, "benchmarks", *part, *flag)
    assert code == 2 and out == "" and f"unrecognized arguments: {flag[0]}" in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_a_benchmark_with_parts_needs_one(capsys):
    for name in ("perplexity", "strings", "diagnostics"):
        code, _, err = run(capsys, "benchmarks", name)
        assert code == 2 and "PART" in err, err
    code, _, err = run(capsys, "benchmarks", "strings", "prefill")
    assert code == 2 and "--prefill-bytes" in err and "nothing to run" in err


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
