"""Any transformers causal LM: the KV/state handling checked on tiny random models of three families.

The tiny models live on ``PPL_TOK_TEST_DEVICE`` (default ``cpu``; ``make gpu-check`` sets ``cuda``):
the tests that build them are the suite's device-parametrised subset.
"""

import os

import pytest
import torch

from ppl_tok import Vocabulary
from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.hf import HFLanguageModel

VOCAB = Vocabulary.from_tokens([None] + [chr(97 + i) for i in range(15)])
#: where the tiny models run
TEST_DEVICE = torch.device(os.environ.get("PPL_TOK_TEST_DEVICE", "cpu"))


def tiny(family: str, device: torch.device | str = TEST_DEVICE):
    """A tiny randomly initialised model of ``family`` (seeded) on ``device``."""
    return _tiny(family).to(device)


def _tiny(family: str):
    import transformers as tf

    torch.manual_seed(0)
    if family == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=16, n_embd=16, n_layer=2, n_head=2))
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
                                                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1))
    if family == "gemma3":
        return tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
                                                        num_hidden_layers=2, num_attention_heads=2,
                                                        num_key_value_heads=1, head_dim=8, sliding_window=4))
    return tf.MambaForCausalLM(tf.MambaConfig(vocab_size=16, hidden_size=16, state_size=4, num_hidden_layers=2,
                                              expand=2))


@pytest.fixture(params=["gpt2", "llama", "gemma3", "mamba"])
def lm(request):
    return HFLanguageModel(tiny(request.param), None, 0, vocab=VOCAB, name=request.param)


def full_forward_log_prob(lm, ids):
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids], device=lm.device)).logits[0].float().log_softmax(-1)
    return sum(float(logits[i, ids[i + 1]]) for i in range(len(ids) - 1))


def test_incremental_states_equal_a_full_forward(lm):
    context, tokens = [1, 2, 3, 4, 5, 6], [3, 5, 7, 2, 9]  # longer than Gemma's window of 4
    expected = full_forward_log_prob(lm, [0] + context + tokens)  # BOS = 0
    assert lm.log_prob(tokens, context) == pytest.approx(expected - full_forward_log_prob(lm, [0] + context), abs=1e-4)
    assert LanguageModel.log_prob(lm, tokens, context) == pytest.approx(lm.log_prob(tokens, context), abs=1e-4)


def test_batched_extension_equals_one_at_a_time_and_never_mutates(lm):
    root = lm.initial([1, 2])
    before = root.log_probs.clone()
    first = lm.extend([root, root, root], [3, 4, 3])
    assert first[0] is first[2]  # identical (prefix, token) computed once
    second = lm.extend(first, [5, 6, 7])
    third = lm.extend([second[1], second[0]], [8, 8])
    lm.clear_cache()
    for path, state in [((3, 5), second[0]), ((4, 6), second[1]), ((4, 6, 8), third[0]), ((3, 5, 8), third[1])]:
        assert torch.allclose(lm.state((0, 1, 2) + path).log_probs, state.log_probs, atol=1e-5)
        lm.clear_cache()
    assert torch.allclose(root.log_probs, before, atol=1e-5)  # dropped by clear_cache, recomputed
    # the root's cache still extends correctly after all that
    again = lm.extend([root], [3])[0]
    assert torch.allclose(again.log_probs, first[0].log_probs, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_a_half_precision_model_gets_an_fp32_head(family):
    from ppl_tok.lm.hf import fp32_head

    model = tiny(family).to(torch.bfloat16)
    ids = torch.tensor([[0, 3, 5, 7]], device=TEST_DEVICE)
    with torch.inference_mode():
        hidden = model.model(input_ids=ids).last_hidden_state
        before = model(input_ids=ids).logits
    assert before.dtype == torch.bfloat16 and fp32_head(model) and not fp32_head(model)  # once
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16  # a tied embedding stays in bf16
    with torch.inference_mode():
        after = model(input_ids=ids).logits
        exact = hidden.float() @ model.get_output_embeddings().weight.T
    assert after.dtype == torch.float32
    if family == "llama":  # (Gemma 3 soft-caps its logits after the head)
        assert torch.allclose(after, exact, atol=1e-5)
    assert torch.allclose(after, before.float(), atol=0.1)  # bf16 rounding only


def test_state_space_prefill_is_one_forward_per_length():
    model = tiny("mamba")
    forwards = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    lm = HFLanguageModel(model, None, 0, vocab=VOCAB, name="mamba")
    keys = [(0, 1, 2), (0, 3, 4), (0, 5), (0, 6, 7)]
    states = lm.states(keys)
    assert len(forwards) == 2  # lengths 3 and 2
    grown = lm.extend(states, [8, 9, 10, 11])
    for key, state, child in zip(keys, states, grown):
        alone = HFLanguageModel(model, None, 0, vocab=VOCAB, name="mamba")
        assert torch.allclose(alone.state(key).log_probs, state.log_probs, atol=1e-5)
        assert torch.allclose(alone.state(child.tokens).log_probs, child.log_probs, atol=1e-5)


def test_log_softmax_is_in_place_on_the_cpu_only_for_a_whole_tensor():
    """The forward's own logits are overwritten (same values); a row of a larger tensor is copied out, so a
    state's row never keeps a whole ``[B, T, V]`` alive."""
    lm = HFLanguageModel(tiny("llama"), None, 0, vocab=VOCAB, name="llama")
    logits = torch.randn(3, 1, 16, device=lm.device) * 4
    expected = torch.log_softmax(logits[:, 0], -1)
    rows = lm._log_softmax(logits[:, 0])
    assert torch.equal(rows, expected)
    assert (rows.data_ptr() == logits.data_ptr()) == (lm.device.type == "cpu")
    big = torch.randn(3, 5, 16, device=lm.device)
    last = lm._log_softmax(big[:, -1])
    assert torch.equal(last, torch.log_softmax(big[:, -1], -1))
    assert last.untyped_storage().nbytes() == last.nbytes  # its own storage, not the [3, 5, 16] one
