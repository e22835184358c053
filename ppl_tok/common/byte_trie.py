"""A byte trie of token surfaces, and the Aho-Corasick scan of a text over it (every token occurrence at once)."""

from __future__ import annotations

from array import array


class ByteTrie:
    """A byte trie of token surfaces, stored flat so the garbage collector ignores it.

    Node 0 is the root; ``next[node << 8 | byte]`` is a child and ``ends[node]``
    the ids of the tokens that end there. Dicts of ints (and tuples of ints)
    are not tracked by CPython's cyclic GC: a nested-dict trie of Gemma's
    262k tokens has millions of tracked dicts and slows every full collection.

    :meth:`all_matches` scans a whole text once as an Aho-Corasick automaton
    (Aho and Corasick, 1975) over this trie: ``into[node]`` (``parent << 8 | byte``)
    and ``depth[node]`` are kept as arrays, the failure links and each node's
    suffix outputs are computed on first use and memoised.
    """

    __slots__ = ("next", "ends", "size", "_into", "_depth", "_fail", "_outputs")

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.ends: dict[int, tuple[int, ...]] = {}
        self.size = 1
        self._into = array("q", [-1])  # parent << 8 | byte, per node
        self._depth = array("i", [0])
        self._fail: array | None = None
        self._outputs: dict[int, tuple[tuple[int, int], ...]] = {0: ()}

    def add(self, surface: bytes, token_id: int) -> None:
        node = 0
        for b in surface:
            key = node << 8 | b
            child = self.next.get(key)
            if child is None:
                child = self.next[key] = self.size
                self._into.append(key)
                self._depth.append(self._depth[node] + 1)
                self.size += 1
            node = child
        self.ends[node] = self.ends.get(node, ()) + (token_id,)
        self._fail, self._outputs = None, {0: ()}  # the automaton changed

    def matches(self, data: bytes, start: int) -> list[tuple[int, int]]:
        """All ``(end, token_id)`` with ``surface(token) == data[start:end]``."""
        out: list[tuple[int, int]] = []
        nxt, ends, node = self.next, self.ends, 0
        for j in range(start, len(data)):
            node = nxt.get(node << 8 | data[j])
            if node is None:
                break
            ids = ends.get(node)
            if ids:
                out.extend((j + 1, t) for t in ids)
        return out

    def all_matches(self, data: bytes) -> list[list[tuple[int, int]]]:
        """``[self.matches(data, i) for i in range(len(data))]`` in one pass over ``data``.

        After byte ``j`` the automaton is in the node of the longest suffix of
        ``data[:j + 1]`` that is a prefix of some token; every token ending at
        ``j + 1`` is a suffix of that node's string, listed by :meth:`_suffix_outputs`
        as ``(depth, id)`` and filed under its start ``j + 1 - depth``. Cost:
        ``O(len(data) + matches)`` dict lookups instead of one trie walk per offset.
        Each list is ordered by end, then by id as :meth:`matches` orders it.
        """
        spans: list[list[tuple[int, int]]] = [[] for _ in range(len(data))]
        get, outputs = self.next.get, self._outputs
        fail = self._fail if self._fail is not None else self._new_fail()
        node, end = 0, 0
        for b in data:
            end += 1
            while True:
                child = get(node << 8 | b)
                if child is not None:
                    node = child
                    break
                if not node:
                    break
                node = fail[node] if fail[node] >= 0 else self._fail_of(node)
            found = outputs.get(node)
            if found is None:
                found = self._suffix_outputs(node)
            for depth, t in found:
                spans[end - depth].append((end, t))
        return spans

    def _new_fail(self) -> array:
        fail = self._fail = array("q", [-1]) * self.size
        fail[0] = 0
        return fail

    def _fail_of(self, node: int) -> int:
        """The failure link of ``node``: the node of its string's longest proper suffix that is in the trie."""
        fail, into, get = self._fail, self._into, self.next.get
        assert fail is not None
        pending = []
        while fail[node] < 0:  # the ancestors whose links are still unknown, deepest first
            pending.append(node)
            node = into[node] >> 8
        for c in reversed(pending):
            parent, b = into[c] >> 8, into[c] & 255
            link = 0
            if parent:
                f = fail[parent]
                while True:
                    g = get(f << 8 | b)
                    if g is not None:
                        link = g
                        break
                    if not f:
                        break
                    f = fail[f] if fail[f] >= 0 else self._fail_of(f)  # shallower than c: terminates
            fail[c] = link
        return fail[pending[0]] if pending else fail[node]

    def _suffix_outputs(self, node: int) -> tuple[tuple[int, int], ...]:
        """``(depth, id)`` of every token whose surface is a suffix of ``node``'s string, longest first."""
        fail, outputs, ends, depth = self._fail, self._outputs, self.ends, self._depth
        assert fail is not None
        chain = []
        while node not in outputs:
            chain.append(node)
            node = fail[node] if fail[node] >= 0 else self._fail_of(node)
        found = outputs[node]
        for c in reversed(chain):
            own = ends.get(c, ())
            found = outputs[c] = tuple((depth[c], t) for t in own) + found if own else found
        return found
