"""The second bundled model: Gemma 3 270M (SentencePiece with byte fallback, sliding-window attention)."""

import math

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma():
    from ppl_tok import load_lm

    return load_lm("gemma3-270m")


def test_gemma_card_and_sanity(gemma):
    assert gemma.bos_id == 2
    ctx = "The capital of France is"
    scores = {w: gemma.canonical_log_prob(w, ctx) for w in [" Paris", " Berlin", " Tokyo"]}
    assert scores[" Paris"] > max(scores[" Berlin"], scores[" Tokyo"])


def test_gemma_batched_states_match_one_by_one(gemma):
    from ppl_tok.lm.base import LanguageModel

    tokens = gemma.canonical(" tongueless")
    fast = gemma.log_prob(tokens, "My dog is")
    slow = LanguageModel.log_prob(gemma, tokens, "My dog is")
    assert fast == pytest.approx(slow, abs=1e-3) and math.isfinite(fast)
    gemma.clear_cache()
    root = gemma.initial("Hello")
    toks = [gemma.vocab.ids_of(w)[0] for w in [" world", " there"]]
    batch = gemma.extend([root, root], toks)
    gemma.clear_cache()
    for t, b in zip(toks, batch):
        one = gemma.extend([gemma.initial("Hello")], [t])[0]
        assert torch.allclose(one.log_probs, b.log_probs, atol=1e-3)
        gemma.clear_cache()


def test_gemma_marginal_bracket_contains_enumeration(gemma):
    from ppl_tok.infer.exact import exact_marginal
    from ppl_tok.infer.search import marginal_bounds

    exact = exact_marginal(" Tokens", gemma)
    assert exact.count == 60
    b = marginal_bounds(" Tokens", gemma, tolerance=1e-3)
    assert b.lower <= exact.log_marginal + 1e-4 and exact.log_marginal <= b.upper + 1e-4
