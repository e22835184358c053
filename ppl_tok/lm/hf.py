"""Any ``transformers`` causal LM behind the :class:`~ppl_tok.lm.base.LanguageModel` interface.

A state's payload is ``(cache, row)``: the model's cache object from the batched
forward that produced the state, and the state's row in it. Extending a batch
of states gathers their rows into a fresh cache (so no cache is ever mutated
after it is shared) and runs one forward of ``[B, 1]`` new tokens.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from ..vocabulary import Vocabulary
from .base import LanguageModel, LMState


def _batch_tensors(layer: Any, batch: int) -> dict[str, torch.Tensor]:
    """The attributes of a cache layer that are per-sequence tensors (batch first)."""
    return {k: v for k, v in vars(layer).items()
            if torch.is_tensor(v) and v.dim() >= 2 and v.shape[0] == batch}


def _cache_batch(cache: Any) -> int:
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if torch.is_tensor(keys) and keys.dim() >= 2:
            return keys.shape[0]
    raise ValueError("cannot find the batch size of this cache")


def gather_cache(payloads: Sequence[tuple[Any, int]]) -> Any:
    """A new cache whose row ``i`` is row ``payloads[i][1]`` of cache ``payloads[i][0]``."""
    caches = [c for c, _ in payloads]
    first = caches[0]
    batch = _cache_batch(first)
    same = all(c is first for c in caches)
    rows = torch.tensor([r for _, r in payloads])
    new = copy.copy(first)
    new.layers = []
    for li, layer in enumerate(first.layers):
        fresh = copy.copy(layer)
        for name, value in _batch_tensors(layer, batch).items():
            if same:
                setattr(fresh, name, value.index_select(0, rows))
            else:
                parts = [getattr(c.layers[li], name)[r:r + 1] for c, r in payloads]
                setattr(fresh, name, torch.cat(parts))
        new.layers.append(fresh)
    return new


class HFLanguageModel(LanguageModel):
    """A Hugging Face causal LM and its tokenizer.

    :param model: a ``transformers`` causal LM (``AutoModelForCausalLM``).
    :param tokenizer: its tokenizer; the vocabulary is read from it.
    :param bos_id: the BOS id used for scoring (from the model card; tokenizers
        sometimes report the wrong one).
    """

    def __init__(self, model: Any, tokenizer: Any, bos_id: int | None, *, vocab: Vocabulary | None = None,
                 name: str | None = None, cache_size: int = 4096):
        vocab = vocab or Vocabulary.from_hf(tokenizer, name=name)
        super().__init__(vocab, bos_id, cache_size=cache_size, name=name or vocab.name)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device

    def _log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits.float(), dim=-1)

    @torch.inference_mode()
    def _prefill(self, tokens: tuple[int, ...]) -> tuple[torch.Tensor, Any]:
        if not tokens:
            raise ValueError(f"{self.name} needs a BOS id or a context to score the first token")
        ids = torch.tensor([tokens], device=self.device)
        out = self.model(input_ids=ids, use_cache=True)
        return self._log_softmax(out.logits[0, -1]), (out.past_key_values, 0)

    @torch.inference_mode()
    def _extend(self, payloads: list[Any], tokens: list[int]) -> tuple[torch.Tensor, list[Any]]:
        cache = gather_cache(payloads)
        ids = torch.tensor(tokens, device=self.device).unsqueeze(1)
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        new = out.past_key_values
        return self._log_softmax(out.logits[:, -1]), [(new, i) for i in range(len(tokens))]

    @torch.inference_mode()
    def log_prob(self, tokens: Sequence[int], context: str | Sequence[int] = "") -> float:
        """One forward of all of ``tokens`` on top of the (cached) context state."""
        tokens = list(tokens)
        state: LMState = self.initial(context)
        if len(tokens) <= 1:
            return super().log_prob(tokens, context)
        cache = gather_cache([state.payload])
        ids = torch.tensor([tokens[:-1]], device=self.device)
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        self.stats.forwards += len(tokens) - 1
        self.stats.calls += 1
        steps = torch.cat([state.log_probs.unsqueeze(0), self._log_softmax(out.logits[0])])
        return float(steps[torch.arange(len(tokens)), torch.tensor(tokens)].sum())
