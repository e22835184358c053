"""A pool of per-token KV entries that prefixes share (the engine's memory layout).

Every token position ever run through a transformer gets one *slot*: its key
and value vectors in every layer, stored once in one tensor pair per layer
(``keys[layer][slot] -> [heads, head_dim]``). A prefix is a :class:`KVNode`: the
slots of its tokens in order. Extending a prefix by one token allocates one
slot; the new node's slots are its parent's plus that one. So particles and
cached prefixes that share a common prefix share its KV entries, and memory
grows with the number of *distinct* token positions (linear in the text for a
fixed number of particles), never with the square of the length.

A batched forward gathers each row's slots into a left-padded ``[B, heads, L,
head_dim]`` tensor one layer at a time (while the model runs that layer), so the
whole batch's past is never materialised for all layers at once.

Slots are reference-counted by the nodes that use them: a node that is no longer
referenced (evicted from the prefix cache and held by no particle) returns the
slots only it used to the free list. :meth:`KVPool.shrink` gives the memory back
to the allocator when nothing is live.
"""

from __future__ import annotations

import torch


class KVPool:
    """Per-layer key/value tensors ``[capacity, heads, head_dim]`` indexed by slot."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.refs = torch.zeros(0, dtype=torch.int32)
        self.free: list[int] = []
        self.capacity = 0
        self._slot_bytes: int | None = None

    @property
    def slot_bytes(self) -> int:
        """Bytes of one token position over all layers (keys and values)."""
        if not self.keys:
            return 0
        if self._slot_bytes is None:
            self._slot_bytes = sum(t[0].numel() * t.element_size() for t in self.keys + self.values)
        return self._slot_bytes

    @property
    def used(self) -> int:
        """Slots in use."""
        return self.capacity - len(self.free)

    def nbytes(self) -> int:
        """Bytes allocated for the pool (its capacity, used or free)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def allocate(self, n: int) -> torch.Tensor:
        """``n`` free slots (CPU ``long`` tensor); the pool grows (doubling) when it must."""
        if len(self.free) < n:
            self._grow(max(2 * self.capacity, self.capacity + n - len(self.free), 64))
        slots = self.free[len(self.free) - n:]
        del self.free[len(self.free) - n:]
        return torch.tensor(slots, dtype=torch.long)

    @torch.inference_mode()
    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                store[i] = torch.cat([t, t.new_zeros((extra,) + t.shape[1:])])
        self.refs = torch.cat([self.refs, torch.zeros(extra, dtype=torch.int32)])
        self.free = list(range(capacity - 1, self.capacity - 1, -1)) + self.free
        self.capacity = capacity

    @torch.inference_mode()
    def write(self, slots: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Store ``keys[layer][n]`` / ``values[layer][n]`` (each ``[n, heads, head_dim]``) at ``slots``."""
        if not self.keys:  # first write: the layout is learnt from the model
            self.keys = [k.new_zeros((self.capacity,) + k.shape[1:]) for k in keys]
            self.values = [v.new_zeros((self.capacity,) + v.shape[1:]) for v in values]
        index = slots.to(self.device)
        for store, new in ((self.keys, keys), (self.values, values)):
            for layer, t in enumerate(new):
                store[layer].index_copy_(0, index, t.to(store[layer].dtype))

    def gather(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[B, heads, L, head_dim]`` of the slots ``index[B, L]`` (on the device)."""
        k = self.keys[layer][index].transpose(1, 2)
        v = self.values[layer][index].transpose(1, 2)
        return k, v

    # the pool's tensors are made inside ``torch.inference_mode`` (the forwards run there), so the
    # bookkeeping that may run outside it (a node freed by the garbage collector) enters it too
    @torch.inference_mode()
    def retain(self, slots: torch.Tensor) -> None:
        self.refs.index_add_(0, slots, torch.ones(len(slots), dtype=torch.int32))

    @torch.inference_mode()
    def release(self, slots: torch.Tensor) -> None:
        self.refs.index_add_(0, slots, torch.full((len(slots),), -1, dtype=torch.int32))
        self.free.extend(slots[self.refs[slots] == 0].tolist())

    def shrink(self) -> bool:
        """Free the pool's memory when no slot is in use; returns whether it did."""
        if self.used or not self.capacity:
            return False
        self.keys, self.values, self.free, self.capacity = [], [], [], 0
        self.refs = torch.zeros(0, dtype=torch.int32)
        return True


class KVNode:
    """A prefix's slots in a :class:`KVPool` (it keeps them alive while it lives)."""

    __slots__ = ("pool", "slots")

    def __init__(self, pool: KVPool, slots: torch.Tensor):
        self.pool = pool
        self.slots = slots
        pool.retain(slots)

    def __len__(self) -> int:
        return len(self.slots)

    def child(self, slot: torch.Tensor) -> KVNode:
        """The node of this prefix extended by the token stored at ``slot`` (a 1-element tensor)."""
        return KVNode(self.pool, torch.cat([self.slots, slot.reshape(1)]))

    def __del__(self) -> None:
        try:
            self.pool.release(self.slots)
        except Exception:  # interpreter shutdown: nothing left to free
            pass


def padded_index(nodes: list[KVNode], width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded slot index ``[B, L]`` and its mask (``True`` on real positions)."""
    width = max(len(n) for n in nodes) if width is None else width
    index = torch.zeros(len(nodes), width, dtype=torch.long)
    mask = torch.zeros(len(nodes), width, dtype=torch.bool)
    for i, n in enumerate(nodes):
        if len(n):
            index[i, width - len(n):] = n.slots
            mask[i, width - len(n):] = True
    return index, mask
