"""Any ``transformers`` causal LM behind the :class:`~ppl_tok.lm.base.LanguageModel` interface.

A state's payload is ``(cache, row)``: the model's cache object from the batched
forward that produced the state, and the state's row in it. Extending a batch
of states gathers their rows into a fresh cache (so no cache is ever mutated
after it is shared) and runs one forward of ``[B, 1]`` new tokens.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

import torch

from ..vocabulary import Vocabulary
from .base import LanguageModel, LMState


def _is_rows(value: Any, batch: int) -> bool:
    return torch.is_tensor(value) and value.dim() >= 2 and value.shape[0] == batch


def _batch_tensors(layer: Any, batch: int) -> dict[str, Any]:
    """The attributes of a cache layer that hold per-sequence tensors (batch first).

    Attention layers hold ``keys``/``values`` tensors; state-space layers (Mamba)
    hold dicts of ``conv_states``/``recurrent_states`` tensors.
    """
    out: dict[str, Any] = {}
    for k, v in vars(layer).items():
        if _is_rows(v, batch):
            out[k] = v
        elif isinstance(v, dict) and any(_is_rows(x, batch) for x in v.values()):
            out[k] = v
    return out


def _cache_batch(cache: Any) -> int:
    for layer in cache.layers:
        for v in vars(layer).values():
            values = v.values() if isinstance(v, dict) else [v]
            for x in values:
                if torch.is_tensor(x) and x.dim() >= 2:
                    return x.shape[0]
    raise ValueError("cannot find the batch size of this cache")


def _select(value: Any, rows: torch.Tensor | None, pick: list[tuple[Any, int]], get) -> Any:
    """Rows of a tensor (or of each tensor in a dict) for the new batch."""
    if isinstance(value, dict):
        return {k: (_select(x, rows, pick, lambda c, k=k: get(c)[k]) if torch.is_tensor(x) else x)
                for k, x in value.items()}
    if rows is not None:
        return value.index_select(0, rows)
    return torch.cat([get(c)[r:r + 1] for c, r in pick])


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
            setattr(fresh, name, _select(value, rows if same else None, list(payloads),
                                         lambda c, li=li, name=name: getattr(c.layers[li], name)))
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
        # Attention models take and return ``past_key_values``; Mamba-style models ``cache_params``.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "past_key_values" if "past_key_values" in params else "cache_params"

    def _forward(self, ids: torch.Tensor, cache: Any = None) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {"input_ids": ids, "use_cache": True}
        if cache is not None:
            kwargs[self._cache_arg] = cache
        out = self.model(**kwargs)
        return out.logits, getattr(out, self._cache_arg)

    def _log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits.float(), dim=-1)

    @torch.inference_mode()
    def _prefill(self, tokens: tuple[int, ...]) -> tuple[torch.Tensor, Any]:
        if not tokens:
            raise ValueError(f"{self.name} needs a BOS id or a context to score the first token")
        logits, cache = self._forward(torch.tensor([tokens], device=self.device))
        return self._log_softmax(logits[0, -1]), (cache, 0)

    @torch.inference_mode()
    def _extend(self, payloads: list[Any], tokens: list[int]) -> tuple[torch.Tensor, list[Any]]:
        ids = torch.tensor(tokens, device=self.device).unsqueeze(1)
        logits, new = self._forward(ids, gather_cache(payloads))
        return self._log_softmax(logits[:, -1]), [(new, i) for i in range(len(tokens))]

    @torch.inference_mode()
    def log_prob(self, tokens: Sequence[int], context: str | Sequence[int] = "") -> float:
        """One forward of all of ``tokens`` on top of the (cached) context state."""
        tokens = list(tokens)
        state: LMState = self.initial(context)
        if len(tokens) <= 1:
            return super().log_prob(tokens, context)
        logits, _ = self._forward(torch.tensor([tokens[:-1]], device=self.device), gather_cache([state.payload]))
        self.stats.forwards += len(tokens) - 1
        self.stats.calls += 1
        steps = torch.cat([state.log_probs.unsqueeze(0), self._log_softmax(logits[0])])
        return float(steps[torch.arange(len(tokens)), torch.tensor(tokens)].sum())
