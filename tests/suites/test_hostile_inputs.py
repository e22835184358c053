"""Property-based (hypothesis): any arguments to the CLI and the Python API end cleanly (issue 24).

Every call either succeeds (exit 0 with standard JSON) or is one clear line naming the problem (exit 2);
never a traceback, an "internal error", or a run past the memory limits (here lowered so that a request
beyond them is refused at once). A toy bigram LM and vocabulary stand in for the model, so each example
takes milliseconds.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ppl_tok.cli.common
import ppl_tok.cli.main as cli
from ppl_tok.infer.importance import marginals
from ppl_tok.limits import Limits, set_limits
from qa_toy import toy_lm

LM = toy_lm()
SMALL = Limits(samples=64, particles=512, pairs=32, text_bytes=2_000, lm_bytes=200, dimacs_variables=20)

TEXT = st.one_of(
    st.text("abcdefgh ", min_size=0, max_size=12),  # the toy vocabulary's alphabet
    st.text(max_size=12),  # anything: control characters, lone surrogates, other scripts
    st.sampled_from(["", " ", "-", "--json", "\x00", "\ud800", "a" * 3000, "\U0001f600", "é"]),
)
NUMBER = st.one_of(
    st.integers(-3, 80).map(str), st.sampled_from(["0", "-1", "1e3", "nan", "inf", "-inf", "", "x", "2.5",
                                                   str(10**30), "1" * 5000, "٣"]),
)


@pytest.fixture(autouse=True)
def toy_and_small_limits(monkeypatch):
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: LM)
    monkeypatch.setattr(ppl_tok.cli.common, "load_vocabulary", lambda *a, **k: LM.vocab)
    set_limits(SMALL)
    yield
    set_limits(None)


def strict_json(out: str):
    def reject(name):
        raise ValueError(f"not RFC 8259 JSON: {name}")

    return json.loads(out, parse_constant=reject)


OPTIONS = {
    "tokenize": [], "count": [], "score": ["--context"],
    "marginal": ["--samples", "--seed", "--proposal", "--context", "--max-paths"],
    "distribution": ["--samples", "--seed", "--proposal", "--top", "--max-paths"],
    "most-likely": ["--top", "--time-budget", "--context"],
}


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [command, "--json"]
    options = draw(st.lists(st.sampled_from(OPTIONS[command]), unique=True, max_size=3)) if OPTIONS[command] else []
    for option in options:
        if option in ("--context",):
            value = draw(TEXT)
        elif option == "--proposal":
            value = draw(st.sampled_from(["lookahead", "uniform", "prior", "stratified", "exact", "", "LOOKAHEAD"]))
        else:
            value = draw(NUMBER)
        if option == "--time-budget" and value not in ("nan", "inf", "-inf", "x", ""):
            value = "0.2"  # a finite budget keeps the example short
        argv += [f"{option}={value}"]
    return argv + ["--", draw(TEXT)]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=command_lines())
def test_cli_ends_with_json_or_one_line(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    event(f"exit {code}")
    assert code in (0, 2), (argv, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    if code == 2:
        assert out == "" and err.count("\n") == 1 and ": error: " in err, (argv, err)
    else:
        data = strict_json(out)
        if "count" in data:
            assert data["count"].isdigit()


ANY = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**70), st.floats(allow_nan=True),
                st.text(max_size=5), st.lists(st.text("abcdefgh ", min_size=1, max_size=5), max_size=3))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(texts=st.one_of(ANY, st.lists(st.one_of(st.text("abcdefgh ", min_size=1, max_size=6), ANY), max_size=3)),
       num_samples=st.one_of(st.integers(-2, 100), ANY),
       seeds=st.one_of(st.none(), st.lists(st.one_of(st.integers(-1, 2**40), ANY), max_size=3)))
def test_api_returns_results_or_raises_a_named_error(texts, num_samples, seeds):
    names = ("texts", "contexts", "num_samples", "seeds", "limit", "tokenization", "seed")
    try:
        results = marginals(texts, LM, num_samples, seeds=seeds)
    except (TypeError, ValueError) as err:
        message = str(err)
        assert "\n" not in message.strip() or "limit" in message
        assert any(name in message for name in names), message
        return
    assert len(results) == len(texts)
    for r in results:
        assert not math.isnan(r.log_marginal) and r.log_marginal <= 1e-9 and r.num_samples == num_samples


DIMACS_LINE = st.one_of(
    st.builds(lambda v, c: f"p cnf {v} {c}", st.integers(-2, 40), st.integers(-2, 6)),
    st.builds(lambda lits: " ".join(map(str, lits)) + " 0", st.lists(st.integers(-45, 45), max_size=5)),
    st.sampled_from(["c a comment", "", "%", "p cnf", "p cnf 99999999999999999999 1", "1 2 x 0", "\x00"]),
    st.text(max_size=10),
)


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(DIMACS_LINE, max_size=6), problem=st.sampled_from(["mlt", "msp"]))
def test_sat_on_any_file_ends_with_json_or_one_line(capsys, tmp_path_factory, lines, problem):
    f = tmp_path_factory.mktemp("cnf") / "f.cnf"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    code = cli.main(["sat", str(f), "--problem", problem, "--time-budget", "0.5", "--json"])
    out, err = capsys.readouterr()
    event(f"exit {code}")
    assert code in (0, 2) and "Traceback" not in err and "internal error" not in err, (lines, err)
    if code == 2:
        assert out == "" and err.count("\n") == 1, (lines, err)
    else:
        data = strict_json(out)
        assert problem == "mlt" or data["model_count"].isdigit()
