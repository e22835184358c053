import json
import math

import pytest

from conftest import LLAMA2, SHARED
import ppl_tok.cli.common
import ppl_tok.cli.tokenization
from ppl_tok.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_count_json_llama2(capsys):
    code, out, _ = run(capsys, "count", " Tokenizations grow rapidly with sentence length",
                       "--tokenizer", str(LLAMA2), "--json")
    assert code == 0 and json.loads(out) == {"text": " Tokenizations grow rapidly with sentence length",
                                             "count": "350973997920", "log10_count": math.log10(350973997920)}


def test_tokenize(capsys):
    code, out, _ = run(capsys, "tokenize", " tongueless", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == "597"
    assert [t["token"] for t in data["canonical"]] == ["\u0120tong", "uel", "ess"]


def test_mdd_exports(capsys, tmp_path):
    code, out, _ = run(capsys, "mdd", " Bird", "--tokenizer", str(LLAMA2), "--dot", str(tmp_path / "b.dot"),
                       "--png", str(tmp_path / "b.png"), "--json")
    assert code == 0 and json.loads(out)["count"] == "14"
    assert (tmp_path / "b.dot").read_text().startswith("digraph")
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_score(capsys):
    code, out, _ = run(capsys, "score", " Paris", "--context", "The capital of France is", "--json")
    data = json.loads(out)
    assert code == 0 and -1.0 < data["canonical_log_prob"] < 0


@pytest.mark.parametrize("argv,message", [
    (["count", ""], "empty string"),
    (["count", "a\x04b"], "U+0004"),
    (["count", "x", "--model", "no-such-model"], "unknown model"),
    (["mdd", "x"], "--dot FILE"),
])
def test_errors_are_clear_and_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_bench_mdd_on_a_small_file(capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Tokenizations grow rapidly.\n\nWith sentence length.\n")
    code, out, _ = run(capsys, "bench", "mdd", "--data", str(text), "--models", "smollm2-135m",
                       "--naive-bytes", "40", "--json")
    row = json.loads(out)["results"][0]
    assert code == 0 and row["speedup"] > 1 and row["naive_bytes"] > 0


@pytest.mark.slow
def test_marginal_json_with_exact_and_bounds(capsys):
    code, out, _ = run(capsys, "marginal", " tongueless", "--samples", "16", "--exact", "--bounds", "1e-3", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == "597" and data["num_samples"] == 16
    assert data["exact_log_marginal"] == pytest.approx(-24.683, abs=1e-3)
    assert data["lower"] <= data["exact_log_marginal"] + 1e-6 <= data["upper"] + 1e-4
    assert {"log_marginal", "canonical_log_prob", "ess", "canonical_estimate", "noncanonical_estimate"} <= set(data)


@pytest.mark.parametrize("proposal", ["uniform", "prior", "stratified"])
def test_marginal_proposals(capsys, proposal):
    code, out, _ = run(capsys, "marginal", " Tokens", "--samples", "8", "--proposal", proposal, "--json")
    data = json.loads(out)
    assert code == 0 and data["proposal"] == proposal
    if proposal == "stratified":
        assert data["log_marginal"] == pytest.approx(-18.5486, abs=1e-3)


def test_distribution_and_png(capsys, tmp_path):
    code, out, _ = run(capsys, "distribution", " Tokens", "--png", str(tmp_path / "d.png"), "--top", "5", "--json")
    data = json.loads(out)
    assert code == 0 and data["count"] == "52" and len(data["top"]) == 5 and data["top"][0]["canonical"]
    assert (tmp_path / "d.png").stat().st_size > 1000


def test_canonicity(capsys, tmp_path):
    code, out, _ = run(capsys, "canonicity", "--samples", "4", "--max-tokens", "3", "--png", str(tmp_path / "c.png"),
                       "--json")
    data = json.loads(out)
    assert code == 0 and data["lengths"] == [1, 2, 3] and all(0 <= c <= 1 for c in data["canonical"])
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_most_likely(capsys):
    code, out, _ = run(capsys, "most-likely", " tongueless", "--json")
    data = json.loads(out)
    assert code == 0 and data["optimal"]
    assert [t["token"] for t in data["tokens"]] == ["\u0120tongue", "less"]
    assert data["log_prob"] > data["canonical_log_prob"]


def test_sat_mlt_and_msp(capsys, tmp_path):
    f = tmp_path / "f.cnf"
    f.write_text("p cnf 3 3\n1 -2 3 0\n-1 2 0\n2 3 0\n")
    code, out, _ = run(capsys, "sat", str(f), "--problem", "mlt", "--json")
    data = json.loads(out)
    assert code == 0 and data["satisfiable"] and data["string"] == "abcabcabcddd"
    clauses = [(1, -2, 3), (-1, 2), (2, 3)]
    assign = {int(k): v for k, v in data["assignment"].items()}
    assert all(any(assign[abs(lit)] == (lit > 0) for lit in c) for c in clauses)
    code, out, _ = run(capsys, "sat", str(f), "--problem", "msp", "--json")
    assert code == 0 and json.loads(out)["model_count"] == "4"
    u = tmp_path / "u.cnf"
    u.write_text("p cnf 1 2\n1 0\n-1 0\n")
    code, out, _ = run(capsys, "sat", str(u), "--json")
    assert code == 0 and json.loads(out)["satisfiable"] is False
    bad = tmp_path / "bad.cnf"
    bad.write_text("p cnf 2 5\n1 0\n")
    code, _, err = run(capsys, "sat", str(bad))
    assert code == 2 and "announces 5 clauses" in err


# ------------------------------------------------------------------ hardening (issue 10)
import io  # noqa: E402


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ppl_tok.cli.main as cli  # noqa: E402
from ppl_tok.common.jsonout import to_json  # noqa: E402
from ppl_tok import FunctionLM, Vocabulary  # noqa: E402


def strict_json(out):
    def reject(name):
        raise ValueError(f"not RFC 8259 JSON: {name}")

    return json.loads(out, parse_constant=reject)


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a model is loaded: argument errors must come first."""
    def refuse(*a, **k):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", refuse)
    monkeypatch.setattr(ppl_tok.cli.common, "load_vocabulary", refuse)


@pytest.fixture
def loaded(monkeypatch, smollm2, smollm2_vocab):
    """The CLI on the session's SmolLM2 (no reload per call)."""
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: smollm2)
    monkeypatch.setattr(ppl_tok.cli.common, "load_vocabulary", lambda *a, **k: smollm2_vocab)
    return smollm2


@pytest.mark.parametrize("argv,message", [
    (["distribution", "x", "--top", "-1"], "argument --top: expected an integer >= 1, got -1"),
    (["distribution", "x", "--top", "0"], "--top"),
    (["marginal", "x", "--bounds", "nan"], "argument --bounds: expected a finite number > 0"),
    (["marginal", "x", "--bounds", "-1"], "argument --bounds"),
    (["marginal", "x", "--budget", "-5"], "argument --budget"),
    (["marginal", "x", "--samples", "0"], "argument --samples"),
    (["marginal", "x", "--seed", "-1"], "argument --seed"),
    (["most-likely", "x", "--time-budget", "-1"], "argument --time-budget"),
    (["most-likely", "x", "--top-k", "0"], "argument --top-k"),
    (["canonicity", "--max-tokens", "0"], "argument --max-tokens"),
    (["score", "x", "--dtype", "int8"], "argument --dtype: invalid choice"),
    (["score", "x", "--bos-id", "-3"], "argument --bos-id"),
    (["sat", "f.cnf", "--time-budget", "-1"], "argument --time-budget"),
    (["sat", "f.cnf", "--model", "smollm2-135m"], "unrecognized arguments: --model"),
    (["bench", "mdd", "--device", "cpu"], "unrecognized arguments: --device"),
        (["bench", "engine", "--models", "a"], "unrecognized arguments: --models"),
        (["bench", "engine", "--quick"], "unrecognized arguments: --quick"),
    (["bench", "marginal", "--sizes", "0"], "argument --sizes"),
    (["mdd", "x"], "--dot FILE"),
    (["mdd", "x", "--dot", "-", "--json"], "both write to standard output"),
    (["count"], "give the TEXT, - to read it from standard input, or --file PATH"),
    (["count", "x", "--file", "f.txt"], "not both"),
    (["count", "a\udcffb"], "TEXT has the byte 0xFF, which is not valid UTF-8, at character 1"),
    (["score", "x", "--context", "a\ud800"], "--context has a lone surrogate U+D800 at character 1"),
])
def test_arguments_are_checked_before_any_work_with_one_line(capsys, no_work, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and message in err and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unavailable_device_and_unknown_dtype_are_clear(capsys):
    import torch

    if not torch.cuda.is_available():
        code, _, err = run(capsys, "score", " Paris", "--device", "cuda")
        assert code == 2 and "device 'cuda' is not available" in err


def test_json_is_rfc8259_with_non_finite_numbers_as_strings(capsys, monkeypatch):
    assert to_json({"a": -math.inf, "b": [math.inf, math.nan], "c": (1, 2.5)}) == \
        '{"a": "-Infinity", "b": ["Infinity", "NaN"], "c": [1, 2.5]}'
    assert float("-Infinity") == -math.inf  # the strings read back with float()
    vocab = Vocabulary.from_tokens([None, "a", "b", "ab"])
    zero = FunctionLM(vocab, lambda p: [1, 0, 0, 0], bos_id=0, name="zero")  # every text has p = 0
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: zero)
    code, out, _ = run(capsys, "score", "ab", "--json")
    assert code == 0 and strict_json(out)["canonical_log_prob"] == "-Infinity"
    code, out, _ = run(capsys, "distribution", "ab", "--json")
    data = strict_json(out)
    assert code == 0 and data["log_marginal"] == "-Infinity" and data["top"][0]["posterior"] == 0.0


def test_bos_id_flag_and_the_converted_folder(capsys, smollm2):  # smollm2: the model is converted
    from ppl_tok.lm.cards import cache_dir

    folder = str(cache_dir() / "smollm2-135m" / "model")
    code, out, _ = run(capsys, "score", " tongueless", "--model", folder, "--json")
    assert code == 0 and strict_json(out)["canonical_log_prob"] == pytest.approx(-26.694, abs=2e-3)
    code, out, _ = run(capsys, "score", " tongueless", "--model", folder, "--bos-id", "1", "--json")
    assert code == 0 and strict_json(out)["canonical_log_prob"] == pytest.approx(-37.169, abs=2e-3)


def test_counts_of_any_size_print(capsys, loaded):
    text = " tongueless" * 2000  # 22 kB: the count has more than 4300 digits
    code, out, _ = run(capsys, "count", text)
    assert code == 0 and len(out.strip()) > 4300
    code, out, _ = run(capsys, "count", text, "--json")
    data = json.loads(out)  # a JSON string: any reader takes it (a 5000-digit JSON number Python itself refuses)
    assert code == 0 and len(data["count"]) > 4300 and data["count"].isdigit()
    assert data["log10_count"] == pytest.approx(len(data["count"]) - 1, abs=1)
    code, out, _ = run(capsys, "tokenize", text, "--json")
    assert code == 0 and len(json.loads(out)["count"]) > 4300


def test_text_from_a_file_and_from_stdin(capsys, loaded, tmp_path, monkeypatch):
    f = tmp_path / "t.txt"
    f.write_text(" tongueless", encoding="utf-8")
    code, out, _ = run(capsys, "count", "--file", str(f))
    assert code == 0 and out == "597\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(" tongueless".encode())))
    code, out, _ = run(capsys, "tokenize", "-", "--json")
    assert code == 0 and strict_json(out)["count"] == "597"
    f.write_bytes(b"caf\xe9")
    code, _, err = run(capsys, "count", "--file", str(f))
    assert code == 2 and f"{f} is not UTF-8 text" in err
    code, _, err = run(capsys, "count", "--file", str(tmp_path / "none.txt"))
    assert code == 2 and "--file: cannot read" in err


def test_ctrl_c_exits_130_with_one_line_keeping_partial_output(capsys, monkeypatch):
    def interrupted(args):
        print("partial result")
        raise KeyboardInterrupt

    monkeypatch.setattr(ppl_tok.cli.tokenization, "cmd_count", interrupted)
    code, out, err = run(capsys, "count", "x")
    assert code == 130 and out == "partial result\n" and err == "ppl-tok count: interrupted\n"


@pytest.mark.parametrize("command", ["tokenize", "score", "marginal"])
def test_special_token_spellings_are_ordinary_text(capsys, loaded, command):
    extra = ["--samples", "4"] if command == "marginal" else []
    code, out, err = run(capsys, command, "<|endoftext|>", "--json", *extra)
    assert code == 0, err
    data = strict_json(out)
    assert all(t["id"] != 0 for t in data["canonical"])
    if "count" in data:
        assert data["count"] == "132"


def test_mdd_dot_dash_writes_standard_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "mdd", " Bird", "--tokenizer", str(LLAMA2), "--dot", "-")
    assert code == 0 and out.startswith("digraph") and "14 tokenizations" in err
    assert not (tmp_path / "-").exists()


def test_most_likely_top_k_lists_k_in_text(capsys, loaded):
    code, out, _ = run(capsys, "most-likely", " Tokens", "--top-k", "3")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[:3]] == ["most", "2.", "3."]


