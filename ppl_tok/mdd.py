"""The multi-valued decision diagram (MDD) of all tokenizations of a string.

Geh et al. (2024), Sec. 3 and Algorithm 1: every tokenization of a string x is
a path through a DAG whose nodes are positions in x and whose edges are tokens.
Here the nodes are byte offsets ``0..len(x)`` and an edge ``i -> j`` keyed by
token id ``t`` exists iff ``bytes(t) == x[i:j]``. The MDD *is* a networkx
``MultiDiGraph`` (parallel edges keep tokens that share a surface), so every
networkx algorithm applies; the methods below are the ones the paper needs.

Construction scans the text once with an Aho-Corasick automaton over a byte trie of the vocabulary
(:meth:`~ppl_tok.common.byte_trie.ByteTrie.all_matches`; cost: the text's length plus the matches, not ``|V|``),
then prunes offsets that cannot reach the end. The pruned out-edges are kept as plain lists, and networkx's
adjacency dicts are filled from them the first time anything reads the graph as a graph (:func:`_filled_on_read`):
a caller that only counts, samples, enumerates or checks a path never pays for them. Algorithm 1 as written scans
the whole vocabulary at every position; :func:`compile_mdd_naive` keeps that version as an independent check.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import networkx as nx

from ppl_tok.vocabulary import ByteFallback, Vocabulary


T = TypeVar("T")


def _log_sum_exp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


class NoTokenizationError(ValueError):
    """The text has no tokenization under the vocabulary."""


def _filled_on_read(name: str, base) -> property:
    """networkx's storage attribute ``name`` of an :class:`MDD`, filled from the compiled out-edge lists on its
    first read (:meth:`MDD._materialize`); setting it is networkx's own setter ``base``."""
    def get(mdd: MDD):
        if "_out" in mdd.__dict__:
            mdd._materialize()
        return mdd.__dict__[name]
    return property(get, base.__set__)


