"""The best-first engine: certified marginal bounds and branch-and-bound most likely tokenization."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import BigramLM, FunctionLM, NoTokenizationError, Vocabulary, compile_mdd
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.search import marginal_bounds, marginal_bounds_many, most_likely

PIECES = [None, "a", "b", "ab", "ba", "aba", "bb", "abb", "bab"]
VOCAB = Vocabulary.from_tokens(PIECES)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=9), st.integers(1, 40))
def test_bracket_always_contains_the_exact_value_and_closes(seed, text, budget):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0)
    exact = exact_marginal(text, lm).log_marginal
    partial = marginal_bounds(text, lm, tolerance=0.0, budget=budget, batch=3)
    assert partial.lower <= exact + 1e-9 and exact <= partial.upper + 1e-9
    full = marginal_bounds(text, lm, tolerance=1e-9, budget=None)
    assert full.closed and full.lower == pytest.approx(exact, abs=1e-9) and full.upper == pytest.approx(exact, abs=1e-9)
    lo, up = full.certified  # widened by the rows' rounding tolerance (a toy LM's rows: float32)
    assert full.tolerance > 0 and (lo, up) == (full.lower - full.tolerance, full.upper + full.tolerance)
    assert full.to_dict()["tolerance_nats"] == full.tolerance


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.tuples(st.text("ab", min_size=1, max_size=8), st.sampled_from(["", "b", "ab"])),
                                        min_size=1, max_size=5), st.integers(1, 30))
def test_searches_run_together_give_each_pair_its_own_bracket(seed, pairs, budget):
    calls = []
    lm = FunctionLM(VOCAB, lambda p: calls.append(p) or [0.0] + [float((7 * len(p) + t + seed) % 5) for t in range(8)],
                    bos_id=0)
    texts, contexts = [t for t, _ in pairs], [c for _, c in pairs]
    together = marginal_bounds_many(texts, lm, contexts=contexts, tolerance=1e-6, budget=budget, batch=3)
    shared_calls = len(calls)
    for text, ctx, b in zip(texts, contexts, together):
        lm.clear_cache()
        alone = marginal_bounds(text, lm, context=ctx, tolerance=1e-6, budget=budget, batch=3)
        assert (b.lower, b.upper, b.forwards, b.closed) == (alone.lower, alone.upper, alone.forwards, alone.closed)
        assert b.tokenizations == alone.tokenizations
        exact = exact_marginal(text, lm, context=ctx).log_marginal
        assert b.lower <= exact + 1e-9 and exact <= b.upper + 1e-9
    assert shared_calls <= len(calls) - shared_calls  # together: never more LM work than one at a time


def test_searches_together_validate_their_arguments():
    lm = BigramLM.random(VOCAB, seed=0, bos_id=0)
    with pytest.raises(ValueError, match="2 texts but 1 contexts"):
        marginal_bounds_many(["ab", "b"], lm, contexts=[""])
    with pytest.raises(ValueError, match="tolerance"):
        marginal_bounds_many(["ab"], lm, tolerance=-1)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.text("ab", min_size=1, max_size=9), st.integers(1, 3))
def test_branch_and_bound_equals_exhaustive_argmax(seed, text, top_k):
    lm = BigramLM.random(VOCAB, seed=seed, bos_id=0)
    exact = exact_marginal(text, lm)
    result = most_likely(text, lm, top_k=top_k)
    assert result.optimal
    assert result.log_prob == pytest.approx(float(exact.log_probs[0]), abs=1e-9)
    ranked = sorted(exact.log_probs.tolist(), reverse=True)[:top_k]
    assert [lp for _, lp in result.top_k] == pytest.approx(ranked[:len(result.top_k)], abs=1e-9)


def test_branch_and_bound_prunes_and_reports_work():
    # a sharply peaked LM: the canonical path's bound prunes almost everything
    lm = FunctionLM(VOCAB, lambda prefix: [0] + [100 if i == 5 else 1 for i in range(1, len(PIECES))], bos_id=0)
    result = most_likely("abaaba", lm)
    assert result.optimal and [VOCAB.token_name(t) for t in result.tokens] == ["aba", "aba"]
    assert result.expanded < compile_mdd("abaaba", VOCAB).number_of_edges()


def test_time_budget_makes_it_anytime():
    lm = BigramLM.random(VOCAB, seed=0, bos_id=0)
    result = most_likely("ab" * 12, lm, time_budget=0.0)
    assert not result.optimal and result.log_prob >= result.canonical_log_prob


def test_errors():
    lm = BigramLM.random(VOCAB, seed=0, bos_id=0)
    with pytest.raises(ValueError, match="top_k"):
        most_likely("ab", lm, top_k=0)
    with pytest.raises(ValueError, match="tolerance"):
        marginal_bounds("ab", lm, tolerance=-1)
    with pytest.raises(NoTokenizationError):
        marginal_bounds("abc", lm)


# ------------------------------------------------------------- SmolLM2
EXACT_SMOLLM2 = {" Tokens": -18.54857, " tongueless": -24.68309, " Hypnopaturist": -45.68776}


@pytest.mark.parametrize("text", sorted(EXACT_SMOLLM2))
def test_smollm2_bracket_contains_exact(smollm2, text):
    b = marginal_bounds(text, smollm2, tolerance=1e-3)
    assert b.closed and b.lower <= EXACT_SMOLLM2[text] + 1e-4 <= b.upper + 2e-4


def test_smollm2_sentence_bracket_closes(smollm2):
    text = " The capital of France is Paris."
    b = marginal_bounds(text, smollm2, tolerance=1e-3, budget=2000)
    assert b.closed and b.width <= 1e-3
    assert b.lower >= smollm2.canonical_log_prob(text) - 1e-4
    assert compile_mdd(text, smollm2.vocab).count() == 21_719_040


@pytest.mark.slow
@pytest.mark.parametrize("text", [" Tokens", " tongueless", " cats"])
def test_smollm2_branch_and_bound_equals_exhaustive(smollm2, text):
    exact = exact_marginal(text, smollm2)
    result = most_likely(text, smollm2)
    assert result.optimal and result.tokens == exact.most_likely
    assert result.log_prob == pytest.approx(float(exact.log_probs[0]), abs=1e-3)
