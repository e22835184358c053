"""A pool of per-token KV entries that prefixes share (the engine's memory layout).

Every token position ever run through a transformer gets one *slot*: its key
and value vectors in every layer, stored once. A prefix is a :class:`KVNode`:
the slots of its tokens in order. Extending a prefix by one token allocates one
slot; the new node's slots are its parent's plus that one. So particles and
cached prefixes that share a common prefix share its KV entries, and memory
grows with the number of *distinct* token positions (linear in the text for a
fixed number of particles), never with the square of the length.

Storage is a list of fixed-size *blocks* (``block_bytes`` each, a few thousand
slots, at most :data:`MAX_BLOCK_SLOTS`; slot ``s`` lives in block ``s // block_slots`` at offset
``s % block_slots``). The pool grows one block at a time, so growing never
copies what is stored and never holds two copies at once (a single tensor
that doubles would need its old and new copies together: 3x the data at the
peak), and it overshoots what is used by at most one block.

A batched forward gathers each row's slots into a left-padded ``[B, heads, L,
head_dim]`` tensor one layer at a time (while the model runs that layer), so the
whole batch's past is never materialised for all layers at once. A
:class:`GatherPlan`, made once per forward, says which positions come from
which block.

Slots are reference-counted by the nodes that use them: a node that is no longer
referenced (evicted from the prefix cache and held by no particle) returns the
slots only it used to the free list. :meth:`KVPool.trim` gives the blocks that
hold no live slot back to the allocator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ppl_tok.lm.device import to_device_all


#: the most slots in one block, whatever ``block_bytes`` (a tiny model's slot is a few hundred bytes: its blocks
#: would otherwise hold millions of slots, each an entry of the free list)
MAX_BLOCK_SLOTS = 1 << 16


@dataclass
class GatherPlan:
    """Where the slots of a ``[B, L]`` index live: one part ``(block, rows, cols, offsets)`` per block used.

    The part's slots go to positions ``(rows[n], cols[n])`` of the ``[B, L]``
    output; with a single part, ``rows`` and ``cols`` are ``None`` and ``offsets``
    is the whole ``[B, L]`` index into that block. A plan is made on the host
    (:meth:`KVPool.host_plan`) and its tensors cross to the device once
    (:meth:`tensors`, :meth:`with_tensors`), with the rest of a forward's inputs.
    """

    shape: tuple[int, int]
    parts: list[tuple[int, torch.Tensor | None, torch.Tensor | None, torch.Tensor]]

    def tensors(self) -> list[torch.Tensor]:
        """The plan's index tensors, in order (``None`` entries left out)."""
        return [t for _, rows, cols, off in self.parts for t in (rows, cols, off) if t is not None]

    def with_tensors(self, tensors: Sequence[torch.Tensor]) -> GatherPlan:
        """The same plan with its index tensors replaced by ``tensors`` (e.g. their device copies)."""
        it = iter(tensors)
        parts = [(b, None if rows is None else next(it), None if cols is None else next(it), next(it))
                 for b, rows, cols, _ in self.parts]
        return GatherPlan(self.shape, parts)