class MDD(nx.MultiDiGraph):
    """All tokenizations of ``text`` as a DAG over byte offsets.

    Nodes are the byte offsets that lie on some complete path; edges
    ``(i, j, key=token_id)``. ``mdd.source == 0`` and ``mdd.sink == len(text)``.
    The graph attributes ``text`` (bytes) and ``vocab`` hold the inputs.

    A compiled MDD holds its out-edges as lists (``_out[i] = [(j, token_id), ...]`` in networkx's
    ``out_edges(i)`` order) until the networkx graph is first read; then networkx's dicts are filled from them
    and own the graph from there on. Counting, sampling, enumeration and :meth:`accepts` read whichever is there.
    """

    _node = _filled_on_read("_node", nx.Graph.__dict__["_node"])
    _adj = _filled_on_read("_adj", nx.DiGraph.__dict__["_adj"])
    _succ = _filled_on_read("_succ", nx.DiGraph.__dict__["_succ"])
    _pred = _filled_on_read("_pred", nx.DiGraph.__dict__["_pred"])

    def _materialize(self) -> None:
        """Fill networkx's dicts from ``_out`` (``succ[i][j] is pred[j][i]``, as networkx lays them), drop ``_out``."""
        od = self.__dict__
        out = od.pop("_out")
        node, succ, pred = od["_node"], od["_adj"], od["_pred"]
        for i in out:
            node[i], succ[i], pred[i] = {}, {}, {}
        for i, edges in out.items():
            here = succ[i]
            for j, t in edges:
                keys = here.get(j)
                if keys is None:
                    keys = here[j] = pred[j][i] = {}
                keys[t] = {}

    def _out_lists(self) -> dict[int, list[tuple[int, int]]]:
        """``{i: [(j, token_id), ...]}`` for every node in ``out_edges`` order (compiled, or read from networkx)."""
        out = self.__dict__.get("_out")
        if out is None:
            out = {i: [(j, t) for j, keys in nbrs.items() for t in keys] for i, nbrs in self._adj.items()}
        return out

    @property
    def text(self) -> bytes:
        return self.graph["text"]

    @property
    def vocab(self) -> Vocabulary:
        return self.graph["vocab"]

    @property
    def source(self) -> int:
        return 0

    @property
    def sink(self) -> int:
        return len(self.graph["text"])

    def out_tokens(self, node: int) -> dict[int, int]:
        """The tokens allowed at ``node``, each with the node it leads to (memoised: treat it as read-only)."""
        memo = self.__dict__.setdefault("_out_tokens_memo", {})
        out = memo.get(node)
        if out is None:
            edges = self.__dict__.get("_out", {}).get(node)
            if edges is None:
                out = memo[node] = {t: j for _, j, t in self.out_edges(node, keys=True)}
            else:
                out = memo[node] = {t: j for j, t in edges}
        return out

    # -------------------------------------------------------------- counting
    def _fold(self, combine: Callable[[list[T]], T], at_sink: T, *, window: bool = False) -> dict[int, T]:
        """``value[i] = combine([value[j] for each edge i -> j])`` backward from ``value[sink] = at_sink``.

        With ``window``, only the values some smaller node can still reach are
        kept (an edge spans at most the longest token): memory linear in the
        length even when each value is a big integer with as many digits.
        """
        out = self._out_lists()
        longest = max((j - i for i, edges in out.items() for j, _ in edges), default=0)
        values: dict[int, T] = {self.sink: at_sink}
        order = deque([self.sink])  # decreasing node
        for i in sorted(out, reverse=True):
            if i == self.sink:
                continue
            values[i] = combine([values[j] for j, _ in out[i]])
            if window:
                order.append(i)
                while order[0] > i + longest:
                    del values[order.popleft()]
        return values

    @cached_property
    def path_counts(self) -> dict[int, int]:
        """``path_counts[i]``: the number of tokenizations of ``text[i:]`` (exact big integers).

        Every node's big integer is kept, so memory grows with the square of the
        text's length: guides should use :attr:`log_path_counts` or
        :meth:`capped_path_counts`, and :meth:`count` needs neither.
        """
        return self._fold(sum, 1)

    @cached_property
    def log_path_counts(self) -> dict[int, float]:
        """``log_path_counts[i]``: the natural log of :attr:`path_counts` ``[i]``, as floats.

        Memory linear in the length; accurate to a few ulps per node.
        """
        return self._fold(_log_sum_exp, 0.0)

    def capped_path_counts(self, cap: int) -> dict[int, int]:
        """``min(path_counts[i], cap)`` for every node: exact below ``cap``, memory linear in the length."""
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        return self._fold(lambda counts: min(cap, sum(counts)), 1)

    def count(self) -> int:
        """The number of tokenizations of the text (a Python big integer; memory linear in the length)."""
        if "path_counts" in self.__dict__:
            return self.path_counts[self.source]
        if "_count" not in self.__dict__:
            self.__dict__["_count"] = self._fold(sum, 1, window=True)[self.source]
        return self.__dict__["_count"]

    # ---------------------------------------------------------- enumeration
    def enumerate(self, limit: int | None = None, start: int | None = None) -> Iterator[tuple[int, ...]]:
        """Yield tokenizations (tuples of ids) depth-first; at most ``limit`` of them.

        With ``start``, the completions from that node to the sink instead.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        produced = 0
        out = self._out_lists()
        if start is not None and start not in out:
            raise ValueError(f"start {start} is not a node of the MDD (its nodes: {sorted(out)})")
        stack: list[tuple[int, tuple[int, ...]]] = [(self.source if start is None else start, ())]
        while stack:
            node, path = stack.pop()
            if node == self.sink:
                if limit is not None and produced >= limit:
                    return
                produced += 1
                yield path
                continue
            for j, t in sorted(out[node], reverse=True):
                stack.append((j, path + (t,)))

    def sample(self, num_samples: int = 1, seed: int | None = None) -> list[tuple[int, ...]]:
        """Tokenizations drawn uniformly at random (exact, with big-integer counts)."""
        rng = random.Random(seed)
        counts, edges = self.path_counts, self._out_lists()
        out = []
        for _ in range(num_samples):
            node, path = self.source, []
            while node != self.sink:
                r = rng.randrange(counts[node])
                for j, t in edges[node]:
                    if r < counts[j]:
                        break
                    r -= counts[j]
                path.append(t)
                node = j
            out.append(tuple(path))
        return out

    def accepts(self, tokens: Sequence[int]) -> bool:
        """Whether ``tokens`` is a path from source to sink (a tokenization)."""
        node, out = self.source, self.__dict__.get("_out")
        for t in tokens:
            s = self.vocab[t] if 0 <= t < len(self.vocab) else None
            if s is None:
                return False
            if out is None:
                if not self.has_edge(node, node + len(s), key=t):
                    return False
            elif (node + len(s), t) not in out.get(node, ()):
                return False
            node += len(s)
        return node == self.sink

    __contains__ = nx.MultiDiGraph.__contains__  # keep node membership semantics

    def canonical(self) -> tuple[int, ...]:
        """The tokenizer's canonical tokenization of the text (a path of the MDD)."""
        tokens = tuple(self.vocab.encode(self.text.decode("utf-8")))
        if not self.accepts(tokens):
            raise ValueError(
                f"the canonical tokenization {tokens} of {self.text!r} is not a path of its MDD "
                f"(byte-fallback policy {self.vocab.fallback.value!r})"
            )
        return tokens

    def describe(self, tokens: Sequence[int]) -> list[str]:
        """Human-readable names of ``tokens``."""
        return [self.vocab.token_name(t) for t in tokens]

    # --------------------------------------------------------------- export
    def to_dot(self, path: str | Path | None = None) -> str:
        """Graphviz DOT text (written to ``path`` if given): nodes left to right, the sink a box."""
        lines = ["digraph mdd {", "  rankdir=LR;", '  node [shape=circle, fontsize=10];']
        lines.append(f'  {self.sink} [shape=square, label=""];')
        for i, j, t in sorted(self.edges(keys=True)):
            label = self.vocab.token_name(t).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'  {i} -> {j} [label="{label}"];')
        lines.append("}")
        dot = "\n".join(lines) + "\n"
        if path is not None:
            Path(path).write_text(dot, encoding="utf-8")
        return dot

    def draw(self, path: str | Path, max_edges: int = 400) -> None:
        """Draw the MDD to an image file (PNG), nodes placed by byte offset.

        Meant for small MDDs like the paper's Fig. 2 drawing of ``Bird``.
        """
        if self.number_of_edges() > max_edges:
            raise ValueError(
                f"the MDD has {self.number_of_edges()} edges; drawing is limited to {max_edges} "
                "(raise max_edges, or export DOT instead)"
            )
        from ppl_tok.common.plotting import pyplot

        plt = pyplot()
        from matplotlib.patches import FancyArrowPatch  # after pyplot(): the backend is chosen first

        nodes = sorted(self.nodes)
        fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(nodes), 1.0 + 0.7 * len(nodes)))
        for n in nodes:
            shape = "s" if n == self.sink else "o"
            ax.plot(n, 0, shape, ms=16, mfc="white", mec="black", zorder=3)
            ax.text(n, 0, str(n), ha="center", va="center", fontsize=7, zorder=4)
        # Fan parallel and long edges out as arcs of different curvature,
        # alternately below and above the line of nodes.
        seen: dict[tuple[int, int], int] = {}
        extent = 0.6
        for i, j, t in sorted(self.edges(keys=True)):
            k = seen.get((i, j), 0)
            seen[(i, j)] = k + 1
            span = j - i
            rad = 0.0 if (span == 1 and k == 0) else 0.3 + 0.15 * k
            sign = 1 if (span + k) % 2 else -1
            arrow = FancyArrowPatch((i, 0), (j, 0), connectionstyle=f"arc3,rad={sign * rad}",
                                    arrowstyle="-|>", mutation_scale=10, shrinkA=9, shrinkB=9, lw=0.8)
            ax.add_patch(arrow)
            y = -sign * rad * span / 2  # arc3 bends by rad * chord at the control point
            extent = max(extent, abs(y) + 0.4)
            ax.text((i + j) / 2, y, self.vocab.token_name(t), ha="center", va="center", fontsize=7,
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none"))
        ax.set_aspect("equal")
        ax.set_xlim(-0.7, self.sink + 0.7)
        ax.set_ylim(-extent, extent)
        ax.axis("off")
        ax.set_title(f"MDD of {self.text.decode('utf-8', 'replace')!r}: {self.count()} tokenizations",
                     fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=150)
        plt.close(fig)


# ---------------------------------------------------------------- compiling
def _as_bytes(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if not data:
        raise ValueError("cannot compile the MDD of the empty string: it has no tokenization")
    return data


def _characters(data: bytes):
    """``(index, byte offset, character, width)`` of each character (raw non-UTF-8 bytes as surrogates)."""
    offset = 0
    for pos, ch in enumerate(data.decode("utf-8", errors="surrogateescape")):
        width = len(ch.encode("utf-8", errors="surrogateescape"))
        yield pos, offset, ch, width
        offset += width


def _coverage(data: bytes, matches: list[list[tuple[int, int]]]) -> bytearray:
    """``covered[b]`` is 1 where some token occurrence (``matches[i]``: its ends at offset i) spans byte b."""
    covered = bytearray(len(data))
    for i, ms in enumerate(matches):
        for end, _ in ms:
            covered[i:end] = b"\x01" * (end - i)
    return covered


def _fallback_positions(data: bytes, vocab: Vocabulary, matches: list[list[tuple[int, int]]]) -> list[int]:
    """Byte offsets where the paper's policy allows byte pieces.

    A character (a UTF-8 sequence) is covered if some ordinary token occurrence
    in the text spans it (``matches[i]`` are the ordinary matches at offset i);
    byte pieces may spell only the characters that are not.
    """
    if not data.translate(None, vocab._ascii_tokens):  # every byte is an ASCII character with a token of its own
        return []
    single = vocab._by_surface
    spans = [(offset, offset + width) for _, offset, ch, width in _characters(data)  # not a token by themselves
             if not any(t not in vocab.byte_fallback_ids
                        for t in single.get(ch.encode("utf-8", errors="surrogateescape"), ()))]
    if not spans:
        return []
    covered = _coverage(data, matches)
    return [i for a, b in spans if not all(covered[a:b]) for i in range(a, b)]


def _edges(data: bytes, vocab: Vocabulary) -> list[list[tuple[int, int]]]:
    """Out-edges of every offset: ``edges[i] = [(end, token), ...]``."""
    policy = vocab.fallback
    has_bytes = bool(vocab.byte_fallback_ids)
    trie = vocab.trie(policy is ByteFallback.ALWAYS and has_bytes)
    edges = trie.all_matches(data)
    if has_bytes and policy is ByteFallback.PAPER:
        for i in _fallback_positions(data, vocab, edges):
            pieces = [(i + 1, t) for t in vocab.ids_of(data[i:i + 1]) if t in vocab.byte_fallback_ids]
            here = edges[i]  # after the one-byte tokens there if any (networkx groups out-edges by end), else last
            at = next((k for k, (end, _) in enumerate(here) if end != i + 1), len(here)) or len(here)
            here[at:at] = pieces
    return edges


def _build(data: bytes, vocab: Vocabulary, edges: list[list[tuple[int, int]]]) -> MDD:
    """The pruned MDD: offsets reachable from 0 that can reach the end."""
    n = len(data)
    mdd = MDD(text=data, vocab=vocab)
    if all(here and here[0][0] == i + 1 for i, here in enumerate(edges)):
        # A one-byte token at every offset (every natural text under a byte-level vocabulary): every offset is
        # reachable and reaches the end, nothing is pruned.
        out = dict(enumerate(edges))
        out[n] = []
        mdd.__dict__["_out"] = out
        return mdd
    reach = bytearray(n + 1)
    reach[0] = 1
    for i in range(n):
        if reach[i]:
            for end, _ in edges[i]:
                reach[end] = 1
    alive = bytearray(n + 1)
    alive[n] = reach[n]
    for i in range(n - 1, -1, -1):
        if reach[i] and any(alive[end] for end, _ in edges[i]):
            alive[i] = 1
    if not alive[0]:
        raise _no_tokenization_error(data, vocab, edges, reach)
    mdd.__dict__["_out"] = {i: [e for e in edges[i] if alive[e[0]]] if i < n else []
                            for i in range(n + 1) if alive[i]}
    return mdd


def _no_tokenization_error(data: bytes, vocab: Vocabulary, edges: list[list[tuple[int, int]]],
                           reach: bytearray) -> NoTokenizationError:
    """Name the characters no token covers, or else how far any tokenization gets."""
    covered = _coverage(data, edges)
    bad = []
    for pos, offset, ch, width in _characters(data):
        if not all(covered[offset:offset + width]):
            if 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte that is not valid UTF-8
                bad.append(f"the raw byte 0x{ord(ch) - 0xDC00:02X} (not UTF-8) at byte {offset}")
            else:
                bad.append(f"{ch!r} (U+{ord(ch):04X}) at character {pos}, byte {offset}")
    shown = data.decode("utf-8", errors="replace")
    if bad:
        return NoTokenizationError(
            f"{shown!r} has no tokenization under {vocab.name}: no token covers " + "; ".join(bad)
        )
    furthest = max(i for i, r in enumerate(reach) if r)
    return NoTokenizationError(
        f"{shown!r} has no tokenization under {vocab.name}: every character is covered by some token, "
        f"but no sequence of tokens gets past byte {furthest}"
    )


def compile_mdd(text: str | bytes, vocab: Vocabulary) -> MDD:
    """Compile the MDD of all tokenizations of ``text`` under ``vocab``.

    The text is taken literally (no dummy-prefix space is added). Raises
    :class:`NoTokenizationError` naming the uncovered characters and their
    positions when the text has no tokenization, and ``ValueError`` when it is
    empty.
    """
    data = _as_bytes(text)
    return _build(data, vocab, _edges(data, vocab))


def compile_mdd_naive(text: str | bytes, vocab: Vocabulary) -> MDD:
    """Algorithm 1 as written: scan the whole vocabulary at every position.

    Ordinary tokens only (no byte fallback); kept as the speed baseline of
    ``python -m benchmarks mdd`` and as an independent check of :func:`compile_mdd`.
    """
    data = _as_bytes(text)
    items = [(t, s) for t, s in enumerate(vocab.surfaces) if s is not None and t not in vocab.byte_fallback_ids]
    edges = [[(i + len(s), t) for t, s in items if data.startswith(s, i)] for i in range(len(data))]
    reach, alive = {0}, {len(data)}
    for i in range(len(data)):
        if i in reach:
            reach.update(end for end, _ in edges[i])
    for i in range(len(data) - 1, -1, -1):
        if any(end in alive for end, _ in edges[i]):
            alive.add(i)
    keep = alive & reach
    if 0 not in keep:
        raise _no_tokenization_error(data, vocab, edges, bytearray(i in reach for i in range(len(data) + 1)))
    mdd = MDD(text=data, vocab=vocab)
    mdd.add_nodes_from(sorted(keep))
    mdd.add_edges_from((i, end, t) for i in sorted(keep - {len(data)}) for end, t in edges[i] if end in keep)
    return mdd
