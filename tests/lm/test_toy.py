import math

import pytest
import torch

from ppl_tok import BigramLM, FunctionLM, TableLM, Vocabulary

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab"])  # id 0 is BOS


def test_table_lm_is_exact_and_normalised():
    lm = TableLM(VOCAB, {(0,): {1: 0.5, 3: 0.5}, (0, 1): [0, 0.2, 0.8, 0]}, bos_id=0)
    assert lm.log_prob([3]) == pytest.approx(math.log(0.5))
    assert lm.log_prob([1, 2]) == pytest.approx(math.log(0.5 * 0.8))
    assert lm.log_prob([2]) == -math.inf
    # missing prefixes are uniform
    assert lm.log_prob([1, 2, 1]) == pytest.approx(math.log(0.5 * 0.8 * 0.25))
    assert torch.logsumexp(lm.next_log_probs([(0, 1)])[0], 0) == pytest.approx(0.0)


def test_function_lm_sees_the_prefix_with_bos():
    seen = []

    def fn(prefix):
        seen.append(prefix)
        return [0, 1, 1, 2]

    lm = FunctionLM(VOCAB, fn, bos_id=0)
    assert lm.log_prob([3, 1]) == pytest.approx(math.log(0.5 * 0.25))
    assert seen == [(0,), (0, 3)]


def test_prefix_cache_computes_identical_prefixes_once():
    calls = []
    lm = FunctionLM(VOCAB, lambda p: calls.append(p) or [0, 1, 1, 1], bos_id=0)
    root = lm.initial()
    states = lm.extend([root] * 5, [1, 1, 2, 1, 2])
    assert states[0] is states[1] is states[3] and states[2] is states[4]
    assert calls == [(0,), (0, 1), (0, 2)]
    assert lm.stats.forwards == 3
    again = lm.extend([root], [1])[0]
    assert again is states[0] and lm.stats.cache_hits >= 1


def test_bad_distributions_are_errors():
    with pytest.raises(ValueError, match="4 entries"):
        FunctionLM(VOCAB, lambda p: [1, 1], bos_id=0).initial()
    with pytest.raises(ValueError, match="NaN"):
        FunctionLM(VOCAB, lambda p: [float("nan")] * 4, bos_id=0).initial()
    with pytest.raises(ValueError, match="no mass"):
        FunctionLM(VOCAB, lambda p: [0] * 4, bos_id=0).initial()
    with pytest.raises(ValueError, match="BOS id"):
        FunctionLM(VOCAB, lambda p: [1] * 4, bos_id=7)


def test_bigram_lm_matches_its_matrix():
    lm = BigramLM.random(VOCAB, seed=3, bos_id=0)
    m = lm.log_matrix
    assert lm.log_prob([1, 2, 3]) == pytest.approx(float(m[0, 1] + m[1, 2] + m[2, 3]))
    # the generic state path agrees with the closed form
    state = lm.initial()
    total = 0.0
    for t in [1, 2, 3]:
        total += float(state.log_probs[t])
        state = lm.extend([state], [t])[0]
    assert total == pytest.approx(lm.log_prob([1, 2, 3]))
    assert torch.allclose(torch.logsumexp(m, 1), torch.zeros(4, dtype=m.dtype))


def test_bigram_without_bos_uses_start_distribution():
    lm = BigramLM(VOCAB, torch.ones(4, 4), start=[0, 1, 0, 1])
    assert lm.log_prob([1]) == pytest.approx(math.log(0.5))


def test_canonical_log_prob_uses_the_tokenizer():
    lm = TableLM(VOCAB, {(0,): {1: 0.1, 3: 0.9}}, bos_id=0)
    assert lm.canonical("ab") == [3]
    assert lm.canonical_log_prob("ab") == pytest.approx(math.log(0.9))
