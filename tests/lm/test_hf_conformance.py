"""The conformance suite: every causal LM family a researcher may bring, scored by ppl-tok against
``transformers``' own plain forward.

Each architecture is a tiny random model built from its config class at test time (2 layers, hidden 32,
initialiser spread 0.25, so positions, masks, windows and caches move a score by nats; windows of 4 tokens
where the family has one) over a byte-level BPE of 320 ids trained at test time
(:mod:`tests.tiny_tokenizers`). The reference (:class:`PlainLM`) runs one plain forward per prefix, one
sequence at a time, no cache, in float64 (float32 for mixture-of-experts models: transformers' grouped
expert kernels refuse float64). ppl-tok's numbers must match it on canonical and non-canonical
tokenizations, the exact marginal, a certified bracket, a ragged batch of contexts of different lengths
and the LM over strings' prefix probability; the serving path (:mod:`ppl_tok.lm.serving`) must be the
one docs/models.md lists.
"""

from __future__ import annotations

import math

import pytest
import torch

from ppl_tok import compile_mdd
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.search import marginal_bounds
from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.hf import HFLanguageModel
from ppl_tok.strings.state import initial
from tests.tiny_tokenizers import byte_level_tokenizer

V = 320
#: the sizes every tiny config gets (where its class has the attribute)
SIZES = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, head_dim=16, n_embd=32, n_layer=2, n_head=2, d_model=32, n_positions=128,
             max_position_embeddings=128, initializer_range=0.25, ffn_dim=64, num_layers=2, n_inner=64,
             moe_intermediate_size=32, num_experts=4, num_local_experts=4, n_routed_experts=4,
             num_experts_per_tok=2, pad_token_id=2, bos_token_id=0, eos_token_id=0)
W = 4  # the sliding / local window, shorter than the contexts
#: name -> (model_type, overrides, serving path, float32 only)
ARCHITECTURES: dict[str, tuple[str, dict, str, bool]] = {
    "gpt2": ("gpt2", {}, "pooled", False),
    "llama": ("llama", {}, "pooled", False),
    "qwen2": ("qwen2", {}, "pooled", False),
    "qwen2-window": ("qwen2", dict(use_sliding_window=True, sliding_window=W, max_window_layers=0), "pooled", False),
    "qwen3": ("qwen3", {}, "pooled", False),
    "mistral-window": ("mistral", dict(sliding_window=W), "pooled", False),
    "gpt-neox": ("gpt_neox", {}, "pooled", False),
    "gpt-j": ("gptj", dict(rotary_dim=8), "pooled", False),
    "codegen": ("codegen", dict(n_head=4, num_attention_heads=4, rotary_dim=4), "pooled", False),
    "opt": ("opt", dict(word_embed_proj_dim=32), "pooled", False),
    "bloom": ("bloom", {}, "pooled", False),
    "falcon": ("falcon", {}, "pooled", False),
    "falcon-alibi": ("falcon", dict(alibi=True), "pooled", False),
    "phi": ("phi", {}, "pooled", False),
    "phi3": ("phi3", {}, "pooled", False),
    "gemma": ("gemma", {}, "pooled", False),
    "gemma2-window": ("gemma2", dict(sliding_window=W), "pooled", False),
    "gemma3-window": ("gemma3_text", dict(sliding_window=W), "pooled", False),
    "cohere": ("cohere", {}, "pooled", False),
    "cohere2-window": ("cohere2", dict(sliding_window=W), "pooled", False),
    "olmo2": ("olmo2", {}, "pooled", False),
    "stablelm": ("stablelm", {}, "pooled", False),
    "starcoder2": ("starcoder2", {}, "pooled", False),
    "gpt-bigcode": ("gpt_bigcode", {}, "pooled", False),
    "gpt-neo-local": ("gpt_neo", dict(attention_types=[[["global", "local"], 1]], window_size=W), "pooled", False),
    "mixtral": ("mixtral", {}, "pooled", True),
    "deepseek-v3": ("deepseek_v3", dict(kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, head_dim=8, num_key_value_heads=2,
                                        v_head_dim=16, first_k_dense_replace=1, n_group=1, topk_group=1),
                    "pooled", True),
    "gpt-oss": ("gpt_oss", dict(sliding_window=W), "pooled", True),
    "mamba": ("mamba", dict(state_size=4, expand=2), "state", False),
    "mamba2": ("mamba2", dict(num_heads=4, head_dim=16, state_size=4, expand=2, n_groups=1, chunk_size=8),
               "state", False),
    "falcon-mamba": ("falcon_mamba", dict(state_size=4, expand=2), "state", False),
    "jamba": ("jamba", dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, mamba_d_state=4,
                            mamba_expand=2, use_mamba_kernels=False), "sequence", True),
    "bamba": ("bamba", dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=4, mamba_expand=2, mamba_n_groups=1,
                            attn_layer_indices=[1]), "sequence", False),
    "lfm2": ("lfm2", dict(layer_types=["conv", "full_attention"], block_ff_dim=64), "sequence", False),
    "qwen3-next": ("qwen3_next", dict(layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                                      linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8),
                   "sequence", True),
    "recurrent-gemma": ("recurrent_gemma", dict(lru_width=32, block_types=["recurrent", "attention"],
                                                attention_window_size=W), "sequence", False),
    "gemma3n": ("gemma3n_text", dict(num_hidden_layers=3, num_kv_shared_layers=1, sliding_window=W, laurel_rank=4,
                                     hidden_size_per_layer_input=8, vocab_size_per_layer_input=V,
                                     layer_types=["sliding_attention", "full_attention", "full_attention"],
                                     activation_sparsity_pattern=[0.0] * 3, altup_num_inputs=2), "sequence", False),
    "rwkv": ("rwkv", dict(attention_hidden_size=32, context_length=128), "sequence", False),
}


