"""The transformers adapter (``ppl_tok/lm/hf.py``) on the bundled SmolLM2: sanity, and batched, incremental
and one-forward scoring giving the same log-probabilities."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok.lm.hf import length_groups

def test_smollm2_sanity_paris(smollm2):
    ctx = "The capital of France is"
    scores = {w: smollm2.canonical_log_prob(w, ctx) for w in [" Paris", " Berlin", " Tokyo"]}
    assert scores[" Paris"] > scores[" Berlin"] and scores[" Paris"] > scores[" Tokyo"]
    assert smollm2.bos_id == 0


def test_smollm2_one_forward_equals_incremental_states(smollm2):
    from ppl_tok.lm.base import LanguageModel

    tokens = smollm2.canonical(" tongueless")
    fast = smollm2.log_prob(tokens, "My dog is")
    slow = LanguageModel.log_prob(smollm2, tokens, "My dog is")
    assert fast == pytest.approx(slow, abs=1e-4)
    assert math.isfinite(fast)


def test_smollm2_batched_extend_equals_one_by_one(smollm2):
    smollm2.clear_cache()
    root = smollm2.initial("Hello")
    toks = [smollm2.vocab.ids_of(w)[0] for w in [" world", " there", ","]]
    batch = smollm2.extend([root] * 3, toks)
    batch2 = smollm2.extend(batch, [toks[0]] * 3)  # two steps, from one shared cache
    smollm2.clear_cache()
    for t, b1, b2 in zip(toks, batch, batch2):
        one = smollm2.extend([smollm2.initial("Hello")], [t])[0]
        two = smollm2.extend([one], [toks[0]])[0]
        assert torch.allclose(one.log_probs, b1.log_probs, atol=1e-4)
        assert torch.allclose(two.log_probs, b2.log_probs, atol=1e-4)
        smollm2.clear_cache()


def test_smollm2_mixed_length_batches_are_grouped(smollm2):
    smollm2.clear_cache()
    a = smollm2.initial("A")
    b = smollm2.initial("A longer context")
    t = smollm2.vocab.ids_of(" x")[0]
    out = smollm2.extend([a, b], [t, t])
    assert len(out[0]) == len(a) + 1 and len(out[1]) == len(b) + 1
    ref = smollm2.state(b.tokens + (t,))
    assert ref is out[1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 80), min_size=0, max_size=40), st.integers(1, 16))
def test_length_groups_cover_every_item_once_and_pad_little(lengths, size):
    """Canonical scoring's batches: every item in one group, none larger than ``size``, and each group's
    padding (its members times its longest) within 1.25 times its real positions plus 32."""
    items = [100 + k for k in range(len(lengths))]
    groups = length_groups(items, lengths, size)
    assert sorted(i for g in groups for i in g) == items
    for g in groups:
        real = [lengths[i - 100] for i in g]
        assert 1 <= len(g) <= size and real == sorted(real, reverse=True)
        assert len(g) * real[0] <= 1.25 * sum(real) + 32
    # equal lengths fill whole groups
    assert [len(g) for g in length_groups(list(range(10)), [7] * 10, 4)] == [4, 4, 2]


def test_a_model_whose_forward_names_its_cache_cache_is_refused_in_one_line():
    """transformers 5.24 renamed ``past_key_values``/``cache_params`` to ``cache``: read as a recurrent model, an
    attention model gave wrong log-probs (log p(" Tokens") -27.39 instead of -18.55), so it is refused by name."""
    from ppl_tok.lm.hf import HFLanguageModel
    from ppl_tok.vocabulary import Vocabulary

    class Renamed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(2, 3)
            self.config = type("Config", (), {"num_hidden_layers": 1})()

        def forward(self, input_ids=None, cache=None, use_cache=None):
            raise AssertionError("never called")

    vocab = Vocabulary.from_tokens([None, "a", "b"])
    with pytest.raises(ValueError, match=r"names the cache argument `cache`.*transformers>=5.23,<5.24"):
        HFLanguageModel(Renamed(), None, 0, vocab=vocab, name="renamed")
