"""The one small interface every LM of ppl-tok implements, and the engine behind it.

An LM gives next-token log-probabilities for prefixes. Prefixes live in
:class:`LMState` objects that carry the backend's incremental state (for a
transformer, its entries in a shared KV pool, :mod:`ppl_tok.lm.kvpool`), so
extending a prefix by one token costs one token-forward; a prefix cache runs
identical prefixes (particles on the same path, a question shared by its
answers) once.

Words: a *forward call* runs a batch of rows through the model (one backend
call, ``lm.stats.calls``); it runs one *token-forward* per token position it
computes (``lm.stats.forwards``). A state's next-token *row* is ``[V]``; the
``[B, V]`` *rows* of one call are shared by the states it made. *Block* means
only a KV pool block (:mod:`ppl_tok.lm.kvpool`, ``EngineConfig.kv_block_bytes``).

A backend implements three methods:

* ``_prefill(keys) -> (rows[B, V], payloads)``: run whole prefixes (any lengths);
* ``_extend(payloads, tokens) -> (rows[B, V], payloads)``: run one more token for
  a batch of states. A backend with ``ragged = True`` takes prefixes of different
  lengths in one call (padding and masks are its business); otherwise the
  engine groups the batch by length;
* ``_recompute(states) -> rows[B, V]``: the next-token log-probs of states whose
  row was dropped from memory.

Everything else is shared here: the prefix cache (bounded in bytes), the row
cache (next-token rows are ``[V]`` tensors on the model's device and are the
largest thing a state holds: they are kept in their own LRU and dropped first;
the few log-probs a caller asked for are kept in ``state.known``), batching
(at most ``max_batch`` rows per forward call), scoring, and the canonical
tokenization of a text. Only what the caller asks for crosses to the host:
:meth:`LanguageModel.token_log_probs` gathers the requested entries on the
device and copies ``[B, K]`` numbers, never a ``[B, V]`` row.
"""

from __future__ import annotations

import gc
import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ppl_tok.common.heap import release_free_memory  # noqa: F401 - the engine's, re-exported
from ppl_tok.common.sampling import inverse_cdf
from ppl_tok.vocabulary import Vocabulary
from ppl_tok.lm.config import EngineConfig
from ppl_tok.lm.device import to_device, to_device_all, to_host
from ppl_tok.lm.sequences import SequenceScores
from ppl_tok.lm.spec import LMSpec


