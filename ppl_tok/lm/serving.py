"""How :class:`~ppl_tok.lm.hf.HFLanguageModel` serves a ``transformers`` causal LM, chosen from its forward's
arguments and its config (docs/models.md, "Architectures", lists what each family gets):

* ``pooled``: pure attention (every layer full, sliding or chunked attention, its own keys and values):
  the shared KV pool (:mod:`ppl_tok.lm.kvpool`), ragged batches of any prefixes in one forward;
* ``state``: a state-space model whose forward takes ``cache_params`` (Mamba, Mamba2, FalconMamba): the
  model's own recurrent cache per prefix, extensions grouped by length (a recurrent state is not exact
  under padding);
* ``sequence``: anything else that is causal (hybrids of attention with convolution or SSM layers, whose
  caches the pool cannot stand in for: Jamba, Bamba, LFM2, Qwen3-Next, Zamba; recurrent designs with a
  cache of their own: RecurrentGemma, RWKV, xLSTM; layers that share another layer's keys: Gemma-3n): one
  full forward of each sequence, no cache, batched by equal length (no padding, so exact);
  ``O(n^2)`` token-forwards for a prefix of ``n``, the price of serving what has no poolable cache.

A model whose forward takes no ``input_ids``, or an encoder-decoder, is refused at load by
:func:`check_servable` with one line naming it.
"""

from __future__ import annotations

import inspect
from typing import Any

SERVING = ("pooled", "state", "sequence")

#: config attributes that name non-attention layers (a hybrid); any value that is not attention means one
_LAYER_KINDS = ("layer_types", "layers_block_type", "block_types", "layer_block_types")
_ATTENTION = {"full_attention", "sliding_attention", "chunked_attention", "attention", "global", "local",
              "sliding_window", "full"}


def _text_config(model: Any) -> Any:
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _non_attention_layers(config: Any) -> list[str]:
    """The layer kinds a config names that are not attention (empty: pure attention, or none named)."""
    odd: list[str] = []
    for name in _LAYER_KINDS:
        kinds = getattr(config, name, None)
        if isinstance(kinds, (list, tuple)):
            odd += [str(k) for k in kinds if str(k).lower() not in _ATTENTION]
    return odd


def serving_path(model: Any) -> str:
    """``pooled``, ``state`` or ``sequence`` for ``model`` (the module's rule)."""
    params = inspect.signature(model.forward).parameters
    if "past_key_values" not in params:
        return "state" if "cache_params" in params else "sequence"
    config = _text_config(model)
    if getattr(model, "_is_stateful", False) or _non_attention_layers(config):
        return "sequence"  # a hybrid: its layers keep convolution / SSM state beside keys and values
    if getattr(config, "num_kv_shared_layers", 0):
        return "sequence"  # later layers read earlier layers' keys (Gemma-3n): no per-layer pool entry
    if getattr(config, "attn_layer_period", None) or getattr(config, "hybrid_override_pattern", None):
        return "sequence"
    return "pooled"


def check_servable(model: Any, name: str) -> None:
    """Refuse, in one line naming the architecture and why, a model ppl-tok cannot score."""
    arch = type(model).__name__
    params = inspect.signature(model.forward).parameters
    if "input_ids" not in params:
        raise ValueError(f"{name}: {arch} takes no input_ids (not a text causal LM): ppl-tok cannot score it")
    if getattr(_text_config(model), "is_encoder_decoder", False):
        raise ValueError(f"{name}: {arch} is an encoder-decoder: ppl-tok scores causal LMs only")
