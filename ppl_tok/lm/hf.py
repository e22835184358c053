"""Any ``transformers`` causal LM behind the :class:`~ppl_tok.lm.base.LanguageModel` interface.

Attention models (GPT-2, Llama, Gemma 3 with its sliding window, ...) run on the
shared KV pool of :mod:`ppl_tok.lm.kvpool`: a state's payload is a
:class:`~ppl_tok.lm.kvpool.KVNode`, and one forward extends states of any
lengths and any contexts together. The batch is laid out with each row's past
right-aligned (left padding, masked) and the new tokens after it, with explicit
position ids, so every row sees exactly its own prefix at its own positions:
padding is exact for attention. The past is gathered from the pool layer by
layer while the model runs (:class:`PoolLayer`).

State-space models (Mamba) carry a fixed-size recurrent state, where padding
is not exact: their payload is ``(cache, row)`` in the batch cache that produced
the state, and the engine groups their extensions by length. Hybrids and other
recurrent designs run one full forward per sequence (:mod:`ppl_tok.lm.serving`
chooses the path from the model's forward and config).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from ppl_tok.vocabulary import Vocabulary
from ppl_tok.lm.base import LanguageModel, LMState, release_free_memory
from ppl_tok.lm.bos import NO_BOS
from ppl_tok.lm.config import EngineConfig
from ppl_tok.lm.device import to_device, to_device_all, to_host
from ppl_tok.lm.kvpool import GatherPlan, KVNode, KVPool, padded_index
from ppl_tok.lm.serving import check_servable, serving_path


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


def _cache_device(cache: Any) -> torch.device:
    for layer in cache.layers:
        for v in vars(layer).values():
            for x in (v.values() if isinstance(v, dict) else [v]):
                if torch.is_tensor(x):
                    return x.device
    raise ValueError("cannot find the device of this cache")


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
    rows = to_device(torch.tensor([r for _, r in payloads]), _cache_device(first)) if same else None
    new = copy.copy(first)
    new.layers = []
    for li, layer in enumerate(first.layers):
        fresh = copy.copy(layer)
        for name, value in _batch_tensors(layer, batch).items():
            setattr(fresh, name, _select(value, rows, list(payloads),
                                         lambda c, li=li, name=name: getattr(c.layers[li], name)))
        new.layers.append(fresh)
    return new


def _real_rows(t: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
    """``[B, heads, T, head_dim]`` -> ``[n, heads, head_dim]``: the real positions (``real``: their flat
    index on the device; ``None``: all of them), batch-major."""
    flat = t.transpose(1, 2).reshape(-1, t.shape[1], t.shape[-1])
    return flat if real is None else flat.index_select(0, real)


def length_groups(items: Sequence[int], lengths: Sequence[int], size: int, waste: float = 0.25,
                  slack: int = 32) -> list[list[int]]:
    """``items`` in groups of at most ``size`` for batched forwards, each padded to its longest.

    Longest first; a group takes the next item while its padded positions (members times
    the longest length) stay within ``1 + waste`` times its real ones plus ``slack`` (a
    forward's fixed cost, in positions): sorted lengths pad little, and few calls are made.
    """
    order = sorted(range(len(items)), key=lambda k: -lengths[k])
    groups: list[list[int]] = []
    for k in order:
        if groups:
            group, longest, real = groups[-1], lengths[groups[-1][0]], sum(lengths[j] for j in groups[-1])
            if len(group) < size and (len(group) + 1) * longest <= (1 + waste) * (real + lengths[k]) + slack:
                group.append(k)
                continue
        groups.append([k])
    return [[items[k] for k in group] for group in groups]


def _chunk_ids(chunks: list[list[int]], sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunks as ``[B, T]`` ids (right-padded with 0) and the mask of their real positions, each made in one
    indexed write (no loop over rows)."""
    if sum(sizes) == len(chunks):  # one new token per row (an extension): the ids are the chunks themselves
        return torch.tensor(chunks, dtype=torch.long), torch.ones(len(chunks), 1, dtype=torch.bool)
    mask = torch.arange(max(sizes)).unsqueeze(0) < torch.tensor(sizes).unsqueeze(1)
    ids = torch.zeros(mask.shape, dtype=torch.long)
    ids[mask] = torch.tensor([t for c in chunks for t in c], dtype=torch.long)
    return ids, mask


def fp32_head(model: Any) -> bool:
    """Give a half-precision (bf16/fp16) model an fp32 copy of its LM head; returns whether it did.

    The head's input (the final hidden state) is cast to fp32 and the logits come
    out in fp32, so ``log_softmax`` sees unrounded logits (a bf16 logit of
    magnitude 16-32 is rounded by up to 0.0625). The copy is separate from a tied
    input embedding, which stays in half precision; it costs ``|V| x d x 4`` bytes.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear) or head.weight.dtype not in (torch.bfloat16, torch.float16):
        return False
    new = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None,
                          device=head.weight.device, dtype=torch.float32)
    with torch.no_grad():
        new.weight.copy_(head.weight)
        if head.bias is not None:
            new.bias.copy_(head.bias)
    new.register_forward_pre_hook(lambda module, args: (args[0].float(),) + tuple(args[1:]))
    model.set_output_embeddings(new)
    return True


@functools.cache
def _pool_layer_class():
    """The pool's cache layer class (made once: ``transformers`` is imported on first use)."""
    from transformers.cache_utils import DynamicLayer

    class PoolLayer(DynamicLayer):
        """One layer's cache for one forward: the past comes from the pool, the new entries are kept aside."""

        def __init__(self, pool: KVPool, layer: int, plan: GatherPlan | None, store: GatherPlan | None = None,
                     real: torch.Tensor | None = None):
            super().__init__()
            self.pool, self.layer, self.plan, self.store, self.real = pool, layer, plan, store, real
            self.past = 0 if plan is None else plan.shape[1]
            self.new: tuple[torch.Tensor, torch.Tensor] | None = None

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            if self.store is None:  # the pool's layout is not known yet: stored after the forward
                self.new = (key_states, value_states)
            else:  # the new entries go to their slots now (they are no past position of this forward)
                for which, t in enumerate((key_states, value_states)):
                    self.pool.write(which, self.layer, self.store, _real_rows(t, self.real))
            if not self.past:
                return key_states, value_states
            # the past and the new entries in one tensor: the past is gathered straight into it
            # (in two buffers that every layer reuses: a layer's attention is done before the next one's update)
            batch, heads, steps, _ = key_states.shape
            k = self.pool.scratch(0, (batch, heads, self.past + steps, key_states.shape[-1]), key_states)
            v = self.pool.scratch(1, (batch, heads, self.past + steps, value_states.shape[-1]), value_states)
            k[:, :, self.past:] = key_states
            v[:, :, self.past:] = value_states
            self.pool.gather(self.layer, self.plan, (k[:, :, : self.past], v[:, :, : self.past]))
            return k, v

        def get_seq_length(self) -> int:
            return self.past

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.past + query_length, 0

    return PoolLayer


class HFLanguageModel(LanguageModel):
    """A Hugging Face causal LM and its tokenizer.

    :param model: a ``transformers`` causal LM (``AutoModelForCausalLM``).
    :param tokenizer: its tokenizer; the vocabulary is read from it.
    :param bos_id: the BOS id used for scoring (from the model card; tokenizers
        sometimes report the wrong one).
    :param config: memory and batching limits of the engine (default: :meth:`EngineConfig.for_device`
        of the model's device).
    """

    def __init__(self, model: Any, tokenizer: Any, bos_id: int | None, *, vocab: Vocabulary | None = None,
                 name: str | None = None, config: EngineConfig | None = None):
        vocab = vocab or Vocabulary.from_hf(tokenizer, name=name)
        device = next(model.parameters()).device
        if config is None:
            weights = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
            config = EngineConfig.for_device(device, model_bytes=weights)
        super().__init__(vocab, bos_id, name=name or vocab.name, config=config)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = device
        check_servable(model, self.name)
        params = inspect.signature(model.forward).parameters
        if "cache" in params and not {"past_key_values", "cache_params"} & set(params):
            import transformers

            raise ValueError(f"transformers {transformers.__version__} names the cache argument `cache`; ppl-tok "
                             "runs on transformers 5.23 (pip install 'transformers>=5.23,<5.24')")
        #: how the model is served (:mod:`ppl_tok.lm.serving`): ``pooled``, ``state`` or ``sequence``
        self.serving = serving_path(model)
        self.pooled = self.serving == "pooled"
        self.ragged = self.pooled
        self._cache_arg = "past_key_values" if self.pooled else "cache_params"
        self._keep_arg = "logits_to_keep" if "logits_to_keep" in params else None
        text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self._layers = getattr(text_config, "num_hidden_layers", None) or getattr(text_config, "n_layer", None)
        self.pool = KVPool(self.device, block_bytes=self.config.kv_block_bytes)

    def _log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Next-token log-probs in float32 (float64 for a float64 model: exact comparisons in tests).

        ``logits`` is a forward's own output, read by nothing else afterwards. On the
        CPU the log-softmax overwrites it when it is a whole tensor (not a view that
        would keep a larger one alive): a fresh ``[B, V]`` output costs there about
        4 times the log-softmax itself (the allocator maps new pages for it and the
        kernel zeroes them); same values, bit for bit. A GPU's caching allocator
        reuses its memory, so there it stays out of place.
        """
        x = logits if logits.dtype == torch.float64 else logits.float()
        if x.device.type == "cpu" and x.is_contiguous() and x.untyped_storage().nbytes() == x.nbytes:
            return torch.log_softmax(x, dim=-1, out=x)
        return torch.log_softmax(x, dim=-1)

    def position_bytes(self) -> int:
        return self.pool.slot_bytes if self.pooled and self.pool.slot_bytes else super().position_bytes()

    def clear_cache(self) -> None:
        super().clear_cache()
        if self.pool.trim():  # the blocks are freed only now: hand their pages back to the OS too
            release_free_memory()

    # ------------------------------------------------- attention: the KV pool
    def _pool_forward(self, parents: list[KVNode | None], chunks: list[list[int]], last_only: bool
                      ) -> tuple[torch.Tensor, list[KVNode], torch.Tensor]:
        """Run ``chunks[i]`` after prefix ``parents[i]``; store the new KV entries in the pool.

        Each row is ``[left pad][past_i][chunk_i][right pad]``, the chunks starting
        at the same column. Returns the logits (``[B, V]`` at each chunk's last
        token if ``last_only``, else ``[B, T, V]``), the new nodes, and the mask
        ``[B, T]`` of real chunk positions.
        """
        empty = None
        if any(p is None for p in parents):
            empty = KVNode(self.pool, torch.zeros(0, dtype=torch.long))
        pasts = [empty if p is None else p for p in parents]
        batch = len(chunks)
        # everything the forward needs is made on the host first and crosses in one non-blocking copy per dtype
        index, past_mask = padded_index(pasts)
        width = index.shape[1]
        sizes = [len(c) for c in chunks]
        steps, new = max(sizes), sum(sizes)
        ids, new_mask = _chunk_ids(chunks, sizes)
        positions = past_mask.sum(1, keepdim=True) + torch.arange(steps).unsqueeze(0)
        # the right pads may attend (to themselves at least): a query row with every key masked is NaN in eager
        # attention, and a NaN value times a zero weight is NaN in the next layer; no real position sees them
        host = [ids, positions, torch.cat([past_mask, torch.ones_like(new_mask)], 1)]
        gather = self.pool.host_plan(index, past_mask) if width else None
        slots = self.pool.allocate(new) if self.pool.block_slots else None  # known once the first forward stored
        store = None if slots is None else self.pool.host_plan(slots.unsqueeze(0))
        real = None if new == batch * steps else new_mask.reshape(-1).nonzero().squeeze(1)  # ragged chunks
        last = keep = None
        if last_only and steps > 1:
            last = torch.tensor([len(c) - 1 for c in chunks])
            if self._keep_arg:
                # logits at the chunks' last positions only: [B, T, V] for a long context would be gigabytes
                keep = torch.unique(last)  # sorted
                last = torch.searchsorted(keep, last)  # each row's column among the kept positions
                if keep.tolist() == [steps - 1]:
                    keep = None  # the model's own "last position" (logits_to_keep=1)
        extra = [t for t in (real, last, keep) if t is not None]
        plans = [p for p in (gather, store) if p is not None]
        moved = to_device_all(host + [t for p in plans for t in p.tensors()] + extra, self.device)
        ids_d, positions_d, mask_d = moved[:3]
        at = 3
        if gather is not None:
            gather = gather.with_tensors(moved[at: at + len(gather.tensors())])
            at += len(gather.tensors())
        if store is not None:
            store = store.with_tensors(moved[at: at + len(store.tensors())])
            at += len(store.tensors())
        real_d = moved[at] if real is not None else None
        at += real is not None
        last_d = moved[at] if last is not None else None
        keep_d = moved[-1] if keep is not None else None
        cache = DynamicCache()
        layer_cls = _pool_layer_class()
        cache.layers = [layer_cls(self.pool, li, gather, store, real_d) for li in range(self._layers)]
        kwargs: dict[str, Any] = {"input_ids": ids_d, "attention_mask": mask_d, "position_ids": positions_d,
                                  "past_key_values": cache, "use_cache": True}
        if last_only and self._keep_arg:
            kwargs[self._keep_arg] = 1 if keep is None else keep_d
        try:
            logits = self.model(**kwargs).logits
        except BaseException:
            if slots is not None:  # give the slots back
                self.pool.free.extend(slots.tolist())
            raise
        if last_only:
            logits = logits[:, 0] if logits.shape[1] == 1 else \
                logits[torch.arange(batch, device=logits.device), last_d]
        if slots is None:  # the first forward: the pool learns its layout from the new entries
            keys = [_real_rows(layer.new[0], real_d) for layer in cache.layers]
            values = [_real_rows(layer.new[1], real_d) for layer in cache.layers]
            slots = self.pool.store(keys, values)
        # each row's slots are its past's and its new ones: one concatenation, split into the rows' views
        pieces, at = [], 0
        for p, n in zip(pasts, sizes):
            pieces += [p.slots, slots[at: at + n]]
            at += n
        rows = torch.cat(pieces).split([len(p) + n for p, n in zip(pasts, sizes)])
        return logits, KVNode.many(self.pool, rows), new_mask

    # ------------------------------------------------------------- backend
    @torch.inference_mode()
    def _prefill(self, keys: list[tuple[int, ...]]) -> tuple[torch.Tensor, list[Any]]:
        if not all(keys):
            raise ValueError(NO_BOS.format(name=self.name))
        if self.pooled:
            logits, nodes, _ = self._pool_forward([None] * len(keys), [list(k) for k in keys], last_only=True)
            return self._log_softmax(logits), nodes
        # a recurrent state (or no cache) is not exact under padding: one forward per group of equal lengths
        groups: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(len(key), []).append(i)
        rows: list[torch.Tensor | None] = [None] * len(keys)
        payloads: list[Any] = [None] * len(keys)
        state = self.serving == "state"
        for members in groups.values():
            ids = to_device(torch.tensor([keys[i] for i in members]), self.device)
            kwargs = {self._keep_arg: 1} if self._keep_arg else {}
            out = self.model(input_ids=ids, use_cache=state, **kwargs)
            group_rows = self._log_softmax(out.logits[:, -1])
            cache = getattr(out, self._cache_arg) if state else None
            for r, i in enumerate(members):  # ``sequence``: the payload is the prefix itself, run again to extend
                rows[i], payloads[i] = group_rows[r], ((cache, r) if state else keys[i])
        return torch.stack(rows), payloads

    @torch.inference_mode()
    def _extend(self, payloads: list[Any], tokens: list[int]) -> tuple[torch.Tensor, list[Any]]:
        if self.pooled:
            logits, nodes, _ = self._pool_forward(list(payloads), [[t] for t in tokens], last_only=True)
            return self._log_softmax(logits), nodes
        if self.serving == "sequence":  # the engine groups a non-ragged batch by length: one forward, no padding
            return self._prefill([tuple(p) + (int(t),) for p, t in zip(payloads, tokens)])
        ids = to_device(torch.tensor(tokens).unsqueeze(1), self.device)
        out = self.model(input_ids=ids, use_cache=True, **{self._cache_arg: gather_cache(payloads)})
        new = getattr(out, self._cache_arg)
        return self._log_softmax(out.logits[:, -1]), [(new, i) for i in range(len(tokens))]

    @torch.inference_mode()
    def _recompute(self, states: list[LMState]) -> torch.Tensor:
        if not self.pooled:
            return super()._recompute(states)
        # the last token again on top of its parent's slots; its KV entry is written to a fresh slot and let go
        parents = [KVNode(self.pool, s.payload.slots[:-1]) for s in states]
        logits, _, _ = self._pool_forward(parents, [[s.tokens[-1]] for s in states], last_only=True)
        return self._log_softmax(logits)

    @torch.inference_mode()
    def token_log_probs_after(self, prefixes: Sequence[Sequence[int]], texts_tokens: Sequence[Sequence[int]],
                              keep_states: bool = True) -> list[list[float]]:
        """One forward per batch: every sequence's tokens run on top of its (cached) prefix state, and each
        token's term ``log p(t_k | prefix, t_<k)`` is read from that forward's rows (the base class extends
        one token per call); :meth:`log_probs_after` sums them. ``keep_states=False``: only each sequence's
        last state is cached (its one row), not one per position with the batch's ``[T, V]`` rows."""
        if not self.pooled:
            return super().token_log_probs_after(prefixes, texts_tokens, keep_states)
        if len(texts_tokens) != len(prefixes):
            raise ValueError(f"{len(texts_tokens)} token sequences but {len(prefixes)} prefixes")
        seqs = [[int(t) for t in s] for s in texts_tokens]
        roots = self.states([tuple(int(t) for t in p) for p in prefixes])
        first = self.token_log_probs(roots, [s[:1] for s in seqs])
        terms: list[list[float]] = [[float(v) for v in f] for f in first]
        rest = [i for i, s in enumerate(seqs) if len(s) > 1]
        size = max(1, self.config.max_batch // 8)
        for part in length_groups(rest, [len(seqs[i]) - 1 for i in rest], size):
            logits, nodes, mask = self._pool_forward([roots[i].payload for i in part], [seqs[i][:-1] for i in part],
                                                     last_only=False)
            log_probs = self._log_softmax(logits)
            targets = torch.zeros(mask.shape, dtype=torch.long)
            for r, i in enumerate(part):
                targets[r, : len(seqs[i]) - 1] = torch.as_tensor(seqs[i][1:])
            picked = to_host(log_probs.gather(2, to_device(targets, self.device).unsqueeze(-1)).squeeze(-1).double(),
                             "log-probs")
            for r, i in enumerate(part):
                terms[i].extend(picked[r][mask[r]].tolist())
                # every prefix of the sequence becomes a cached state: particles on the canonical path reuse them
                # (its own rows only: a view would keep the whole batch's [B, T, V] alive); without keep_states
                # the last one only (a long text scored in pieces resumes from it)
                n = len(seqs[i]) - 1
                first_kept = 0 if keep_states else n - 1
                base, own_rows = roots[i].tokens, log_probs[r, first_kept: n].clone()
                for j in range(first_kept, n):
                    key = base + tuple(seqs[i][: j + 1])
                    if key not in self._cache:
                        node = KVNode(self.pool, nodes[r].slots[: len(base) + j + 1])
                        self._new_state(key, own_rows, j - first_kept, node).known[seqs[i][j + 1]] = \
                            float(picked[r, j])
            self.stats.forwards += int(mask.sum())
            self.stats.calls += 1
        return terms
