"""The 3-SAT / #3-SAT reductions, proven right against brute force on random formulas."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ppl_tok import compile_mdd
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.sat import CNF, mlt_reduction, model_count, msp_reduction, read_assignment
from ppl_tok.infer.search import marginal_bounds, most_likely

cnfs = st.builds(lambda n, k, seed: CNF.random(n, k, seed), st.integers(1, 6), st.integers(1, 9),
                 st.integers(0, 10**6))


def test_cnf_basics_and_dimacs_round_trip(tmp_path):
    f = CNF(3, ((1, -2, 3), (-1,), (2, 3)))
    assert f.brute_force_count() == sum(f.satisfied(a) for a in f.assignments())
    path = tmp_path / "f.cnf"
    path.write_text("c a comment\n" + f.to_dimacs())
    assert CNF.read(path) == f
    assert CNF.random(4, 5, seed=1) == CNF.random(4, 5, seed=1)
    with pytest.raises(ValueError, match="outside variables"):
        CNF(2, ((3,),))
    with pytest.raises(ValueError, match="announces 2 clauses"):
        CNF.from_dimacs("p cnf 2 2\n1 2 0\n")
    with pytest.raises(ValueError, match="clause before the 'p cnf' line"):
        CNF.from_dimacs("1 2 0\n")
    with pytest.raises(ValueError, match="no 'p cnf' problem line"):
        CNF.from_dimacs("c only a comment\n")


def test_the_reduction_string_and_mdd():
    f = CNF(3, ((1, 2, 3), (-1, -2, -3)))
    red = mlt_reduction(f)
    assert red.text == "abcabcabcdd"
    mdd = compile_mdd(red.text, red.lm.vocab)
    assert mdd.count() == 2 ** 3  # one tokenization per assignment
    for path in mdd.enumerate():
        assert len(path) == 2 * 3 + 2
        assignment = read_assignment(f, path)
        assert assignment is not None


def test_each_next_token_distribution_sums_to_one():
    red = msp_reduction(CNF(2, ((1, 2), (-1,))))
    for prefix in [(0,), (0, 1), (0, 3), (0, 1, 2), (0, 1, 2, 3, 4), (0, 1, 2, 3, 4, 5)]:
        raw = red.lm.fn(prefix)
        assert math.fsum(raw) == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cnfs)
def test_mlt_decides_satisfiability_like_brute_force(cnf):
    red = mlt_reduction(cnf)
    result = most_likely(red.text, red.lm)
    assert result.optimal
    satisfiable = result.log_prob > red.log_threshold
    assert satisfiable == (cnf.brute_force_sat() is not None)
    if satisfiable:
        assert cnf.satisfied(read_assignment(cnf, result.tokens))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cnfs)
def test_msp_recovers_the_model_count(cnf):
    red = msp_reduction(cnf)
    exact = exact_marginal(red.text, red.lm)
    count = cnf.brute_force_count()
    assert model_count(exact.log_marginal, red) == count
    unit = math.exp(red.log_threshold)
    p = math.exp(exact.log_marginal)
    assert (count - 0.5) * unit < p < (count + 0.5) * unit


@settings(max_examples=50, deadline=None, derandomize=True)
@given(cnfs)
def test_msp_via_the_certified_search_is_exact(cnf):
    red = msp_reduction(cnf)
    b = marginal_bounds(red.text, red.lm, tolerance=1e-9, budget=None)
    assert model_count(b.lower, red) == model_count(b.upper, red) == cnf.brute_force_count()


def test_library_marginal_runs_unchanged_on_the_reduction():
    from ppl_tok.infer.importance import marginal

    cnf = CNF(3, ((1, -2, 3), (-1, 2), (2, 3)))
    red = msp_reduction(cnf)
    r = marginal(red.text, red.lm, 64, guide="stratified", seed=0, search_budget=10_000)
    assert model_count(r.log_marginal, red) == cnf.brute_force_count()
    la = marginal(red.text, red.lm, 64, seed=0)
    assert math.isfinite(la.log_marginal)


@pytest.mark.parametrize("text,match", [
    ("p cnf x 3\n1 0\n", "line 1: the number of variables 'x' is not an integer"),
    ("p cnf 2 y\n1 0\n", "line 1: the number of clauses 'y' is not an integer"),
    ("c hi\np cnf 2 1\np cnf 2 1\n1 0\n", "line 3: a second 'p cnf' line"),
    ("p cnf 100000000 1\n1 0\n", "line 1: 100000000 variables is more than"),
    ("p cnf 2 100000000\n1 0\n", "line 1: 100000000 clauses is more than"),
    ("p cnf 0 1\n1 0\n", "at least 1"),
    ("p cnf 2 1\n1 0\n2 0\n", "line 3: more clauses than the 1"),
    ("p cnf 2 1\n3 0\n", "line 2: literal 3 is outside"),
])
def test_dimacs_errors_name_the_line_and_sizes_are_checked_first(text, match):
    with pytest.raises(ValueError, match=match):
        CNF.from_dimacs(text)


def test_dimacs_file_errors_name_the_file(tmp_path):
    f = tmp_path / "bad.cnf"
    f.write_bytes(b"p cnf 1 1\n\xff 0\n")
    with pytest.raises(ValueError, match="bad.cnf: not a UTF-8"):
        CNF.read(f)


def test_exact_marginal_time_budget():
    from ppl_tok.infer.exact import TimeBudgetExceeded

    red = msp_reduction(CNF.random(14, 60, seed=1))
    with pytest.raises(TimeBudgetExceeded, match="did not finish within 0.2 s"):
        exact_marginal(red.text, red.lm, max_paths=1 << 30, time_budget=0.2)
    with pytest.raises(ValueError, match="time_budget"):
        exact_marginal(red.text, red.lm, time_budget=-1)


def test_canonical_share_of_a_zero_probability_string_is_zero_not_nan():
    from ppl_tok import FunctionLM, Vocabulary

    vocab = Vocabulary.from_tokens([None, "a", "b", "ab"])
    lm = FunctionLM(vocab, lambda p: [1, 0, 0, 0], bos_id=0)  # only BOS is ever likely
    result = exact_marginal("ab", lm)
    assert result.log_marginal == -math.inf
    assert result.canonical_share == 0.0
    assert not result.posterior().isnan().any()
