"""The vocabulary in byte order: the tokens that *cover* a byte string form one contiguous run.

Sort the surfaces of the vocabulary's tokens (special tokens, which have no
surface, apart). The tokens whose surface starts with a byte string ``u`` are
then the run ``[a, b)`` of the sorted order; inside it come first the tokens
equal to ``u``, then those continuing with byte 0, byte 1, ... byte 255, each a
contiguous sub-run. So, for an LM state's next-token row permuted once into
this order (one gather of ``[V]`` on the device), "the mass of the tokens that
start with ``u`` and continue with ``b``, for every ``b``" is a segmented
log-sum-exp over a slice: the prefix probability and the next-byte
distribution need no per-token work on the host.

Every token with a surface counts here, byte-fallback pieces included
everywhere: the LM over strings sums over every token sequence, so that its
next-byte distributions are normalised (:mod:`ppl_tok.strings.state`).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from weakref import WeakKeyDictionary

from typing import TYPE_CHECKING

import torch

from ppl_tok.vocabulary import Vocabulary

if TYPE_CHECKING:
    from ppl_tok.strings.beam import Hypothesis

#: columns of a group table: 256 next bytes, then the tokens equal to the run's prefix
EQUAL, GROUPS = 256, 257


def _successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string that starts with ``prefix`` (``None``: there is none)."""
    head = prefix.rstrip(b"\xff")
    return None if not head else head[:-1] + bytes([head[-1] + 1])