class KVPool:
    """Key/value entries of token positions, stored in blocks of ``[block_slots, heads, head_dim]`` per layer.

    :param device: where the entries live (the model's device).
    :param block_bytes: the size of one block (all layers, keys and values).
    """

    def __init__(self, device: torch.device | str = "cpu", block_bytes: int = 128 << 20):
        if block_bytes < 1:
            raise ValueError(f"block_bytes must be positive, got {block_bytes!r}")
        self.device = torch.device(device)
        self.block_bytes = block_bytes
        # blocks[b] = (keys per layer, values per layer), or None once trimmed
        self.blocks: list[tuple[list[torch.Tensor], list[torch.Tensor]] | None] = []
        self.refs = torch.zeros(0, dtype=torch.int32)
        self._free: list[int] = []
        self._released: list[torch.Tensor] = []  # slots of nodes let go, not yet counted (:meth:`release`)
        self.block_slots = 0  # known after the first store (the layout is learnt from the model)
        self._layout: list[tuple[tuple[int, ...], torch.dtype]] = []
        self._slot_bytes = 0
        self._scratch: list[torch.Tensor | None] = [None, None, None]

    @property
    def slot_bytes(self) -> int:
        """Bytes of one token position over all layers (keys and values)."""
        return self._slot_bytes

    @property
    def free(self) -> list[int]:
        """The free slots, the next one handed out last (the releases pending are counted first)."""
        if self._released:
            self._count_released()
        return self._free

    @property
    def capacity(self) -> int:
        """Slots in the blocks held (used or free)."""
        return self.block_slots * sum(b is not None for b in self.blocks)

    @property
    def used(self) -> int:
        """Slots in use."""
        return self.capacity - len(self.free)

    def nbytes(self) -> int:
        """Bytes held by the pool's blocks."""
        return self.capacity * self.slot_bytes

    @torch.inference_mode()
    def _add_block(self) -> None:
        b = next((i for i, blk in enumerate(self.blocks) if blk is None), len(self.blocks))
        n = self.block_slots
        half = len(self._layout) // 2
        # uninitialised: a slot is read only after it is written (padding reads a real slot), and untouched
        # pages cost no memory, so the process grows with the slots used, not with whole blocks
        tensors = [torch.empty((n,) + shape, dtype=dtype, device=self.device) for shape, dtype in self._layout]
        if b == len(self.blocks):
            self.blocks.append(None)
            self.refs = torch.cat([self.refs, torch.zeros(n, dtype=torch.int32)])
        self.blocks[b] = (tensors[:half], tensors[half:])
        self.free.extend(range((b + 1) * n - 1, b * n - 1, -1))  # lowest slot handed out first

    def allocate(self, n: int) -> torch.Tensor:
        """``n`` free slots (a CPU ``long`` tensor), adding blocks as needed (the layout must be known)."""
        while len(self.free) < n:
            self._add_block()
        slots = torch.tensor(self.free[len(self.free) - n:], dtype=torch.long)
        del self.free[len(self.free) - n:]
        return slots

    @torch.inference_mode()
    def store(self, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
        """Store ``keys[layer][n]`` / ``values[layer][n]`` (each ``[n, heads, head_dim]``) in ``n`` free slots.

        Returns the slots (a CPU ``long`` tensor); the pool adds blocks as it must, and
        learns its layout from the first store. (A forward, once the layout is known,
        :meth:`allocate` s its slots first and :meth:`write` s each layer as it runs.)
        """
        if not self._layout:
            self._layout = [(tuple(t.shape[1:]), t.dtype) for t in keys + values]
            self._slot_bytes = sum(t[0].numel() * t.element_size() for t in keys + values)
            self.block_slots = min(MAX_BLOCK_SLOTS, max(16, self.block_bytes // max(1, self._slot_bytes)))
        slots = self.allocate(keys[0].shape[0] if keys else 0)
        plan = self.plan(slots.unsqueeze(0))  # one row: its columns are the positions
        for which, new in enumerate((keys, values)):
            for layer, t in enumerate(new):
                self.write(which, layer, plan, t)
        return slots

    def write(self, which: int, layer: int, plan: GatherPlan, new: torch.Tensor) -> None:
        """Write ``new[n]`` (``[n, heads, head_dim]``) to the slots of a one-row plan (``which``: 0 keys, 1 values)."""
        for b, _, pos, off in plan.parts:
            store = self.blocks[b][which][layer]
            src = new if pos is None else new.index_select(0, pos)
            store.index_copy_(0, off.reshape(-1), src.to(store.dtype))

    def plan(self, index: torch.Tensor, mask: torch.Tensor | None = None) -> GatherPlan:
        """:meth:`host_plan` with its tensors on the device."""
        host = self.host_plan(index, mask)
        return host.with_tensors(to_device_all(host.tensors(), self.device))

    def host_plan(self, index: torch.Tensor, mask: torch.Tensor | None = None) -> GatherPlan:
        """The parts of a gather of the slots ``index[B, L]`` (entries where ``mask`` is False are padding),
        computed on the host, where the slot index lives."""
        shape = (index.shape[0], index.shape[1])
        if mask is not None and not bool(mask.all()):
            real = index[mask]
            index = index.masked_fill(~mask, int(real[0]) if len(real) else 0)  # padding reads a real slot
        block = torch.div(index, self.block_slots, rounding_mode="floor")
        offset = index - block * self.block_slots
        used = torch.unique(block).tolist()
        if len(used) == 1:
            return GatherPlan(shape, [(used[0], None, None, offset)])
        parts = []
        for b in used:
            rows, cols = (block == b).nonzero(as_tuple=True)
            parts.append((b, rows, cols, offset[rows, cols]))
        return GatherPlan(shape, parts)

    def gather(self, layer: int, plan: GatherPlan, out: tuple[torch.Tensor, torch.Tensor] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[B, heads, L, head_dim]`` of a planned gather (on the device).

        ``out``: two ``[B, heads, L, head_dim]`` tensors (views allowed) to write them into.

        The destination seen rows first, ``[B, L, heads, head_dim]``, is strided
        (``heads`` apart). A GPU indexes straight into it (one pass, no
        temporary). A CPU does that about 5 times slower than an ``index_select``
        into a contiguous ``[B * L, heads, head_dim]`` (whole slots copied at once),
        so there the slots go to a reused contiguous scratch first and then to the
        destination in one strided copy (two passes, each about as fast as the
        ``torch.cat`` of a plain ``DynamicCache``).
        """
        batch, width = plan.shape
        results = []
        for which in (0, 1):
            dest = None if out is None else out[which]
            first = self.blocks[plan.parts[0][0]][which][layer]
            if dest is None:
                dest = first.new_empty((batch, first.shape[1], width, first.shape[2]))
            rows_first = dest.transpose(1, 2)  # [B, L, heads, head_dim]: a view of the destination
            if self.device.type == "cpu":
                flat = self.scratch(2, (batch * width,) + tuple(first.shape[1:]), first)
                if len(plan.parts) == 1:
                    b, _, _, off = plan.parts[0]
                    torch.index_select(self.blocks[b][which][layer], 0, off.reshape(-1), out=flat)
                else:
                    for b, rows, cols, off in plan.parts:
                        flat.index_copy_(0, rows * width + cols, self.blocks[b][which][layer].index_select(0, off))
                rows_first.copy_(flat.view(rows_first.shape))
            elif len(plan.parts) == 1:  # indexed straight into the destination: one pass, no temporary
                b, _, _, off = plan.parts[0]
                torch.ops.aten.index.Tensor_out(self.blocks[b][which][layer], [off], out=rows_first)
            else:
                for b, rows, cols, off in plan.parts:
                    rows_first.index_put_((rows, cols), self.blocks[b][which][layer].index_select(0, off))
            results.append(dest)
        return results[0], results[1]

    def scratch(self, which: int, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A reusable contiguous tensor of ``shape`` (``which``: 0 keys, 1 values of one layer's attention,
        2 the CPU gather's staging, :meth:`gather`).

        Every layer of every forward reuses the same buffers (grown by half when
        too small): one allocation instead of two per layer, and no heap of
        ever-larger freed tensors (on glibc, a growing past allocated afresh per
        layer fragments the heap and keeps the process's RSS far above what is live).
        The caller must be done with the previous tensor before asking again.
        """
        n = 1
        for d in shape:
            n *= d
        buf = self._scratch[which]
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            size = max(n, 0 if buf is None else int(buf.numel() * 1.5))
            self._scratch[which] = None  # let the old one go before the new one is made
            buf = self._scratch[which] = torch.empty(size, dtype=like.dtype, device=like.device)
        return buf[:n].view(shape)

    # the pool's tensors are made inside ``torch.inference_mode`` (the forwards run there), so the
    # bookkeeping that may run outside it (a node freed by the garbage collector) enters it too
    @torch.inference_mode()
    def retain(self, slots: torch.Tensor) -> None:
        self.refs.index_add_(0, slots, torch.ones(len(slots), dtype=torch.int32))

    def release(self, slots: torch.Tensor) -> None:
        """Let go of ``slots`` (a node died). Counted when the free list is next read, all the releases since
        in one operation (:meth:`_count_released`): a node dies per particle per step, a forward reads once."""
        self._released.append(slots)

    @torch.inference_mode()
    def _count_released(self) -> None:
        """The pending releases, counted at once. The free list grows as releasing one at a time would grow it:
        a slot is freed by the last release that holds it (no retain can reach a slot whose count is zero:
        only a live node hands its slots on), in the order of the releases."""
        pending, self._released = self._released, []
        slots = torch.cat(pending) if len(pending) > 1 else pending[0]
        self.refs.index_add_(0, slots, torch.full((len(slots),), -1, dtype=torch.int32))
        freed = slots[self.refs[slots] == 0].tolist()
        if len(pending) > 1:  # a slot held by several released nodes: at its last release only
            freed = list(dict.fromkeys(reversed(freed)))[::-1]
        self._free.extend(freed)

    def trim(self) -> int:
        """Give back every block that holds no slot in use; returns the bytes freed."""
        if not self.block_slots:
            return 0
        if self._released:
            self._count_released()
        busy = (self.refs.view(-1, self.block_slots) > 0).any(1).tolist()
        empty = {b for b, blk in enumerate(self.blocks) if blk is not None and not busy[b]}
        if not empty:
            return 0
        for b in empty:
            self.blocks[b] = None
        self._scratch = [None, None, None]
        self._free = [s for s in self._free if s // self.block_slots not in empty]
        return len(empty) * self.block_slots * self.slot_bytes


class KVNode:
    """A prefix's slots in a :class:`KVPool` (it keeps them alive while it lives)."""

    __slots__ = ("pool", "slots", "length")

    def __init__(self, pool: KVPool, slots: torch.Tensor):
        self.pool = pool
        self.slots = slots
        self.length = len(slots)  # an int: a tensor's ``len`` is a Python call, read for every row of a forward
        pool.retain(slots)

    @classmethod
    def many(cls, pool: KVPool, slots: Sequence[torch.Tensor]) -> list[KVNode]:
        """One node per entry of ``slots``, their references taken in one operation (a forward's new nodes)."""
        nodes = []
        for s in slots:
            node = object.__new__(cls)
            node.pool, node.slots, node.length = pool, s, len(s)
            nodes.append(node)
        if nodes:
            pool.retain(torch.cat(list(slots)))
        return nodes

    def __len__(self) -> int:
        return self.length

    def __del__(self) -> None:
        try:
            self.pool.release(self.slots)
        except Exception:  # interpreter shutdown: nothing left to free
            pass


def padded_index(nodes: list[KVNode], width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded slot index ``[B, L]`` and its mask (``True`` on real positions), filled in one indexed write
    (the mask's real positions, row-major, are the rows' slots in order)."""
    lengths = torch.tensor([n.length for n in nodes], dtype=torch.long)
    width = (int(lengths.max()) if len(nodes) else 0) if width is None else width
    mask = torch.arange(width).unsqueeze(0) >= (width - lengths).unsqueeze(1)
    index = torch.zeros(len(nodes), width, dtype=torch.long)
    if len(nodes):
        index[mask] = torch.cat([n.slots for n in nodes])
    return index, mask
