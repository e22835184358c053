"""The one small interface every LM of ppl-tok implements.

An LM gives next-token log-probabilities for prefixes. Prefixes live in
:class:`LMState` objects that carry the backend's incremental state (a
transformer's KV cache), so extending a prefix by one token costs one forward
of that token; a prefix cache makes identical prefixes (particles on the same
path, a shared question) cost one forward in all.

A backend implements two methods:

* ``_prefill(tokens) -> (log_probs[V], payload)``: run a whole prefix;
* ``_extend(payloads, tokens) -> (log_probs[B, V], payloads)``: run one more
  token for a batch of states whose prefixes have the same length.

Everything else (caching, deduplication, grouping by length, scoring, the
canonical tokenization of a text) is shared here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..vocabulary import Vocabulary


@dataclass(eq=False)
class LMState:
    """A prefix (BOS and context included) and the LM's next-token log-probs after it."""

    tokens: tuple[int, ...]
    log_probs: torch.Tensor
    payload: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class LMStats:
    """Work counters: token positions run through the model, and cache hits."""

    forwards: int = 0
    calls: int = 0
    cache_hits: int = 0

    def reset(self) -> None:
        self.forwards = self.calls = self.cache_hits = 0


class LanguageModel(ABC):
    """An autoregressive LM over ``vocab`` with a KV-style state and a prefix cache.

    :param vocab: the vocabulary (token id -> bytes) of the LM.
    :param bos_id: the token every scored sequence starts with (``None``: none).
    :param cache_size: how many prefix states the cache keeps (LRU).
    """

    def __init__(self, vocab: Vocabulary, bos_id: int | None, cache_size: int = 4096, name: str = "lm"):
        if bos_id is not None and not 0 <= bos_id < len(vocab):
            raise ValueError(f"BOS id {bos_id} is outside the vocabulary of {len(vocab)} ids")
        self.vocab = vocab
        self.bos_id = bos_id
        self.name = name
        self.cache_size = cache_size
        self.stats = LMStats()
        self._cache: OrderedDict[tuple[int, ...], LMState] = OrderedDict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, |V|={len(self.vocab)}, bos={self.bos_id})"

    # ---------------------------------------------------------- backends
    @abstractmethod
    def _prefill(self, tokens: tuple[int, ...]) -> tuple[torch.Tensor, Any]:
        """Run a whole prefix; return next-token log-probs ``[V]`` and a payload."""

    @abstractmethod
    def _extend(self, payloads: list[Any], tokens: list[int]) -> tuple[torch.Tensor, list[Any]]:
        """Extend same-length prefixes by one token each; log-probs ``[B, V]`` and payloads."""

    # ------------------------------------------------------------- cache
    def _remember(self, state: LMState) -> LMState:
        self._cache[state.tokens] = state
        self._cache.move_to_end(state.tokens)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return state

    def _cached(self, key: tuple[int, ...]) -> LMState | None:
        state = self._cache.get(key)
        if state is not None:
            self._cache.move_to_end(key)
            self.stats.cache_hits += 1
        return state

    def clear_cache(self) -> None:
        self._cache.clear()

    # --------------------------------------------------------------- API
    def prefix_ids(self, context: str | Sequence[int] = "") -> tuple[int, ...]:
        """BOS followed by the canonical tokens of ``context`` (a string or ids)."""
        head = () if self.bos_id is None else (self.bos_id,)
        if isinstance(context, str):
            return head + (tuple(self.vocab.encode(context)) if context else ())
        return head + tuple(context)

    def state(self, tokens: Sequence[int]) -> LMState:
        """The state after ``tokens`` (from the cache, by extending a cached parent, or by prefill)."""
        key = tuple(tokens)
        hit = self._cached(key)
        if hit is not None:
            return hit
        parent = self._cache.get(key[:-1]) if key else None
        if parent is not None:
            return self.extend([parent], [key[-1]])[0]
        log_probs, payload = self._prefill(key)
        self.stats.forwards += len(key)
        self.stats.calls += 1
        return self._remember(LMState(key, log_probs, payload))

    def initial(self, context: str | Sequence[int] = "") -> LMState:
        """The state after BOS and ``context``."""
        return self.state(self.prefix_ids(context))

    def extend(self, states: Sequence[LMState], tokens: Sequence[int]) -> list[LMState]:
        """Extend each state by one token: one batched forward per prefix length.

        Identical (prefix, token) pairs and prefixes already in the cache cost nothing.
        """
        if len(states) != len(tokens):
            raise ValueError(f"{len(states)} states but {len(tokens)} tokens")
        out: list[LMState | None] = [None] * len(states)
        todo: dict[tuple[int, ...], list[int]] = {}
        for i, (s, t) in enumerate(zip(states, tokens)):
            key = s.tokens + (int(t),)
            hit = self._cached(key)
            if hit is not None:
                out[i] = hit
            else:
                todo.setdefault(key, []).append(i)
        by_length: dict[int, list[tuple[int, ...]]] = {}
        for key in todo:
            by_length.setdefault(len(key), []).append(key)
        for keys in by_length.values():
            parents = [states[todo[k][0]] for k in keys]
            log_probs, payloads = self._extend([p.payload for p in parents], [k[-1] for k in keys])
            self.stats.forwards += len(keys)
            self.stats.calls += 1
            for row, key in enumerate(keys):
                state = self._remember(LMState(key, log_probs[row], payloads[row]))
                for i in todo[key]:
                    out[i] = state
        return out  # type: ignore[return-value]

    def next_log_probs(self, prefixes: Sequence[Sequence[int]]) -> torch.Tensor:
        """Next-token log-probs ``[B, V]`` for a batch of prefixes (BOS included)."""
        return torch.stack([self.state(p).log_probs for p in prefixes])

    def log_prob(self, tokens: Sequence[int], context: str | Sequence[int] = "") -> float:
        """``log p(tokens | BOS, context)``: the sum of the next-token log-probs along ``tokens``."""
        state = self.initial(context)
        total = 0.0
        for i, t in enumerate(tokens):
            if i:
                state = self.extend([state], [tokens[i - 1]])[0]
            total += float(state.log_probs[t])
        return total

    def canonical(self, text: str) -> list[int]:
        """The canonical tokenization of ``text`` (the tokenizer's own encoding, taken literally)."""
        return self.vocab.encode(text)

    def canonical_log_prob(self, text: str, context: str | Sequence[int] = "") -> float:
        """``log p(v* | context)`` for the canonical tokenization ``v*`` of ``text``."""
        return self.log_prob(self.canonical(text), context)
