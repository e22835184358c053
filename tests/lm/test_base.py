"""The LanguageModel base (ppl_tok.lm.base) against the exact rows of a bigram LM."""

import math

import pytest
import torch

from ppl_tok import BigramLM, Vocabulary

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb"])
LM = BigramLM.random(VOCAB, seed=11, bos_id=0)


def test_sample_tokens_is_the_inverse_cdf_of_the_exact_row():
    state = LM.state([0, 3])  # BOS "ab": the next row is the bigram row of "ab"
    row = LM.transition(3).double().exp()
    u = torch.linspace(0.001, 0.999, 57, dtype=torch.float64)
    drawn = LM.sample_tokens([state] * len(u), u)
    expected = torch.searchsorted(row.cumsum(0), u * row.sum(), right=True).clamp_max(len(row) - 1)
    assert drawn.tolist() == expected.tolist()
    for tok in set(drawn.tolist()):  # each drawn token's log-prob is recorded, exactly the row's
        assert state.known[tok] == pytest.approx(math.log(float(row[tok])), abs=1e-6)


def test_log_probs_many_is_the_chain_rule_over_exact_rows():
    seqs, contexts = [[1, 4, 2], [5], [3, 3, 6, 1]], ["ab", "", [2, 2]]
    got = LM.log_probs_many(seqs, contexts)
    for tokens, context, value in zip(seqs, contexts, got):
        prev = LM.prefix_ids(context)[-1]  # BOS, then the context's tokens
        want = 0.0
        for tok in tokens:
            want += float(LM.transition(prev)[tok])
            prev = tok
        assert value == pytest.approx(want, abs=1e-5)
    with pytest.raises(ValueError, match="3 token sequences but 2 contexts"):
        LM.log_probs_many(seqs, contexts[:2])


def test_token_log_probs_after_are_the_chain_rules_terms_and_sum_to_log_probs_after():
    prefixes, seqs = [(0,), (0, 1)], [[1, 3, 2], [4]]
    per = LM.token_log_probs_after(prefixes, seqs)
    for prefix, seq, lps in zip(prefixes, seqs, per):
        want = [float(LM.transition([*prefix, *seq[:k]][-1])[t]) for k, t in enumerate(seq)]
        assert lps == pytest.approx(want, abs=1e-5)
    assert LM.log_probs_after(prefixes, seqs) == [sum(lps, 0.0) for lps in per]
    assert LM.token_log_probs_after([(0,)], [[]]) == [[]] and LM.log_probs_after([(0,)], [[]]) == [0.0]


def test_token_log_prob_table_is_token_log_probs_padded():
    states = LM.states([(0,), (0, 1), (0, 3, 4)])
    tokens = [[1, 4, 2], [5], []]
    table = LM.token_log_prob_table(states, tokens, width=4)
    assert table.shape == (3, 4) and table.dtype == torch.float64
    for row, lps, ts in zip(table, LM.token_log_probs(states, tokens), tokens):
        assert row[: len(ts)].tolist() == lps.tolist()  # the same numbers, bit for bit
        assert all(v == -math.inf for v in row[len(ts):].tolist())
    for state, ts, row in zip(states, tokens, table):  # and they are the exact rows'
        for t, v in zip(ts, row.tolist()):
            assert v == pytest.approx(float(LM.transition(state.tokens[-1])[t]), abs=1e-6)
    with pytest.raises(ValueError, match="2 states but 3 token lists"):
        LM.token_log_prob_table(states[:2], tokens)