def model_window(lm: Any) -> int | None:
    """The model's context length in token positions (``max_position_embeddings``); ``None``: no limit known."""
    value = getattr(getattr(getattr(lm, "model", None), "config", None), "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


@dataclass(eq=False)
class LMState:
    """A prefix (BOS and context included) and what the LM says about the next token.

    ``known`` holds the next-token log-probs fetched so far (token -> float);
    :attr:`log_probs` is the full row ``[V]`` (on the model's device), recomputed
    if it was dropped from memory. ``rows`` is the ``[B, V]`` tensor of the forward
    call that computed the state (shared with the other states of that call; ``None``
    once dropped) and ``index`` the state's row in it.
    """

    tokens: tuple[int, ...]
    payload: Any = field(default=None, repr=False)
    rows: torch.Tensor | None = field(default=None, repr=False)
    index: int = 0
    known: dict[int, float] = field(default_factory=dict, repr=False)
    lm: LanguageModel | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def row(self) -> torch.Tensor | None:
        """The held next-token row (``None`` if it was dropped): row ``index`` of ``rows``."""
        return None if self.rows is None else self.rows[self.index]

    @property
    def log_probs(self) -> torch.Tensor:
        """The next-token log-probs ``[V]`` after this prefix."""
        if self.rows is None:
            self.lm.ensure_rows([self])
        return self.row


@dataclass
class LMStats:
    """Work counters of an LM.

    ``forwards``: token-forwards, the token positions run through the model (a prefill of ``n`` tokens counts
    ``n``, an extension 1); ``calls``: forward calls, the batched backend calls that ran them (one call runs many
    token-forwards); ``cache_hits``: states found in the prefix cache; ``recomputed``: rows computed again after
    the row budget dropped them.
    """

    forwards: int = 0
    calls: int = 0
    cache_hits: int = 0
    recomputed: int = 0

    def reset(self) -> None:
        self.forwards = self.calls = self.cache_hits = self.recomputed = 0


class LanguageModel(SequenceScores, ABC):
    """An autoregressive LM over ``vocab`` with incremental states and a prefix cache.

    :param vocab: the vocabulary (token id -> bytes) of the LM.
    :param bos_id: the token every scored sequence starts with (``None``: none).
    :param config: memory and batching limits (:class:`EngineConfig`).
    """

    #: whether ``_extend`` takes prefixes of different lengths in one call
    ragged: bool = True

    def __init__(self, vocab: Vocabulary, bos_id: int | None, name: str = "lm", config: EngineConfig | None = None):
        if bos_id is not None and not 0 <= bos_id < len(vocab):
            raise ValueError(f"BOS id {bos_id} is outside the vocabulary of {len(vocab)} ids")
        self.vocab = vocab
        self.bos_id = bos_id
        self.name = name
        #: how the LM was loaded (set by :func:`~ppl_tok.lm.cards.load_lm`; ``None``: built directly)
        self.spec: LMSpec | None = None
        self.config = config or EngineConfig()
        self.stats = LMStats()
        self._cache: OrderedDict[tuple[int, ...], LMState] = OrderedDict()
        self._cache_used = 0
        self._rows: OrderedDict[int, LMState] = OrderedDict()
        self._rows_used = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, |V|={len(self.vocab)}, bos={self.bos_id})"

    # ---------------------------------------------------------- backends
    @abstractmethod
    def _prefill(self, keys: list[tuple[int, ...]]) -> tuple[torch.Tensor, list[Any]]:
        """Run whole prefixes; next-token log-probs ``[B, V]`` after each, and payloads."""

    @abstractmethod
    def _extend(self, payloads: list[Any], tokens: list[int]) -> tuple[torch.Tensor, list[Any]]:
        """Extend prefixes by one token each; log-probs ``[B, V]`` and payloads."""

    def _recompute(self, states: list[LMState]) -> torch.Tensor:
        """Next-token rows ``[B, V]`` of states whose row was dropped (default: prefill again)."""
        return self._prefill([s.tokens for s in states])[0]

    def _state_bytes(self, state: LMState) -> int:
        """What one cached prefix costs beyond its parent (a backend's KV entry for one token)."""
        return self.position_bytes()

    def position_bytes(self) -> int:
        """The memory one more token position costs (a transformer: its KV entries in every layer)."""
        return 64

    # ------------------------------------------------------------- caches
    def _new_state(self, key: tuple[int, ...], rows: torch.Tensor, index: int, payload: Any,
                   trim: bool = True) -> LMState:
        """A cached state on row ``index`` of ``rows``; ``trim=False``: the caller trims the rows once the call's
        states are all held (:meth:`_trim_rows` with ``reading=rows``: the same rows dropped as trimming after each)."""
        state = LMState(key, payload, rows, index, lm=self)
        self._hold_row(state, trim)
        self._cache[key] = state
        self._cache_used += self._state_bytes(state)
        while self._cache_used > self.config.cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cache_used -= self._state_bytes(old)
        return state

    @staticmethod
    def _row_bytes(state: LMState) -> int:
        return state.rows.shape[-1] * state.rows.element_size()

    def _hold_row(self, state: LMState, trim: bool = True) -> None:
        self._rows[id(state)] = state
        self._rows_used += self._row_bytes(state)
        if trim:
            self._trim_rows(state.rows)

    def _trim_rows(self, reading: torch.Tensor | None = None) -> None:
        """Drop the oldest rows beyond the budget (never those of ``reading``, the call being read).

        Rows are held in call order, so trimming once after a call's states are all held drops exactly the rows
        that trimming after each state would (the budget is strictest with all of them held)."""
        budget, held = self.config.row_bytes, self._rows
        while self._rows_used > budget and len(held) > 1:
            if reading is not None and next(iter(held.values())).rows is reading:
                break
            _, old = held.popitem(last=False)
            self._rows_used -= self._row_bytes(old)
            old.rows = None

    @contextmanager
    def row_budget(self, row_bytes: int) -> Iterator[None]:
        """Within the block keep up to ``row_bytes`` of next-token rows (at least ``config.row_bytes``), then
        trim to the budget: for rows one forward computes and a longer walk reads (the canonical rows of
        surprisal texts), which the budget would drop before they are read and recompute one call each."""
        old = self.config
        if row_bytes > old.row_bytes:
            self.config = replace(old, row_bytes=int(row_bytes))
        try:
            yield
        finally:
            self.config = old
            self._trim_rows()

    def _cached(self, key: tuple[int, ...]) -> LMState | None:
        state = self._cache.get(key)
        if state is not None:
            self._cache.move_to_end(key)
            self.stats.cache_hits += 1
        return state

    def forget(self, prefixes: Sequence[Sequence[int]]) -> None:
        """Drop the states after ``prefixes`` and their rows from the caches (KV entries go with their last holder)."""
        for state in filter(None, (self._cache.pop(k, None) for k in {tuple(map(int, p)) for p in prefixes})):
            self._cache_used -= self._state_bytes(state)
            if self._rows.pop(id(state), None) is not None:
                self._rows_used, state.rows = self._rows_used - self._row_bytes(state), None

    def clear_cache(self) -> None:
        """Forget every cached prefix and row; memory no live state holds is freed.

        The states hold no reference cycles, so dropping them frees their tensors at once; the collection of the
        two young generations (about 2 ms) only catches a cycle the last call made. A full ``gc.collect()`` walks
        the whole heap, which torch and transformers make about 400,000 objects: 0.2 s a call on a loaded 2-core
        machine, a quarter of a short ``marginals`` call, for the same resident memory afterwards (measured with
        ``tests/suites/test_hardening.py``'s RSS script)."""
        for state in self._rows.values():
            state.rows = None
        self._cache.clear()
        self._rows.clear()
        self._cache_used = self._rows_used = 0
        gc.collect(1)
        release_free_memory()

    def has_state(self, tokens: Sequence[int]) -> bool:
        """Whether the state after ``tokens`` is cached with its row (reading it costs no forward); no LRU touch."""
        state = self._cache.get(tuple(int(t) for t in tokens))
        return state is not None and state.rows is not None

    def ensure_rows(self, states: Sequence[LMState]) -> None:
        """Recompute, in batched calls, the rows of ``states`` that the row budget dropped."""
        missing = list({id(s): s for s in states if s.rows is None}.values())
        for lo in range(0, len(missing), self.config.max_batch):
            chunk = missing[lo: lo + self.config.max_batch]
            rows = self._recompute(chunk)
            self.stats.recomputed += len(chunk)
            for r, s in enumerate(chunk):
                s.rows, s.index = rows, r
                self._hold_row(s, trim=False)
            self._trim_rows(rows)

    # --------------------------------------------------------------- API
    def prefix_ids(self, context: str | Sequence[int] = "") -> tuple[int, ...]:
        """BOS followed by the canonical tokens of ``context`` (a string or ids); a string starts the sequence, so
        it gets the tokenizer's dummy-prefix space (:meth:`~ppl_tok.vocabulary.Vocabulary.sequence_start`)."""
        head = () if self.bos_id is None else (self.bos_id,)
        if isinstance(context, str):
            try:
                return head + (tuple(self.vocab.encode(self.vocab.sequence_start(context))) if context else ())
            except ValueError as err:
                raise type(err)(f"context: {err}") from err
        ids = tuple(int(t) for t in context)
        for t in ids:
            if not 0 <= t < len(self.vocab):
                raise ValueError(f"context id {t} is outside the vocabulary of {len(self.vocab)} ids")
        return head + ids

    def states(self, prefixes: Sequence[Sequence[int]]) -> list[LMState]:
        """The states after each prefix: from the cache, by extending a cached parent, or by one batched prefill."""
        keys = [tuple(p) for p in prefixes]
        out: dict[tuple[int, ...], LMState] = {}
        todo: list[tuple[int, ...]] = []
        for key in dict.fromkeys(keys):
            hit = self._cached(key)
            if hit is not None:
                out[key] = hit
            elif key and key[:-1] in self._cache:
                out[key] = self.extend([self._cache[key[:-1]]], [key[-1]])[0]
            else:
                todo.append(key)
        for lo in range(0, len(todo), self.config.max_batch):
            chunk = todo[lo: lo + self.config.max_batch]
            rows, payloads = self._prefill(chunk)
            self.stats.forwards += sum(len(k) for k in chunk)
            self.stats.calls += 1
            for r, (key, payload) in enumerate(zip(chunk, payloads)):
                out[key] = self._new_state(key, rows, r, payload, trim=False)
            self._trim_rows(rows)
        return [out[k] for k in keys]

    def state(self, tokens: Sequence[int]) -> LMState:
        """The state after ``tokens``."""
        return self.states([tokens])[0]

    def initial(self, context: str | Sequence[int] = "") -> LMState:
        """The state after BOS and ``context``."""
        return self.state(self.prefix_ids(context))

    def extend(self, states: Sequence[LMState], tokens: Sequence[int],
               want: Sequence[Sequence[int]] | None = None) -> list[LMState]:
        """Extend each state by one token, in as few forward calls as the backend allows.

        Identical (prefix, token) pairs and prefixes already in the cache cost nothing.
        ``want[i]``: tokens whose log-probs after the new state ``i`` the caller will
        ask for; they are gathered right after each forward call, while its rows are in
        memory (so a row budget smaller than one batch never forces a recomputation).
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
        groups: dict[int, list[tuple[int, ...]]] = {}
        for key in todo:
            groups.setdefault(0 if self.ragged else len(key), []).append(key)
        for keys in groups.values():
            for lo in range(0, len(keys), self.config.max_batch):
                chunk = keys[lo: lo + self.config.max_batch]
                parents = [states[todo[k][0]] for k in chunk]
                rows, payloads = self._extend([p.payload for p in parents], [k[-1] for k in chunk])
                self.stats.forwards += len(chunk)
                self.stats.calls += 1
                made = []
                for r, (key, payload) in enumerate(zip(chunk, payloads)):
                    state = self._new_state(key, rows, r, payload, trim=False)
                    made.append(state)
                    for i in todo[key]:
                        out[i] = state
                self._trim_rows(rows)
                if want is not None:
                    self.token_log_probs(made, [want[todo[k][0]] for k in chunk])
        return out  # type: ignore[return-value]

    def token_log_probs(self, states: Sequence[LMState], tokens: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """``out[i][k] = log p(tokens[i][k] | states[i])`` as float64 CPU tensors.

        Entries already fetched come from ``state.known``; the rest are gathered
        on the device in one indexing operation and only they are copied to the host.
        """
        self._fetch(states, tokens)
        return [torch.tensor([s.known[int(t)] for t in ts], dtype=torch.float64) for s, ts in zip(states, tokens)]

    def token_log_prob_table(self, states: Sequence[LMState], tokens: Sequence[Sequence[int]],
                             width: int | None = None) -> torch.Tensor:
        """:meth:`token_log_probs` as one ``[B, width]`` float64 CPU tensor, row ``i`` padded with ``-inf`` after
        ``len(tokens[i])`` entries (``width``: at least the longest list): the same numbers, one tensor made
        for the whole batch instead of one per state."""
        self._fetch(states, tokens)
        width = max((len(ts) for ts in tokens), default=0) if width is None else width
        pad = [-math.inf] * width
        return torch.tensor([[s.known[int(t)] for t in ts] + pad[len(ts):] for s, ts in zip(states, tokens)],
                            dtype=torch.float64).reshape(len(states), width)

    def _fetch(self, states: Sequence[LMState], tokens: Sequence[Sequence[int]]) -> None:
        """Put ``log p(t | s)`` for every ``t`` of ``tokens[i]`` in ``states[i].known``, gathering the missing
        entries on the device (recomputing the rows the budget dropped)."""
        if len(states) != len(tokens):
            raise ValueError(f"{len(states)} states but {len(tokens)} token lists")
        need = list({id(s): s for s, ts in zip(states, tokens) if any(int(t) not in s.known for t in ts)}.values())
        if need:
            wanted: dict[int, set[int]] = {id(s): set() for s in need}
            for s, ts in zip(states, tokens):
                if id(s) in wanted:
                    wanted[id(s)].update(int(t) for t in ts)
            for lo in range(0, len(need), self.config.max_batch):
                chunk = need[lo: lo + self.config.max_batch]
                # read the rows in memory first, then recompute the dropped ones and read them at once
                self._gather([s for s in chunk if s.rows is not None], wanted)
                missing = [s for s in chunk if s.rows is None]
                if missing:
                    self.ensure_rows(missing)
                    self._gather(missing, wanted)

    @staticmethod
    def _gather(states: list[LMState], wanted: dict[int, set[int]]) -> None:
        """Copy the wanted entries of the states' rows to ``state.known``: one gather per forward call's rows."""
        calls: dict[int, list[LMState]] = {}
        for s in states:
            calls.setdefault(id(s.rows), []).append(s)
        for group in calls.values():
            held = group[0].rows
            lists = [sorted(wanted[id(s)]) for s in group]
            width = max(len(ts) for ts in lists)
            pad = [0] * width
            cols = torch.tensor([ts + pad[len(ts):] for ts in lists], dtype=torch.long).reshape(len(group), width)
            rows = torch.tensor([s.index for s in group], dtype=torch.long)
            rows, cols = to_device_all([rows, cols], held.device)
            picked = to_host(held[rows.unsqueeze(1), cols].double(), "log-probs").tolist()
            for s, ts, got in zip(group, lists, picked):
                s.known.update(zip(ts, got))

    def sample_tokens(self, states: Sequence[LMState], uniforms: torch.Tensor) -> torch.Tensor:
        """One token per state from its full next-token distribution, by inverse CDF at ``uniforms``.

        Runs on the device; records each drawn token's log-prob in ``state.known``.
        """
        groups: dict[int, list[int]] = {}
        for i, s in enumerate(states):
            groups.setdefault(id(s), []).append(i)
        distinct = [states[members[0]] for members in groups.values()]
        self.ensure_rows(distinct)
        width = max(len(m) for m in groups.values())
        u = torch.zeros(len(distinct), width, dtype=torch.float64)  # row r: the uniforms of state r's particles
        for r, members in enumerate(groups.values()):
            u[r, : len(members)] = uniforms[members].double()
        # a [S, V] CDF per chunk of distinct states within the row budget; one read of all the draws
        vocab = len(self.vocab) if distinct[0].rows is None else distinct[0].rows.shape[-1]
        size = max(1, self.config.row_bytes // (8 * vocab))
        found = []
        for lo in range(0, len(distinct), size):
            held = []
            for state in distinct[lo: lo + size]:
                if state.rows is None:  # dropped by the row budget while others were recomputed
                    self.ensure_rows([state])
                held.append(state.row)
            rows = torch.stack(held)
            cdf = rows.double().exp().cumsum(-1)
            picks = inverse_cdf(cdf, to_device(u[lo: lo + size], rows.device))
            found.append(torch.stack([picks.double(), rows.gather(1, picks).double()]))
        found = to_host(torch.cat(found, 1), "tokens")
        drawn = torch.zeros(len(states), dtype=torch.long)
        for r, (state, members) in enumerate(zip(distinct, groups.values())):
            picks = found[0, r, : len(members)].long()
            drawn[members] = picks
            state.known.update(zip(picks.tolist(), found[1, r, : len(members)].tolist()))
        return drawn

    def next_log_probs(self, prefixes: Sequence[Sequence[int]]) -> torch.Tensor:
        """Next-token log-probs ``[B, V]`` for a batch of prefixes (BOS included)."""
        return torch.stack([s.log_probs for s in self.states(prefixes)])