def build(name: str):
    """The tiny seeded model of ``name``, in float64 where the family allows it."""
    import transformers as tf
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type, overrides, _, f32 = ARCHITECTURES[name]
    config_cls = CONFIG_MAPPING[model_type]
    defaults = config_cls()
    settable = {k: v for k, v in SIZES.items()  # (a derived property such as Falcon's head_dim is not set)
                if hasattr(defaults, k) and not isinstance(getattr(config_cls, k, None), property)}
    config = config_cls(**{**settable, **overrides})
    torch.manual_seed(0)
    model = getattr(tf, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])(config).eval()
    return model if f32 else model.double()


class PlainLM(LanguageModel):
    """The reference: each prefix through the model alone, one plain forward, no cache, no batching."""

    ragged = False

    def __init__(self, model, vocab, bos_id):
        super().__init__(vocab, bos_id, name="plain")
        self.model = model

    @torch.inference_mode()
    def _prefill(self, keys):
        rows = [self.model(input_ids=torch.tensor([list(k)]), use_cache=False).logits[0, -1].double().log_softmax(-1)
                for k in keys]
        return torch.stack(rows), list(keys)

    def _extend(self, payloads, tokens):
        return self._prefill([tuple(p) + (int(t),) for p, t in zip(payloads, tokens)])


@pytest.fixture(scope="module")
def tokenizer():
    return byte_level_tokenizer(V)


TEXT, CONTEXT, LONG = " Paris", "The capital of France is", "Q: Where is the signal in tokenization space? A: in"


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_ppl_tok_matches_transformers_plain_forward(name, tokenizer):
    model = build(name)
    f32 = ARCHITECTURES[name][3]
    tol = 2e-3 if f32 else 1e-5
    lm = HFLanguageModel(model, tokenizer, 0, name=name)
    assert lm.serving == ARCHITECTURES[name][2]
    ref = PlainLM(model, lm.vocab, 0)
    assert len(lm.prefix_ids(LONG)) > 2 * W + 2  # the windows matter
    # canonical and a non-canonical tokenization, after a context
    canonical = lm.canonical(TEXT)
    assert lm.canonical_log_prob(TEXT, CONTEXT) == pytest.approx(ref.canonical_log_prob(TEXT, CONTEXT), abs=tol)
    mdd = compile_mdd(TEXT, lm.vocab)
    other = next(p for p in mdd.enumerate() if tuple(p) != tuple(canonical))
    assert lm.log_prob(other, CONTEXT) == pytest.approx(ref.log_prob(other, CONTEXT), abs=tol)
    # the exact marginal, and a certified bracket that holds it
    mine, truth = exact_marginal(TEXT, lm, context=CONTEXT), exact_marginal(TEXT, ref, context=CONTEXT)
    assert len(truth.tokenizations) == mdd.count() > 1
    assert mine.log_marginal == pytest.approx(truth.log_marginal, abs=tol)
    low, high = marginal_bounds(TEXT, lm, context=CONTEXT, tolerance=1e-2).certified
    assert low - tol <= truth.log_marginal <= high + tol
    # a ragged batch: contexts of different lengths (none, short, long, ids) in one call
    contexts = ["", CONTEXT, LONG, list(lm.vocab.encode(" in"))]
    seqs = [canonical, other, canonical, other]
    got, expected = lm.log_probs_many(seqs, contexts), ref.log_probs_many(seqs, contexts)
    assert got == pytest.approx(expected, abs=tol)
    # the LM over strings: the probability that the output starts with the text
    mine_p = initial(lm, TEXT, CONTEXT).prefix_log_prob().found
    ref_p = initial(ref, TEXT, CONTEXT).prefix_log_prob().found
    assert math.isfinite(ref_p) and mine_p == pytest.approx(ref_p, abs=tol)


def test_the_window_and_the_context_move_the_scores_by_nats(tokenizer):
    """The spread matters: at init 0.25 a context and a window change a score by far more than the tolerance (1e-5)."""
    windowed = HFLanguageModel(build("mistral-window"), tokenizer, 0, name="mistral-window")
    full = HFLanguageModel(build("llama"), tokenizer, 0, name="llama")  # the same weights (same seed), no window
    assert torch.equal(windowed.model.lm_head.weight, full.model.lm_head.weight)
    assert abs(full.canonical_log_prob(TEXT, LONG) - full.canonical_log_prob(TEXT)) > 0.5
    assert abs(windowed.canonical_log_prob(TEXT, LONG) - full.canonical_log_prob(TEXT, LONG)) > 0.5


def test_what_cannot_be_served_is_refused_at_load_in_one_line():
    from ppl_tok.lm.serving import check_servable

    class Vision(torch.nn.Module):
        config = type("C", (), {"is_encoder_decoder": False})()

        def forward(self, pixel_values=None):
            return pixel_values

    class Seq2Seq(torch.nn.Module):
        config = type("C", (), {"is_encoder_decoder": True})()

        def forward(self, input_ids=None, decoder_input_ids=None):
            return input_ids

    with pytest.raises(ValueError, match=r"^mine: Vision takes no input_ids .*cannot score it$"):
        check_servable(Vision(), "mine")
    with pytest.raises(ValueError, match=r"^mine: Seq2Seq is an encoder-decoder"):
        check_servable(Seq2Seq(), "mine")
