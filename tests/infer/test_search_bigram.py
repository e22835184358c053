"""The polynomial most likely tokenization under a bigram LM, against branch and bound."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import BigramLM, Vocabulary
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.search import most_likely, most_likely_bigram

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb", "bab"])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**6), st.text("ab", min_size=1, max_size=10))
def test_bigram_shortest_path_equals_branch_and_bound_and_enumeration(seed, text):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0)
    tokens, lp = most_likely_bigram(text, lm)
    assert VOCAB.decode(tokens) == text.encode()
    assert lp == pytest.approx(lm.log_prob(tokens), abs=1e-9)
    assert lp == pytest.approx(float(exact_marginal(text, lm).log_probs[0]), abs=1e-9)
    assert lp == pytest.approx(most_likely(text, lm).log_prob, abs=1e-9)


def test_bigram_without_bos():
    lm = BigramLM.random(VOCAB, seed=1)
    tokens, lp = most_likely_bigram("abab", lm)
    assert lp == pytest.approx(float(exact_marginal("abab", lm).log_probs[0]))