class CoverIndex:
    """Sorted surfaces of a vocabulary, with runs and next-byte groups by prefix (cached).

    :attr:`ids` is the token id at each sorted position; :attr:`special` the ids
    without a surface (the string ends when the LM emits one of them).
    """

    def __init__(self, vocab: Vocabulary, cache: int = 4096):
        pairs = sorted((s, i) for i, s in enumerate(vocab.surfaces) if s is not None)
        self.surfaces = [s for s, _ in pairs]
        self.ids = torch.tensor([i for _, i in pairs], dtype=torch.long)
        self.special = torch.tensor(sorted(vocab.special_ids), dtype=torch.long)
        self.longest = max(len(s) for s in self.surfaces)
        self._groups: OrderedDict[bytes, tuple[int, int, torch.Tensor]] = OrderedDict()
        self._cache = cache
        self._device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def has_end(self) -> bool:
        """Whether the vocabulary has a token without a surface (EOS or another special token)."""
        return len(self.special) > 0

    def run(self, prefix: bytes) -> tuple[int, int]:
        """``[a, b)``: the sorted positions of the tokens whose surface starts with ``prefix``."""
        a = bisect.bisect_left(self.surfaces, prefix)
        nxt = _successor(prefix)
        b = len(self.surfaces) if nxt is None else bisect.bisect_left(self.surfaces, nxt, a)
        return a, b

    def equal(self, prefix: bytes, a: int, b: int) -> int:
        """The end of the tokens equal to ``prefix`` at the head of its run ``[a, b)``."""
        return bisect.bisect_right(self.surfaces, prefix, a, b)

    def groups(self, prefix: bytes) -> tuple[int, int, torch.Tensor]:
        """``(a, b, seg)``: the run of ``prefix`` and each of its tokens' column (:data:`EQUAL` or the next byte)."""
        hit = self._groups.get(prefix)
        if hit is not None:
            self._groups.move_to_end(prefix)
            return hit
        a, b = self.run(prefix)
        e = self.equal(prefix, a, b)
        starts = [bisect.bisect_left(self.surfaces, prefix + bytes([c]), e, b) for c in range(256)] + [b]
        counts = torch.tensor([starts[c + 1] - starts[c] for c in range(256)], dtype=torch.long)
        seg = torch.cat([torch.full((e - a,), EQUAL, dtype=torch.long),
                         torch.repeat_interleave(torch.arange(256), counts)])
        out = self._groups[prefix] = (a, b, seg)
        if len(self._groups) > self._cache:
            self._groups.popitem(last=False)
        return out

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, special)`` on ``device`` (copied once)."""
        if device not in self._device:
            self._device[device] = (self.ids.to(device), self.special.to(device))
        return self._device[device]


class Cover:
    """A kept prefix of the LM over strings (:mod:`ppl_tok.strings.state`) ending at some offset, and its next-token
    log-probs on the run ``[a, a + len(vals))`` of the vocabulary in byte order (:class:`CoverIndex`).

    Made from the prefix's row (``vals=None``, ``row`` and ``order``: the row and the byte order's ids on its
    device), a cover reads ``vals = row[order[a:b]]`` only when first asked: by then the next byte has narrowed
    the run (:meth:`narrow`), so only the run is gathered, never the whole row in byte order.
    """

    __slots__ = ("hyp", "a", "_vals", "end", "_row", "_order", "_b")

    def __init__(self, hyp: Hypothesis, a: int, vals: torch.Tensor | None, end: float,
                 row: torch.Tensor | None = None, order: torch.Tensor | None = None):
        self.hyp, self.a, self._vals, self.end = hyp, a, vals, end
        self._row, self._order = row, order
        self._b = a + len(vals) if vals is not None else len(order)

    @property
    def vals(self) -> torch.Tensor:
        if self._vals is None:
            self._vals = self._row[self._order[self.a: self._b]]
            self._row = self._order = None
        return self._vals

    @vals.setter
    def vals(self, value: torch.Tensor) -> None:
        self._vals, self._row, self._order, self._b = value, None, None, self.a + len(value)

    def narrow(self, a: int, b: int) -> None:
        """Keep the run ``[a, b)`` (within the current one)."""
        if self._vals is not None:
            self._vals = self._vals[a - self.a: b - self.a]
        self.a, self._b = a, b

    def copy(self) -> Cover:
        new = object.__new__(Cover)
        new.hyp, new.a, new._vals, new.end, new._row, new._order, new._b = \
            self.hyp, self.a, self._vals, self.end, self._row, self._order, self._b
        return new


def group_log_masses(values: list[torch.Tensor], segs: list[torch.Tensor]) -> torch.Tensor:
    """``out[q, g] = log sum exp(values[q][k] for k with segs[q][k] == g)``: ``[Q, GROUPS]`` float64 on the host.

    A segmented log-sum-exp on the values' device (max per group, then the sum
    of shifted exponentials): one copy of ``Q x 257`` numbers to the host.
    """
    if not values:
        return torch.empty(0, GROUPS, dtype=torch.float64)
    device = values[0].device
    v = torch.cat([x.to(torch.float64) for x in values])
    seg = torch.cat([s.to(device) + q * GROUPS for q, s in enumerate(segs)])
    size = len(values) * GROUPS
    top = torch.full((size,), -torch.inf, dtype=torch.float64, device=device).scatter_reduce(0, seg, v, "amax")
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = torch.zeros(size, dtype=torch.float64, device=device).scatter_add(0, seg, (v - shift[seg]).exp())
    return (total.log() + shift).view(len(values), GROUPS).cpu()


#: per LM state, per run ``(a, b)`` of the byte order: the log-mass of its row over the run (:func:`run_log_masses`)
_RUN_MASSES: WeakKeyDictionary[object, dict[tuple[int, int], float]] = WeakKeyDictionary()


def run_log_masses(covers: list[Cover]) -> list[float]:
    """Per cover, ``log sum over t in its run of p(t | h)`` (float64): the share of its prefix's mass that covers
    the text. Kept per LM state and run (weakly, with the state): the token tree's branches walk the same bytes
    from different roots and read the same rows' runs again (the figures are the same sums)."""
    out: list[float | None] = []
    todo: list[int] = []
    for q, c in enumerate(covers):
        state = c.hyp.state
        got = None if state is None else _RUN_MASSES.get(state, {}).get((c.a, c._b))
        out.append(got)
        if got is None:
            todo.append(q)
    if todo:
        masses = torch.stack([torch.logsumexp(covers[q].vals.double(), 0) for q in todo]).cpu().tolist()
        for q, m in zip(todo, masses):
            c = covers[q]
            out[q] = m
            if c.hyp.state is not None:
                _RUN_MASSES.setdefault(c.hyp.state, {})[c.a, c._b] = m
    return out  # type: ignore[return-value]


_INDEXES: WeakKeyDictionary[Vocabulary, CoverIndex] = WeakKeyDictionary()


def cover_index(vocab: Vocabulary) -> CoverIndex:
    """The vocabulary's :class:`CoverIndex` (built once per vocabulary)."""
    index = _INDEXES.get(vocab)
    if index is None:
        index = _INDEXES[vocab] = CoverIndex(vocab)
    return index
