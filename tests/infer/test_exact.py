import math

import pytest
import torch

from ppl_tok import BigramLM, FunctionLM, Vocabulary, compile_mdd
from ppl_tok.infer.exact import exact_marginal

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb"])


def brute_force_log_marginal(text, lm):
    mdd = compile_mdd(text, lm.vocab)
    return math.log(sum(math.exp(lm.log_prob(p)) for p in mdd.enumerate()))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("text", ["abab", "ababba", "bbaba"])
def test_exact_marginal_matches_brute_force_on_bigrams(seed, text):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0)
    result = exact_marginal(text, lm)
    assert result.log_marginal == pytest.approx(brute_force_log_marginal(text, lm), abs=1e-9)
    assert result.count == compile_mdd(text, VOCAB).count()
    assert torch.all(result.log_probs[:-1] >= result.log_probs[1:])  # sorted
    assert float(result.posterior().sum()) == pytest.approx(1.0)


def test_prefix_sharing_costs_one_forward_per_distinct_prefix():
    calls = []
    lm = FunctionLM(VOCAB, lambda p: calls.append(p) or [0] + [1] * 6, bos_id=0)
    result = exact_marginal("ababab", lm)
    assert len(calls) == len(set(calls))  # no prefix twice
    # uniform next-token over 6 tokens: every path of length L has prob 6^-L
    expected = math.log(sum(6.0 ** -len(p) for p in compile_mdd("ababab", VOCAB).enumerate()))
    assert result.log_marginal == pytest.approx(expected)


def test_zero_probability_paths_are_kept_without_lm_calls():
    lm = FunctionLM(VOCAB, lambda p: [0, 1, 1, 0, 1, 1, 1], bos_id=0)  # "ab" never
    result = exact_marginal("abab", lm)
    assert result.count == compile_mdd("abab", VOCAB).count()
    assert all(lp == -math.inf for p, lp in zip(result.tokenizations, result.log_probs) if 3 in p)


def test_too_many_paths_is_a_clear_error(llama2_vocab):
    lm = BigramLM.random(VOCAB, seed=0, bos_id=0)
    with pytest.raises(ValueError, match=r"has \d+ tokenizations, more than max_paths=3"):
        exact_marginal("ababab", lm, max_paths=3)


# Figures measured independently (issue 4): exact log p on SmolLM2.
@pytest.mark.parametrize("text,count,log_p,canonical_share", [
    (" Tokens", 52, None, 0.996),
    (" tongueless", 597, -24.683, 0.134),
])
def test_smollm2_exact_marginals(smollm2, text, count, log_p, canonical_share):
    result = exact_marginal(text, smollm2)
    assert result.count == count
    if log_p is not None:
        assert result.log_marginal == pytest.approx(log_p, abs=1e-3)
    assert result.canonical_share == pytest.approx(canonical_share, abs=1e-3)


def test_smollm2_tongueless_most_likely_is_tongue_less(smollm2):
    result = exact_marginal(" tongueless", smollm2)
    assert smollm2.vocab.decode(result.most_likely) == b" tongueless"
    assert [smollm2.vocab.token_name(t) for t in result.most_likely] == ["\u0120tongue", "less"]
    assert math.exp(float(result.log_probs[0]) - result.log_marginal) == pytest.approx(0.85, abs=0.01)


@pytest.mark.slow
def test_smollm2_hypnopaturist(smollm2):
    result = exact_marginal(" Hypnopaturist", smollm2)
    assert result.count == 3008
    assert result.log_marginal == pytest.approx(-45.688, abs=1e-3)


def test_results_have_a_short_repr_and_a_dict():
    from ppl_tok.infer.search import marginal_bounds, most_likely

    from ppl_tok import TableLM

    lm = TableLM(VOCAB, {}, bos_id=0)
    exact = exact_marginal("abab", lm)
    bounds = marginal_bounds("abab", lm, tolerance=1e-6)
    best = most_likely("abab", lm)
    for result, key in [(exact, "log_marginal"), (bounds, "lower"), (best, "log_prob")]:
        text = repr(result)
        assert len(text) < 200 and "abab" in text
        d = result.to_dict()
        assert d["text"] == "abab" and isinstance(d[key], float)
    assert exact.to_dict()["count"] == exact.count