def test_context_errors_and_window_warning(capsys, loaded, monkeypatch):
    code, _, err = run(capsys, "score", " Paris", "--context", "a\x04b")
    assert code == 2 and "--context:" in err and "U+0004" in err
    monkeypatch.setattr(loaded.model.config, "max_position_embeddings", 4)
    code, _, err = run(capsys, "score", " Paris", "--context", "The capital of France is")
    assert code == 0 and "more than smollm2-135m's window of 4" in err


def test_help_describes_the_tool_and_every_option():
    parser = cli.build_parser()
    assert "command line." not in parser.description and "tokenizations" in parser.description
    sub = next(a for a in parser._actions if isinstance(a, cli.argparse._SubParsersAction))
    todo = [(name, p) for name, p in sub.choices.items() if name != "qa"]
    while todo:
        name, p = todo.pop()
        for action in p._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
            if isinstance(action, cli.argparse._SubParsersAction):  # bench NAME
                todo += [(f"{name} {n}", q) for n, q in action.choices.items()]


def test_each_benchmark_shows_only_its_own_flags():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, cli.argparse._SubParsersAction))
    bench = next(a for a in sub.choices["bench"]._actions if isinstance(a, cli.argparse._SubParsersAction))
    flags = {name: {o for a in p._actions for o in a.option_strings} for name, p in bench.choices.items()}
    assert set(flags) == {"mdd", "marginal", "most-likely", "engine", "memory", "estimators", "diagnostics",
                          "strings", "perplexity", "gpu-check"}
    assert "--genlm-python" in flags["strings"] and not any("--genlm-python" in f for n, f in flags.items()
                                                               if n != "strings")
    assert "--lockstep" in flags["perplexity"] and "--lockstep" not in flags["strings"]
    assert "--model" not in flags["mdd"] and "--models" in flags["mdd"]
    assert {"--model", "--device", "--dtype", "--bos-id"} <= flags["engine"]


