"""Memory limits and the API's argument checks (ppl_tok.limits)."""

import pytest

from ppl_tok.limits import (
    LimitError,
    Limits,
    check_context,
    check_contexts,
    check_count,
    check_seeds,
    check_texts,
    check_workload,
    limits,
    set_limits,
)


@pytest.fixture
def small_limits():
    set_limits(Limits(samples=8, pairs=2, particles=10, text_bytes=4, lm_bytes=6, batch_bytes=9))
    yield
    set_limits(None)


def test_limits_from_the_environment():
    assert Limits.from_env({}) == Limits()
    assert Limits.from_env({"PPL_TOK_MAX_PAIRS": "7", "OTHER": "x"}).pairs == 7
    with pytest.raises(ValueError, match=r"^Limits.paths must be a positive integer, got 0 \(from PPL_TOK_MAX_\*\)$"):
        Limits.from_env({"PPL_TOK_MAX_PATHS": "0"})
    with pytest.raises(ValueError, match="Limits.samples must be a positive integer, got True"):
        Limits(samples=True)
    with pytest.raises(TypeError, match="set_limits takes a Limits or None, got dict"):
        set_limits({"samples": 1})


def test_check_names_the_limit_the_value_and_the_variable():
    Limits(samples=5).check("samples", 5, "x")  # at the limit: allowed
    with pytest.raises(LimitError, match=r"^--samples is 1,000, more than the limit samples=5 that keeps memory bounded; "
                                         r"raise it with PPL_TOK_MAX_SAMPLES=N"):
        Limits(samples=5).check("samples", 1000, "--samples")


def test_set_limits_overrides_until_reset(small_limits):
    assert limits().samples == 8
    set_limits(None)
    assert limits() == Limits.from_env()


def test_argument_checks():
    assert check_count("n", 3) == 3 and check_count("n", 0, low=0) == 0
    with pytest.raises(TypeError, match=r"^n must be an integer, got 2.0 \(float\)$"):
        check_count("n", 2.0)
    with pytest.raises(ValueError, match="^n must be >= 1, got 0$"):
        check_count("n", 0)
    assert check_seeds((0, 2**32 - 1)) == [0, 2**32 - 1]
    with pytest.raises(ValueError, match=r"^seeds\[1\] must be an integer in 0..4294967295, got -1$"):
        check_seeds([0, -1])
    with pytest.raises(TypeError, match="seeds must be a sequence of integers, got str"):
        check_seeds("12")
    assert check_texts("texts", ("a", "b")) == ["a", "b"]
    with pytest.raises(TypeError, match=r"wrap one text in a list, \[text\]"):
        check_texts("texts", "ab")
    with pytest.raises(TypeError, match=r"^texts\[1\] must be a str, got int$"):
        check_texts("texts", ["a", 1])
    assert check_context("c", [1, 2]) == [1, 2] and check_contexts("cs", ["x", (3,)]) == ["x", (3,)]
    with pytest.raises(TypeError, match="c: a context given as token ids must hold integers only"):
        check_context("c", [1, "2"])
    with pytest.raises(TypeError, match=r"give \[context\] \* len\(texts\)"):
        check_contexts("cs", "x")


@pytest.mark.parametrize("texts,contexts,n,message", [
    (["ab"], [""], 9, "the number of samples per text is 9, more than the limit samples=8"),
    (["a", "b", "c"], ["", "", ""], 1, r"the number of \(context, text\) pairs is 3, more than the limit pairs=2"),
    (["a", "b"], ["", ""], 6, r"the number of particles \(pairs x samples\) is 12, more than the limit particles=10"),
    (["abcde"], [""], 1, "text 0's length in bytes is 5, more than the limit text_bytes=4"),
    (["ab"], ["abcde"], 1, "pair 0's context plus text in bytes is 7, more than the limit lm_bytes=6"),
    (["ab"], [[1, 2]], 1, "pair 0's context plus text in bytes is 10, more"),  # a token id counts 4 bytes
    (["abc", "abc"], ["ab", "abc"], 1, "the contexts plus texts of all pairs, in bytes is 11, more than the limit "
                                       "batch_bytes=9"),
])
def test_check_workload_bounds_each_part(small_limits, texts, contexts, n, message):
    with pytest.raises(LimitError, match="^" + message):
        check_workload(texts, contexts, n)
    check_workload(["ab"], ["ab"], 4)  # within every limit
