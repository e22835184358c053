"""Sets of tokenizations around the canonical one: a ball of token edit distance, a cap on extra tokens.

A tokenization ``v`` of a string is a path of its MDD (:mod:`ppl_tok.mdd`); ``c`` is the canonical one.

**Token edit distance.** ``dist(v, c)`` is the Levenshtein distance between the two *token sequences*
(each token one symbol, compared by id): the fewest insertions, deletions and substitutions of single
tokens that turn ``c`` into ``v``, each of cost 1. Between two tokenizations of the same string, splitting
one canonical token in two costs 2 (one substitution, one insertion), merging two into one costs 2, so the
nearest non-canonical tokenizations are at distance 2 (advtok's "distance 2" neighbours, Geh et al. 2025,
count edges of a multi-rooted MDD and differ in details; this is the plain Levenshtein metric). Every
distance is at most ``max(|v|, |c|) <= len(text in bytes)``.

A :class:`TokenizationSet` is ``{v : dist(v, c) <= distance and |v| <= |c| + extra}`` with either
constraint left out as ``None``: ``TokenizationSet(mdd)`` is every tokenization, ``distance=d`` the ball
of radius ``d`` (the MDD neighbourhood), ``extra=k`` those with at most ``k`` tokens more than canonical.

**How the walks stay exact.** A path prefix ``u`` carries the Levenshtein DP row
``D[j] = dist(u, c[:j])`` for ``j = 0..|c|``; appending token ``t`` gives
``D'[0] = D[0] + 1``, ``D'[j] = min(D[j] + 1, D'[j-1] + 1, D[j-1] + [t != c[j-1]])``, and the distance of
a complete ``v`` is ``D[|c|]``. Each completion's final distance is at least ``min_j D[j]`` (an alignment
passes through the row), so a prefix whose row minimum exceeds the bound has no member below it and is
cut. Values are kept capped at ``bound + 1`` (``min(D, cap)`` obeys the same recurrence, since adding a
non-negative cost commutes with the cap), which makes the rows a finite key: the number of members below
``(node, row, tokens so far)`` is memoised, which gives exact counts, uniform sampling and enumeration
ring by ring (the members at distance exactly ``r``, for ``r = 0, 1, ...``) without listing the set.
A tokens-so-far count is pruned by the fewest tokens that still reach the end (a shortest path).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ppl_tok.mdd import MDD

Row = tuple[int, ...]


def levenshtein(a: Sequence[int], b: Sequence[int]) -> int:
    """The Levenshtein distance between two token sequences (unit costs; the reference for the walks)."""
    row = list(range(len(b) + 1))
    for x in a:
        new = [row[0] + 1]
        for j, y in enumerate(b, 1):
            new.append(min(row[j] + 1, new[j - 1] + 1, row[j - 1] + (x != y)))
        row = new
    return row[-1]


def _step(row: Row, token: int, canonical: Sequence[int], cap: int) -> Row:
    new = [min(row[0] + 1, cap)]
    for j, c in enumerate(canonical, 1):
        new.append(min(row[j] + 1, new[j - 1] + 1, row[j - 1] + (token != c), cap))
    return tuple(new)


@dataclass
class TokenizationSet:
    """``{v in mdd : dist(v, canonical) <= distance and len(v) <= len(canonical) + extra}`` (``None``: no limit).

    :param mdd: the MDD of the string.
    :param canonical: the tokenization distances are measured from (default: the MDD's canonical one).
    """

    mdd: MDD
    canonical: tuple[int, ...] = ()
    distance: int | None = None
    extra: int | None = None
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.canonical = tuple(self.canonical) or self.mdd.canonical()
        if not self.mdd.accepts(self.canonical):
            raise ValueError("the canonical tokenization is not a tokenization of the MDD's text")
        size = len(self.mdd.text)
        if self.distance is not None and not 0 <= self.distance <= size:
            raise ValueError(f"distance {self.distance} is outside 0..{size}: no two tokenizations of this "
                             f"{size}-byte text are further apart than {size} tokens; give a distance in 0..{size} "
                             "(or none, for every tokenization)")
        if self.extra is not None and self.extra < 0:
            raise ValueError(f"extra tokens must be >= 0, got {self.extra}")
        # the fewest tokens from each node to the end
        self._fewest = {self.mdd.sink: 0}
        for i in sorted(self.mdd.nodes, reverse=True):
            if i != self.mdd.sink:
                self._fewest[i] = 1 + min(self._fewest[j] for j in self.mdd.out_tokens(i).values())
        # a path of n tokens has depth n: keep Python's recursion above the longest path
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * size + 1000))

    @property
    def max_tokens(self) -> int | None:
        return None if self.extra is None else len(self.canonical) + self.extra

    def max_distance(self) -> int:
        """An upper bound on the distance of any member (the distance limit, else the text's length in bytes)."""
        return len(self.mdd.text) if self.distance is None else self.distance

    def contains(self, tokens: Sequence[int]) -> bool:
        """Whether ``tokens`` is a member (a tokenization within both limits)."""
        tokens = tuple(tokens)
        return (self.mdd.accepts(tokens)
                and (self.max_tokens is None or len(tokens) <= self.max_tokens)
                and (self.distance is None or levenshtein(tokens, self.canonical) <= self.distance))

    # ------------------------------------------------------------------ the walk
    def _start(self, bound: int | None) -> Row | None:
        return None if bound is None else tuple(min(j, bound + 1) for j in range(len(self.canonical) + 1))

    def _children(self, node: int, row: Row | None, used: int, bound: int | None
                  ) -> Iterator[tuple[int, int, Row | None]]:
        """``(token, next node, next row)`` of the edges that can still lead to a member."""
        most = self.max_tokens
        for t, j in sorted(self.mdd.out_tokens(node).items()):
            if most is not None and used + 1 + self._fewest[j] > most:
                continue
            new = None if bound is None else _step(row, t, self.canonical, bound + 1)
            if new is not None and min(new) > bound:
                continue
            yield t, j, new

    def _accepts(self, row: Row | None, bound: int | None, exact: bool) -> bool:
        if bound is None:
            return True
        return row[-1] == bound if exact else row[-1] <= bound

    def _count(self, node: int, row: Row | None, used: int, bound: int | None, exact: bool) -> int:
        key = (node, row, used if self.extra is not None else 0, bound, exact)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if node == self.mdd.sink:
            n = int(self._accepts(row, bound, exact))
        else:
            n = sum(self._count(j, new, used + 1, bound, exact) for _, j, new in self._children(node, row, used, bound))
        self._memo[key] = n
        return n

    def count(self, ring: int | None = None) -> int:
        """The number of members (with ``ring``: those at distance exactly ``ring``); exact big integers."""
        if ring is None:
            if self.distance is None and self.extra is None:
                return self.mdd.count()
            return self._count(self.mdd.source, self._start(self.distance), 0, self.distance, False)
        if ring < 0 or (self.distance is not None and ring > self.distance):
            return 0
        return self._count(self.mdd.source, self._start(ring), 0, ring, True)

    def ring(self, r: int) -> Iterator[tuple[int, ...]]:
        """The members at distance exactly ``r`` from canonical, depth first (lazily; nothing is listed)."""
        if r < 0 or (self.distance is not None and r > self.distance):
            return
        stack = [(self.mdd.source, self._start(r), ())]
        while stack:
            node, row, path = stack.pop()
            if node == self.mdd.sink:
                if row[-1] == r:
                    yield path
                continue
            if self._count(node, row, len(path), r, True) == 0:
                continue  # no member below: skip the subtree (the count is memoised)
            kids = list(self._children(node, row, len(path), r))
            for t, j, new in reversed(kids):
                stack.append((j, new, path + (t,)))

    def by_distance(self) -> Iterator[tuple[int, tuple[int, ...] | None]]:
        """Every member once, ring by ring: ``(r, v)`` for each member ``v`` at distance ``r``, then ``(r, None)``
        once ring ``r`` is exhausted; ends after the last ring that can hold a member."""
        total, seen = self.count(), 0
        for r in range(self.max_distance() + 1):
            if seen >= total:
                return
            for v in self.ring(r):
                seen += 1
                yield r, v
            yield r, None

    def sample(self, num_samples: int, seed: int | None = None) -> list[tuple[int, ...]]:
        """Members drawn uniformly at random (with replacement; exact: counts are big integers)."""
        if self.count() == 0:
            raise ValueError("the set has no member to sample")
        rng = random.Random(seed)
        bound = self.distance
        out = []
        for _ in range(num_samples):
            node, row, path = self.mdd.source, self._start(bound), []
            while node != self.mdd.sink:
                kids = [(t, j, new, self._count(j, new, len(path) + 1, bound, False))
                        for t, j, new in self._children(node, row, len(path), bound)]
                r = rng.randrange(sum(k[3] for k in kids))
                for t, j, new, n in kids:
                    if r < n:
                        break
                    r -= n
                path.append(t)
                node, row = j, new
            out.append(tuple(path))
        return out
