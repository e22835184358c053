"""A long walk of the LM over strings saved mid-string as a JSON record, and rebuilt from it (resume mid-document).

Between two steps, a sweep of :mod:`ppl_tok.strings.marginal` (the byte-synchronous beam over a
text's MDD) and a walk of :class:`~ppl_tok.strings.state.StringState` hold:

* **hypotheses**: token prefixes spelling the text up to their offset, with their log prefix
  probability ``log p(h | c)`` and whether they are on the kept (canonical) path; a *pending*
  one (not yet run through the LM) is its parent's path and one token, a *run* one (a walk's
  window) its own path and the slice ``[a, a + n)`` of its next-token row in byte order;
* the **pruned masses** (``log p(h)`` of every dropped prefix), the **found** tokenizations
  (a sweep's complete paths and their log p), the counters (``forwards``, ``kept``, ``depth``),
  the bytes read and, for a walk, the canonical head and the heals.

A record holds all of it: the token paths as one trie (``nodes``: ``[parent, token]``, parent
``-1`` the root), floats as JSON writes them (the shortest repr that reads back to the same
float), and the pruned list as the part appended since the previous record of the same walk
(``pruned_from``: the entries it keeps of that record's list; :func:`pruned_delta`), so a
checkpoint costs the walk's frontier, not its history.

**What is not stored**: the LM states (a transformer's KV entries, megabytes). :func:`rebuild_states`
runs them again from the walk's root (BOS and the context, the state it started from) by one
batched one-token :meth:`~ppl_tok.lm.base.LanguageModel.extend` per depth over the trie of the
paths: the same one-token forwards the walk ran, in other batches. Every stored float is the
uninterrupted walk's; the rows computed after a resume equal its rows where a row does not
depend on the batch it is computed in (the toy LMs: the resumed figures are the same floats)
and otherwise differ by the float32 rounding of a batched forward, inside the bracket's
rounding tolerance (:mod:`ppl_tok.common.rounding`), as two uninterrupted runs in other
batches do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ppl_tok.lm.base import LanguageModel, LMState
from ppl_tok.strings.beam import ByteBeam, Hypothesis

#: the version of a checkpoint record's layout (a record of another version is refused, not misread)
CHECKPOINT_VERSION = 1


class _Trie:
    """Token paths as ``[parent, token]`` rows (parent ``-1``: the root), each distinct prefix once."""

    def __init__(self) -> None:
        self.rows: list[list[int]] = []
        self._ids: dict[tuple[int, int], int] = {}

    def add(self, path: Iterable[int]) -> int:
        node = -1
        for t in path:
            key = (node, int(t))
            got = self._ids.get(key)
            if got is None:
                got = self._ids[key] = len(self.rows)
                self.rows.append([node, int(t)])
            node = got
        return node


def trie_paths(nodes: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """The path of each trie node (``nodes`` as :class:`_Trie` writes them: parents before children)."""
    paths: list[tuple[int, ...]] = []
    for k, (parent, token) in enumerate(nodes):
        if not -1 <= parent < k:
            raise ValueError(f"checkpoint trie node {k} names parent {parent}, not an earlier node")
        paths.append((() if parent < 0 else paths[parent]) + (int(token),))
    return paths


def rebuild_states(lm: LanguageModel, root: LMState, paths: Iterable[Sequence[int]]) -> dict[tuple[int, ...], LMState]:
    """The LM state after ``root`` and each of ``paths``, by one batched one-token extend per depth.

    Every prefix shared by several paths runs once; a path of ``d`` tokens costs ``d`` calls
    whatever the number of paths (the trie's depth), the positions run the trie's nodes.
    """
    want = {tuple(int(t) for t in p) for p in paths}
    states: dict[tuple[int, ...], LMState] = {(): root}
    depth = max((len(p) for p in want), default=0)
    for d in range(1, depth + 1):
        keys = sorted({p[:d] for p in want if len(p) >= d})
        made = lm.extend([states[k[:-1]] for k in keys], [k[-1] for k in keys])
        for old in [k for k in states if len(k) == d - 1 and k not in want]:
            del states[old]  # only the frontier and the wanted states stay held
        states.update(zip(keys, made))
    return {p: states[p] for p in want}


def pruned_delta(previous: Sequence[float] | None, current: Sequence[float]) -> tuple[int, list[float]]:
    """``(k, tail)``: ``current`` is ``previous[:k] + tail`` (``k`` the longest common start)."""
    if previous is None:
        return 0, list(current)
    k = len(previous)
    if len(current) < k or list(current[:k]) != list(previous):
        k = next((i for i, (a, b) in enumerate(zip(previous, current)) if a != b), min(len(previous), len(current)))
    return k, list(current[k:])


def join_pruned(records: Sequence[dict[str, Any]]) -> list[float]:
    """The pruned list of the last of ``records`` (one walk's, in order), from each record's delta."""
    pruned: list[float] = []
    for r in records:
        k = r["pruned_from"]
        if not 0 <= k <= len(pruned):
            raise ValueError(f"checkpoint step {r.get('step')} keeps {k} pruned masses of a list of {len(pruned)}")
        pruned = pruned[:k] + [float(v) for v in r["pruned"]]
    return pruned


def _float(x: float) -> float | None:
    """A log-probability for JSON (``-inf``, no mass, as ``null``)."""
    return None if x == -math.inf else x


def _log(x: float | None) -> float:
    return -math.inf if x is None else float(x)


class Saver:
    """When the walks of one lockstep are saved, and what each one's record keeps of its previous one.

    :param save: called with ``[(walk's position, record), ...]`` (the walks that moved since their last record).
    :param every: seconds between two saves (0: after every step).
    :param resumed: per walk, the records it was resumed from (``None``: a fresh walk).
    :param record_of: ``record_of(walk, previous pruned list)``: :func:`sweep_record` or :func:`state_record`.
    """

    def __init__(self, save: Callable[[list[tuple[int, dict[str, Any]]]], None], every: float,
                 resumed: Sequence[Sequence[dict[str, Any]] | None], record_of: Callable[..., dict[str, Any]]):
        self.save, self.every, self.record_of = save, every, record_of
        self.previous = [join_pruned(r) if r else None for r in resumed]
        self.marks: list[Any] = [(r[-1]["offset"], r[-1].get("done")) if r else None for r in resumed]
        self.last = time.monotonic()

    def __call__(self, walks: Sequence[Any]) -> None:
        if time.monotonic() - self.last < self.every:
            return
        out = []
        for k, w in enumerate(walks):
            mark = (w.at, w.done) if hasattr(w, "done") else (len(w.data), None)
            if mark == self.marks[k]:
                continue
            out.append((k, self.record_of(w, self.previous[k])))
            self.previous[k], self.marks[k] = list(w.beam.pruned), mark
        if out:
            self.save(out)
        self.last = time.monotonic()


# ------------------------------------------------------------------ hypotheses
def _pending(trie: _Trie, offset: int, h: Hypothesis) -> list[Any]:
    """A pending hypothesis: ``[offset, parent's node, token, log p, canonical]``."""
    parent = trie.add(h.tokens()[:-1])
    return [offset, parent, h.token, h.log_prob, h.canonical]


def _beam_fields(beam: ByteBeam, trie: _Trie, previous: Sequence[float] | None) -> dict[str, Any]:
    k, tail = pruned_delta(previous, beam.pruned)
    return {"open": [_pending(trie, o, h) for o, hs in sorted(beam.open.items()) for h in hs],
            "dropped": [_pending(trie, o, h) for o, hs in sorted(beam.dropped.items()) for h in hs],
            "pruned_from": k, "pruned": tail, "depth": beam.depth, "forwards": beam.forwards, "kept": beam.kept}


class _Restored:
    """The hypotheses of a record over a trie, with the LM states they need rebuilt from ``root``."""

    def __init__(self, lm: LanguageModel, root: LMState, record: dict[str, Any], own: Sequence[int] = ()):
        if record.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"a checkpoint of layout version {record.get('version')!r}, this ppl-tok reads "
                             f"{CHECKPOINT_VERSION}")
        self.paths = trie_paths(record["nodes"])
        self.root = Hypothesis(0.0, state=root, canonical=True)
        chain: list[Hypothesis] = []
        for k, (parent, token) in enumerate(record["nodes"]):  # the back-chains (only their tokens are read)
            chain.append(Hypothesis(0.0, token=int(token), back=self.root if parent < 0 else chain[parent]))
        self.chain = chain
        needed = [self.path(r[1]) for r in record["open"] + record["dropped"]] + [self.path(n) for n in own]
        self.states = rebuild_states(lm, root, needed)

    def path(self, node: int) -> tuple[int, ...]:
        return () if node < 0 else self.paths[node]

    def back(self, node: int) -> Hypothesis:
        return self.root if node < 0 else self.chain[node]

    def pending(self, rows: Sequence[Sequence[Any]]) -> dict[int, list[Hypothesis]]:
        out: dict[int, list[Hypothesis]] = {}
        for offset, parent, token, log_prob, canonical in rows:
            out.setdefault(int(offset), []).append(Hypothesis(float(log_prob), parent=self.states[self.path(parent)],
                                                              token=int(token), canonical=bool(canonical),
                                                              back=self.back(parent)))
        return out

    def run(self, node: int, log_prob: float, canonical: bool) -> Hypothesis:
        """A run hypothesis: the chain's node, given its log p, canonical flag and rebuilt state."""
        h = self.back(node)  # node -1: the root
        h.log_prob, h.canonical, h.state = float(log_prob), bool(canonical), self.states[self.path(node)]
        return h

    def restore_beam(self, beam: ByteBeam, record: dict[str, Any], pruned: list[float]) -> None:
        beam.open = self.pending(record["open"])
        beam.dropped = self.pending(record["dropped"])
        beam.pruned = pruned
        beam.depth, beam.forwards, beam.kept = int(record["depth"]), int(record["forwards"]), int(record["kept"])


# ------------------------------------------------------------------ sweeps (ppl_tok.strings.marginal)
def sweep_record(sweep: Any, previous: Sequence[float] | None = None) -> dict[str, Any]:
    """The record of a sweep (:class:`ppl_tok.strings.marginal._Sweep`) after it expanded offset ``sweep.at``
    (``previous``: the pruned list of the walk's previous record, for the delta)."""
    trie = _Trie()
    found = [[trie.add(path), _float(lp)] for path, lp in sweep.found.items()]
    return {"version": CHECKPOINT_VERSION, "walk": "sweep", "offset": sweep.at, "done": sweep.done,
            **_beam_fields(sweep.beam, trie, previous), "found": found, "canonical_lp": _float(sweep.canonical_lp),
            "nodes": trie.rows}


def restore_sweep(sweep: Any, records: Sequence[dict[str, Any]]) -> None:
    """Put a fresh sweep (same text, context, config) into the state of the last of ``records`` (its walk's)."""
    record = records[-1]
    if record.get("walk") != "sweep":
        raise ValueError(f"a checkpoint of a {record.get('walk')!r} walk, not of a sweep")
    restored = _Restored(sweep.lm, sweep.root, record)
    restored.restore_beam(sweep.beam, record, join_pruned(records))
    sweep.found = {restored.path(n): _log(lp) for n, lp in record["found"]}
    sweep.canonical_lp = _log(record["canonical_lp"])
    sweep.skip_to(int(record["offset"]), bool(record["done"]))


# ------------------------------------------------------------------ walks (ppl_tok.strings.state)
def state_record(state: Any, previous: Sequence[float] | None = None) -> dict[str, Any]:
    """The record of a :class:`~ppl_tok.strings.state.StringState` between two bytes (not healing)."""
    trie = _Trie()
    window = [[i, trie.add(c.hyp.tokens()), c.hyp.log_prob, c.hyp.canonical, c.a, len(c.vals), _float(c.end)]
              for i, cs in sorted(state.window.items()) for c in cs]
    head = state.head
    return {"version": CHECKPOINT_VERSION, "walk": "state", "offset": len(state.data), "data": state.data.hex(),
            "head": [list(head.ids), head.n_bytes, head.log_prob], "heals": state.heals,
            **_beam_fields(state.beam, trie, previous), "window": window, "nodes": trie.rows}


def restore_state(lm: LanguageModel, context: str | Sequence[int], config: Any, keep: Sequence[int] | None,
                  records: Sequence[dict[str, Any]]) -> Any:
    """The :class:`~ppl_tok.strings.state.StringState` of the last of ``records`` (one walk's, in order)."""
    from ppl_tok.strings.cover import cover_index
    from ppl_tok.strings.prefill import Head
    from ppl_tok.strings.state import StringState, _Cover

    record = records[-1]
    if record.get("walk") != "state":
        raise ValueError(f"a checkpoint of a {record.get('walk')!r} walk, not of a string state")
    state = object.__new__(StringState)
    state.lm, state.config, state.index = lm, config, cover_index(lm.vocab)
    ids, n_bytes, head_lp = record["head"]
    state.head, state.base = Head(tuple(int(t) for t in ids), int(n_bytes), float(head_lp)), int(n_bytes)
    state.data = bytearray.fromhex(record["data"])
    root = lm.state(lm.prefix_ids(context) + state.head.ids) if state.head.ids else lm.initial(context)
    along: dict[int, int] = {}
    at = 0
    for t in keep or ():
        along[at] = int(t)
        at += len(lm.vocab[int(t)] or b"")
    state.beam = ByteBeam(lm, root, config, along, start=state.base, log_prob=state.head.log_prob)
    if config.prune_against == "text" or config.lazy:
        state.beam.keep_dropped = state.index.longest
    restored = _Restored(lm, root, record, own=[w[1] for w in record["window"]])
    restored.restore_beam(state.beam, record, join_pruned(records))
    ids_on, _ = state.index.on(root.log_probs.device)
    state.window = {}
    for i, node, log_prob, canonical, a, n, end in record["window"]:
        h = restored.run(node, log_prob, canonical)
        vals = h.state.log_probs[ids_on][a: a + n]
        state.window.setdefault(int(i), []).append(_Cover(h, int(a), vals, _log(end)))
    state.heals, state._healing, state._shared = int(record["heals"]), False, False
    return state


__all__ = ["CHECKPOINT_VERSION", "Saver", "join_pruned", "pruned_delta", "rebuild_states", "restore_state", "restore_sweep",
           "state_record", "sweep_record", "trie_paths"]