def test_sat_time_budget_bounds_a_hard_formula(capsys, tmp_path):
    from ppl_tok.sat import CNF

    f = tmp_path / "hard.cnf"
    f.write_text(CNF.random(20, 85, seed=0).to_dimacs())
    code, out, _ = run(capsys, "sat", str(f), "--time-budget", "1", "--json")
    assert code == 0 and strict_json(out)["satisfiable"] in (None, True)
    code, _, err = run(capsys, "sat", str(f), "--problem", "msp", "--time-budget", "1")
    assert code == 2 and "did not finish within 1 s" in err


def test_bench_marginal_quick_mode_is_wired(capsys, monkeypatch):
    from ppl_tok.bench import marginal as bench

    seen = {}
    monkeypatch.setattr(bench, "bench_marginal", lambda model, **kw: seen.update(kw, model=model) or {})
    monkeypatch.setattr(bench, "format_marginal", lambda r: ["done"])
    code, out, _ = run(capsys, "bench", "marginal", "--quick", "--dtype", "bfloat16", "--device", "cpu")
    assert code == 0 and out == "done\n"
    assert seen["sizes"] == (8,) and seen["strings"] == (" Tokens",) and seen["dtype"] == "bfloat16"


TEXTS = st.one_of(
    st.text(st.characters(blacklist_categories=()), max_size=40),  # control characters, lone surrogates
    st.sampled_from(["<|endoftext|>", "<|im_start|>", "<bos>", "<s>", "-", "--x", "\x00", "\udcff", " "]),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=8), st.integers(1, 4000)),  # long
)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=TEXTS, command=st.sampled_from(["tokenize", "count", "mdd", "score", "most-likely"]))
def test_any_text_succeeds_or_exits_2_with_one_line(capsys, loaded, text, command):
    if command in ("score", "most-likely"):
        text = text[:60]
    extra = {"mdd": ["--dot", "-"], "most-likely": ["--time-budget", "0.5"]}.get(command, ["--json"])
    code, out, err = run(capsys, command, *extra, "--", text)
    assert code in (0, 2), err
    assert "Traceback" not in err and "internal error" not in err
    if code == 2:
        assert err.count("\n") == 1 and out == ""
    elif "--json" in extra:
        strict_json(out)


@pytest.mark.slow
def test_bench_engine_runs_and_reports_ratios(capsys):
    code, out, _ = run(capsys, "bench", "engine", "--questions", "1", "--samples", "2", "--batch-questions", "1",
                       "--big-n", "2", "--data", str(SHARED / "data"), "--json")
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
    from ppl_tok.bench import marginal as bench

    seen = {}
    monkeypatch.setattr(bench, "bench_estimators",
                        lambda model, **kw: seen.update(kw, model=model) or {"model": model, "seed": 0, "rows": []})
    code, out, _ = run(capsys, "bench", "estimators", "--samples", "8")
    assert code == 0 and seen["num_samples"] == 8 and seen["model"] == "smollm2-135m"
