"""``ppl-tok`` itself (ppl_tok.cli.main): the parser and its help, arguments checked before any work, exit
statuses (2 with one line, 130 on Ctrl-C), any text handled."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ppl_tok.cli.main as cli
import ppl_tok.cli.tokenization
from cli_run import run, strict_json


@pytest.mark.parametrize("argv,message", [
    (["count", ""], "empty string"),
    (["count", "a\x04b"], "U+0004"),
    (["count", "x", "--model", "no-such-model"], "unknown model"),
    (["mdd", "x"], "--dot FILE"),
])
def test_errors_are_clear_and_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


@pytest.mark.parametrize("argv,message", [
    (["distribution", "x", "--top", "-1"], "argument --top: expected an integer >= 1, got -1"),
    (["distribution", "x", "--top", "0"], "--top"),
    (["marginal", "x", "--bounds", "nan"], "argument --bounds: expected a finite number > 0"),
    (["marginal", "x", "--bounds", "-1"], "argument --bounds"),
    (["marginal", "x", "--exact-budget", "-5"], "argument --exact-budget/--budget"),
    (["marginal", "x", "--samples", "0"], "argument --samples"),
    (["marginal", "x", "--seed", "-1"], "argument --seed"),
    (["most-likely", "x", "--time-budget", "-1"], "argument --time-budget"),
    (["most-likely", "x", "--top", "0"], "argument --top/--top-k"),
    (["canonicity", "--max-tokens", "0"], "argument --max-tokens"),
    (["score", "x", "--dtype", "int8"], "argument --dtype: invalid choice"),
    (["score", "x", "--bos-id", "-3"], "argument --bos-id"),
    (["sat", "f.cnf", "--time-budget", "-1"], "argument --time-budget"),
    (["sat", "f.cnf", "--model", "smollm2-135m"], "unrecognized arguments: --model"),
    (["benchmarks", "mdd", "--device", "cpu"], "unrecognized arguments: --device"),
        (["bench", "engine", "--models", "a"], "unrecognized arguments: --models"),
        (["bench", "engine", "--quick"], "unrecognized arguments: --quick"),
    (["benchmarks", "marginal", "--sizes", "0"], "argument --sizes"),
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


def test_ctrl_c_exits_130_with_one_line_keeping_partial_output(capsys, monkeypatch):
    def interrupted(args):
        print("partial result")
        raise KeyboardInterrupt

    monkeypatch.setattr(ppl_tok.cli.tokenization, "cmd_count", interrupted)
    code, out, err = run(capsys, "count", "x")
    assert code == 130 and out == "partial result\n" and err == "ppl-tok count: interrupted\n"


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


def test_top_level_help_lists_every_command_that_runs_an_lm():
    """Issue 37: the help named six LM commands (score ... bench); every one with --bos-id is listed now."""
    parser = cli.build_parser()
    text = " ".join(parser.format_help().split())
    listed = text.split("Commands that run an LM (", 1)[1].split(")", 1)[0].split(", ")
    assert {"conditional", "generate", "next", "surprisal", "perplexity", "qa run", "score", "marginal"} <= set(listed)
    sub = next(a for a in parser._actions if isinstance(a, cli.argparse._SubParsersAction))
    assert set(listed) == set(cli.lm_commands(sub)) and "count" not in listed and "tokenize" not in listed
