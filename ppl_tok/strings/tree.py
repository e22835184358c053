"""A token tree off the canonical cache: per-unit figures in LM calls bounded by the tail, not the text.

The byte-synchronous walk (:mod:`ppl_tok.strings.state`) reads a text left to right, one LM call per
byte offset that needs a forward, so a text of ``n`` bytes costs up to ``n`` sequential calls. Here the
text's canonical tokens ``v* = (v_1 .. v_T)`` (ending at the byte offsets ``e_1 < .. < e_T``) are run in
one prefill forward (as canonical scoring runs them), which leaves the state after every canonical prefix
``v_{<=r}`` in the LM's prefix cache. Every unit then gets its own **branch**: a walk rooted at one of
those cached states and covering only a short **tail** of the text, and all the branches of all the texts
advance together, each LM call running the prefixes every branch needs next (the KV pool's prefix
sharing with ragged rows: :func:`~ppl_tok.strings.state.extend_many`). The token sequences the branches
run form one tree hanging off the canonical path at its branch points.

**What a unit's branch covers.** Unit ``k`` spans bytes ``[s_k, i_k)`` of ``x``. Its head is the
canonical prefix ``h_k = v_{<=r_k}``, with ``r_k`` the largest number of canonical tokens that end at or
before

    min( reach(x[:s_k]),  s_k - W )

and not inside a UTF-8 character, where ``reach`` (:func:`~ppl_tok.strings.prefill.reach`) is the earliest
offset from which a token can run past ``s_k`` and ``W`` is :attr:`TokenTree.back_off` (bytes). The
branch covers every token sequence whose first ``r_k`` tokens are ``h_k``: all the tokenizations of the
tail ``x[e_{r_k}:i_k]`` (and of what follows it, for the boundary and end events), none that leave the
canonical path before ``e_{r_k}``. So a path that leaves the canonical tokens at a branch point ``a`` and
rejoins them is covered for the units whose head ends at or before ``a``: those within ``W`` bytes (and
the reach) after it.

**The estimand** is the LM over strings conditioned on that head, as under ``--prefill canonical-head``
(:mod:`ppl_tok.strings.prefill`): with ``E_{k-1}``, ``E_k`` the events of :mod:`ppl_tok.strings.surprisal`,

    s_tree(u_k) = -log2 P(E_k | E_{k-1}, c h_k) = -log2 [ P(E_k | c h_k) / P(E_{k-1} | c h_k) ],

both events read by the one branch (``E_0`` is certain; the first unit's head is empty, so its figure is
the exact one). ``p(h_k | c)`` cancels, so the branch's root has log-probability 0. Each event is
bracketed by the branch's beam as a walk's is (the mass found, plus the pruned mass ``Pi``: every pruned
prefix bounds all its continuations), widened by the rows' rounding tolerance
(:mod:`ppl_tok.strings.certified`), so the unit's bracket is certified **for** ``s_tree(u_k)``. The
tokenizations outside the branch (a non-canonical head) are not in the estimand; it is not a bound on
the exhaustive surprisal ``-log2 P(E_k | E_{k-1})`` (whose ratio also averages over histories that left
the canonical path earlier), and the per-unit figures no longer telescope to ``-log2 P(E_n)``. With the
beam unpruned (``beam`` large, ``prune=inf``) the branch is exact for what it covers (tested against
brute force over exactly those token sequences, 1e-9).

**Detour roots** (``detour_share = tau``). The histories that leave the canonical path in an *earlier*
word (a name split once and copied later) are outside every branch above. A **detour** is a token
sequence ``g`` spelling ``x[:e_b]`` (``e_b`` a canonical boundary) whose last token is not the canonical
token at its start (so it has just rejoined the canonical boundaries), with

    share(g) = p(g | c) / p(v_{<=b} | c) >= tau.

The branches find them among the prefixes their beams ran (level 1: the canonical heads' branches); each
found detour roots, for every unit ``k > 0`` whose head ends at ``e_r`` with ``e_b <= e_r <= e_b + D``
(``D`` = :attr:`TokenTree.detour_reach`), a branch of its own at ``g v_{b+1..r}`` (its canonical
continuation run in one batched call), weighted by ``p(g v_{b+1..r} | c) / p(v_{<=r} | c)``; those
branches find the next level's detours (a history with ``L`` detours is reached at level ``L``, up to
:attr:`TokenTree.detour_depth`). Unit ``k``'s figure sums over its roots ``H_k`` (the canonical head and
the detour roots; distinct sequences spelling the same bytes, so their subtrees are disjoint):

    s_tree(u_k) = -log2 [ sum over h in H_k of P(E_k, h | c) / sum over h in H_k of P(E_{k-1}, h | c) ],

each term bracketed by its branch (found mass, pruned mass, rounding tolerance over the root's weight's
terms too), so the bracket is certified for ``s_tree`` with ``H_k`` as found. What is left out: histories
that leave the canonical path before the head through a detour lighter than ``tau`` (or not run by the
beam that would find it), rejoining more than ``D`` bytes before the head, past ``detour_depth`` detours,
past a unit's ``detour_roots`` heaviest of a level, or straddling the head's end without a canonical
boundary in between.

**LM calls.** A branch needs a forward at most once per byte offset of its tail, and all branches run
together, so a batch of texts costs one prefill call plus at most ``max_k (i_k - e_{r_k})`` calls,
bounded by ``W``, the reach (at most the longest token) and the longest unit, whatever the texts'
lengths (tested on texts of growing length); each detour level adds one batched call (the detours'
canonical continuations) and at most as many again: ``(1 + detour_depth) (1 + max tail)`` in all.
The token-forwards are about those of the walk: the branches' tails overlap by the back-off, and each
branch's beam starts afresh at its root.
"""

from __future__ import annotations

import itertools
import math

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.cover import CoverIndex, cover_index
from ppl_tok.strings.prefill import Head, reach
from ppl_tok.strings.state import StringState, extend_many

#: an event's ``(L, found, U)``: the certified bracket (log) and the mass found (the estimate)
Event = tuple[float, float, float]


@dataclass(frozen=True)
class TokenTree:
    """The token tree's setting: how far before a unit's start its branch begins, and which detours root more.

    The defaults (detours of share ``3e-4`` at any distance, the 2 heaviest roots per unit at each of 2 levels,
    their branches at lazy share ``0.1``), with the search's ``extend_threshold=1e-4``, were chosen on SocialIQA
    dev and checked on OpenBookQA test (docs/strings.md: p99 0.0014, max 0.0021 bits per word from the
    exhaustive walk, issue 58's rule).

    :param back_off: ``W``, bytes: the branch's head ends at least this far before the unit's start (and
        before the reach, always): the tokenizations that leave the canonical path in those bytes are covered.
    :param detour_share: ``tau``: a detour (module docstring) that holds at least this share of the canonical
        path's mass where it rejoins it roots branches of its own (``None``: no detour roots, one level).
    :param detour_reach: ``D``, bytes: a detour roots the branches of the units whose head ends at most this
        far after the detour rejoins (``None``: any later unit of the text; a split name is copied far on).
    :param detour_roots: the most detour roots per unit and level (the heaviest): bounds the branches to
        ``1 + detour_roots * detour_depth`` per unit.
    :param detour_depth: the most levels of detour roots (each level's branches find the detours of the next:
        a history that leaves the canonical path at ``L`` places is covered at ``L`` levels).
    :param detour_extend: the lazy-extension share (``extend_threshold``) of the detours' branches, when it
        should be above the search's (``None``: the search's): a detour's branch adds its root's share of the
        mass, so a coarser beam there costs the figure at most that share of its error.
    """

    back_off: int = 0
    detour_share: float | None = 3e-4
    detour_reach: int | None = None
    detour_roots: int = 2
    detour_depth: int = 2
    detour_extend: float | None = 0.1

    def __post_init__(self) -> None:
        for name, what in (("detour_depth", "levels"), ("detour_roots", "roots per unit")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of {what} >= 1, got {value!r}")
        for name in ("back_off", "detour_reach"):
            value = getattr(self, name)
            if value is None and name == "detour_reach":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of bytes >= 0, got {value!r}")
        share = self.detour_share
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0 < share <= 1):
            raise ValueError(f"detour_share must be a share in (0, 1] (or None: no detour roots), got {share!r}")
        extend = self.detour_extend
        if extend is not None and (isinstance(extend, bool) or not isinstance(extend, (int, float))
                                   or not 0 <= extend < 1):
            raise ValueError(f"detour_extend must be a share in [0, 1) (or None: the search's), got {extend!r}")

    def detour_config(self, config: StringSearchConfig) -> StringSearchConfig:
        """The search setting of the detours' branches (:attr:`detour_extend`)."""
        if self.detour_extend is None or self.detour_extend <= config.extend_threshold:
            return config
        return replace(config, extend_threshold=self.detour_extend)

    def head(self, index: CoverIndex, data: bytes, ends: Sequence[int], cut: int) -> int:
        """``r``: the number of canonical tokens (ending at ``ends``) in the head of the branch whose unit
        starts at byte ``cut`` (module docstring); 0 for the first unit."""
        limit = min(reach(index, data[:cut]), cut - self.back_off)
        r = 0
        for j, e in enumerate(ends, 1):
            if e > limit:
                break
            if e == len(data) or data[e] & 0xC0 != 0x80:  # the tail starts on a character, not inside one
                r = j
        return r


@dataclass
class Branch:
    """One unit's walk: the item and unit, its head (``r`` canonical tokens, ``start`` bytes), the unit's
    start and end offsets, and the two events it reads (``None`` until read). A detour's branch has the
    root's tokens ``ids`` (else the canonical head) and its log-probability relative to the canonical head."""

    item: int
    unit: int
    r: int
    start: int
    cut: int
    end: int
    before: Event | None = None
    after: Event | None = None
    ids: tuple[int, ...] | None = None
    log_weight: float = 0.0


@dataclass(frozen=True)
class Detour:
    """A non-canonical tokenization ``g`` of ``x[:e_b]`` (``b`` canonical tokens end at ``e_b``) whose last token
    is not the canonical one at its start: ``log_share = log p(g | c) - log p(v_{<=b} | c)``."""

    item: int
    b: int
    end: int
    ids: tuple[int, ...]
    log_share: float


def canonical_ends(lm: LanguageModel, ids: Sequence[int]) -> list[int]:
    """The byte offset where each canonical token ends."""
    out, at = [], 0
    for t in ids:
        at += len(lm.vocab[int(t)] or b"")
        out.append(at)
    return out


def plan(lm: LanguageModel, data: bytes, ids: Sequence[int] | None, spans: Sequence[tuple[int, int]],
         tree: TokenTree, item: int = 0) -> list[Branch]:
    """Each unit's :class:`Branch` of one text (``ids``: its canonical tokens, ``None``: none, every head empty)."""
    index = cover_index(lm.vocab)
    ends = canonical_ends(lm, ids or ())
    out = []
    for k, (a, b) in enumerate(spans):
        r = tree.head(index, data, ends, a) if ids else 0
        out.append(Branch(item, k, r, ends[r - 1] if r else 0, a, b))
    return out


def walk_branches(lm: LanguageModel, contexts: Sequence[str | Sequence[int]], datas: Sequence[bytes],
                  ids: Sequence[Sequence[int] | None], branches: Sequence[Branch], config: StringSearchConfig,
                  read: Callable[[Branch, bool, StringState], Event], detour_share: float | None = None,
                  canonical_lp: Sequence[Sequence[float]] = ()
                  ) -> tuple[dict[int, tuple[int, Exception]], list[Detour]]:
    """Walk every branch together, filling ``branch.before`` (``E_{k-1}``) and ``branch.after`` (``E_k``).

    ``read(branch, at_end, state)`` reads an event from the branch's state once it has read the bytes up
    to the unit's start (``at_end`` false; never called for the first unit, whose ``E_0`` is certain) or
    its end. The branch's root is the cached state after ``c v_{<=r}`` (or ``c ids``, a detour's; all roots
    fetched in one batched call); its beam keeps the canonical path. Returns ``{item: (unit, error)}``, the
    first unit of an item whose branch failed (a dead end, ``read``'s error; the item's other branches still
    run), and, with ``detour_share``, the detours the branches found at the canonical boundaries of their
    tails holding at least that share of the canonical path's mass there (each once): a prefix ``g`` the beam
    ran, ``p(g | c) = p(root | c) p(g | c root)``, against ``p(v_{<=b} | c)``, both from ``canonical_lp``
    (per item, ``log p(v_{<=j} | c)`` for ``j = 0..T``) and the branch's weight.
    """
    prefixes = [tuple(lm.prefix_ids(c)) for c in contexts]
    heads = [b.ids if b.ids is not None else tuple((ids[b.item] or ())[:b.r]) for b in branches]
    lm.states(sorted({prefixes[b.item] + h for b, h in zip(branches, heads)}))  # the cache, or one batched call
    states: list[StringState] = []
    feeds: list[bytes] = []
    errors: dict[int, tuple[int, Exception]] = {}
    bounds = [{e: j for j, e in enumerate(canonical_ends(lm, canon or ()), 1)} for canon in ids]
    detours: dict[tuple[int, tuple[int, ...]], Detour] = {}
    floor = math.log(detour_share) if detour_share else math.inf
    for b, head_ids in zip(branches, heads):
        canon = ids[b.item]
        head = Head(head_ids, b.start, 0.0) if head_ids else Head()  # (events relative to the root: merge weighs)
        state = StringState(lm, contexts[b.item], config, prompt=datas[b.item][:b.start], head=head,
                            keep=canon)
        if b.ids is not None:  # the root's weight is a sum of LM terms too (the detour's, the canonical path's over
            # the same bytes, the continuations', each at most the root's length; state.tolerance counts one more)
            state.beam.depth = max(state.beam.depth, 3 * len(head_ids))
        if b.unit == 0:
            b.before = (0.0, 0.0, 0.0)
        elif b.cut == b.start:
            try:
                b.before = read(b, False, state)
            except ValueError as err:
                errors[b.item] = min(errors.get(b.item, (b.unit, err)), (b.unit, err), key=lambda e: e[0])
        states.append(state)
        feeds.append(datas[b.item][b.start:b.end])

    def find_detours(b: Branch, state: StringState, at: int) -> None:
        """The detours among the prefixes the branch ran that end at the canonical boundary ``at``."""
        lp = canonical_lp[b.item]
        root = b.log_weight + lp[b.r] - lp[bounds[b.item][at]]  # log p(root | c) - log p(v_{<=b} | c)
        for c in state.window.get(at, ()):
            h = c.hyp
            share = h.log_prob + root
            start = at - len(lm.vocab[h.token] or b"")
            if h.canonical or h.state is None or share < floor or state.beam.canonical_at.get(start) == h.token:
                continue  # the root's canonical path, not run, too light, or a detour that rejoined before ``at``
            g = tuple(h.state.tokens[len(prefixes[b.item]):])
            detours.setdefault((b.item, g), Detour(b.item, bounds[b.item][at], at, g, share))

    def after(k: int, j: int) -> None:
        b, state = branches[k], states[k]
        at = b.start + j + 1
        if detour_share and at in bounds[b.item]:
            find_detours(b, state, at)
        if at == b.cut:
            b.before = read(b, False, state)
        if at == b.end:
            b.after = read(b, True, state)
            state.window = {}  # the branch is done: its rows may go
            state.beam.open, state.beam.dropped = {}, {}

    failed: dict[int, Exception] = {}
    extend_many(states, feeds, after=after, failed=failed)
    for k, err in failed.items():
        b = branches[k]
        errors[b.item] = min(errors.get(b.item, (b.unit, err)), (b.unit, err), key=lambda e: e[0])
    return errors, sorted(detours.values(), key=lambda d: (d.item, d.end, d.ids))


def detour_branches(lm: LanguageModel, contexts: Sequence[str | Sequence[int]], ids: Sequence[Sequence[int] | None],
                    branches: Sequence[Branch], detours: Sequence[Detour], tree: TokenTree,
                    canonical_lp: Sequence[Sequence[float]]) -> list[Branch]:
    """The next level: for each unit's branch (head ``v_{<=r}``), one branch per detour ``g`` rejoining at
    ``e_b <= e_r`` with ``e_r - e_b <= D``, rooted at ``g v_{b+1..r}`` and weighted by its log-probability
    relative to the head, ``log_share(g) + sum over b < j <= r of log p(v_j | c g v_{b+1..j-1}) -
    log p(v_{b+1..r} | c v_{<=b})`` (the detours' canonical continuations in one batched call); of a unit's,
    the ``detour_roots`` heaviest."""
    by_item: dict[int, list[Detour]] = {}
    for d in detours:
        by_item.setdefault(d.item, []).append(d)
    prefixes = [tuple(lm.prefix_ids(c)) for c in contexts]
    pairs = [(b, d) for b in branches for d in by_item.get(b.item, ())
             if b.unit > 0 and d.b <= b.r and (tree.detour_reach is None or b.start - d.end <= tree.detour_reach)]
    if not pairs:
        return []
    last: dict[Detour, int] = {}
    for b, d in pairs:
        last[d] = max(last.get(d, d.b), b.r)
    run = list(last)
    after_detour = lm.token_log_probs_after([prefixes[d.item] + d.ids for d in run],
                                            [tuple((ids[d.item] or ())[d.b:last[d]]) for d in run])
    path = {d: list(itertools.accumulate(lps, initial=0.0)) for d, lps in zip(run, after_detour)}
    per_unit: dict[tuple[int, int], list[Branch]] = {}
    for b, d in pairs:
        canon, lp = tuple(ids[d.item] or ()), canonical_lp[d.item]
        per_unit.setdefault((b.item, b.unit), []).append(Branch(
            b.item, b.unit, b.r, b.start, b.cut, b.end, ids=d.ids + canon[d.b:b.r],
            log_weight=d.log_share + path[d][b.r - d.b] - (lp[b.r] - lp[d.b])))
    out = [b for level in per_unit.values()
           for b in sorted(level, key=lambda b: -b.log_weight)[:tree.detour_roots]]  # the heaviest roots per unit
    # a root whose last token the continuation call did not run (a backend that caches the states before each
    # token only): all of them in one batched extension of their cached parents
    missing = sorted({prefixes[b.item] + b.ids for b in out if b.ids and not lm.has_state(prefixes[b.item] + b.ids)})
    if missing:
        lm.extend(lm.states([m[:-1] for m in missing]), [m[-1] for m in missing])
    return out


def canonical_log_probs(lm: LanguageModel, contexts: Sequence[str | Sequence[int]],
                        ids: Sequence[Sequence[int] | None]) -> list[list[float]]:
    """Per item, ``log p(v_{<=j} | c)`` for ``j = 0..T``, from the canonical prefixes' rows (in the cache after
    the canonical column)."""
    out = []
    for context, canon in zip(contexts, ids):
        prefix, canon = tuple(lm.prefix_ids(context)), tuple(canon or ())
        rows = lm.states([prefix + canon[:j] for j in range(len(canon))])
        out.append(list(itertools.accumulate((float(s.log_probs[t]) for s, t in zip(rows, canon)), initial=0.0)))
    return out


def merge(branches: Sequence[Branch]) -> tuple[Event, Event]:
    """One unit's events from its branches (their roots' subtrees are disjoint): the masses found, and the
    brackets' sides, each branch's weighted by its root's log-probability relative to the canonical head, summed."""
    def total(events: list[tuple[float, Event]]) -> Event:
        return tuple(logsumexp([w + e[i] for w, e in events]) for i in range(3))  # type: ignore[return-value]

    return (total([(b.log_weight, b.before) for b in branches]),  # type: ignore[misc]
            total([(b.log_weight, b.after) for b in branches]))


#: how surprisal's events are found: the byte-synchronous walk, or the token tree
SEARCHES = ("walk", "tree")


def search_tree(search: str | TokenTree) -> TokenTree | None:
    """The :class:`TokenTree` that ``search`` names (``None``: the walk)."""
    if isinstance(search, TokenTree):
        return search
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)} or a TokenTree, got {search!r}")
    return TokenTree() if search == "tree" else None


def walk_units(lm: LanguageModel, jobs: Sequence[Any], config: StringSearchConfig, tree: TokenTree, boundary: str,
               event: Callable[..., Event], first: Sequence[int] | None = None) -> None:
    """Surprisal's events through the tree: fill each job's ``pairs`` (``(E_{k-1}, E_k)`` per unit), or ``fail``.

    ``jobs`` are :mod:`ppl_tok.strings.surprisal`'s (their bytes, units, canonical tokens, context, which cuts are
    corrected, the last unit's event); ``event(state, k, last, corrected, ascii_bytes, wide_chars)`` reads the event
    after unit ``k`` from a state, as the walk does. ``first``: per job, the first unit given a branch (the units
    before it are read as context only, their ``pairs`` entries ``None``; :mod:`ppl_tok.strings.conditional_tree`).
    """
    ascii_bytes = sorted({ord(c) for c in boundary if ord(c) < 128})
    wide_chars = [c for c in boundary if ord(c) >= 128]
    lm.states(sorted({j.prefix for j in jobs}))  # the contexts in one batched prefill (or the cache)
    branches = [b for i, job in enumerate(jobs) for b in plan(lm, job.data, job.canonical_ids(), job.spans, tree, i)
                if first is None or b.unit >= first[i]]

    def read(b: Branch, at_end: bool, state: StringState) -> Event:
        job = jobs[b.item]
        k = b.unit if at_end else b.unit - 1
        last = job.final if k == len(job.spans) - 1 else None
        return event(state, k, last, job.corrected[k], ascii_bytes, wide_chars)

    contexts, datas, ids = [j.context for j in jobs], [j.data for j in jobs], [j.canonical_ids() for j in jobs]
    lps = canonical_log_probs(lm, contexts, ids) if tree.detour_share else []
    errors, detours = walk_branches(lm, contexts, datas, ids, branches, config, read, tree.detour_share, lps)
    more: list[Branch] = []
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for _ in range(tree.detour_depth):  # each level: the detours the last one found, not seen before
        detours = [d for d in detours if (d.item, d.ids) not in seen and d.item not in errors]
        seen.update((d.item, d.ids) for d in detours)
        level = detour_branches(lm, contexts, ids, branches, detours, tree, lps)
        if not level:
            break
        found, detours = walk_branches(lm, contexts, datas, ids, level, tree.detour_config(config), read,
                                       tree.detour_share, lps)
        for i, e in found.items():
            errors[i] = min(errors.get(i, e), e, key=lambda x: x[0])
        more += level
    for i, (k, err) in errors.items():
        jobs[i].fail(k, err)
    by_unit: dict[tuple[int, int], list[Branch]] = {}
    for b in [*branches, *more]:
        by_unit.setdefault((b.item, b.unit), []).append(b)
    for i, job in enumerate(jobs):
        if job.error is None:
            job.pairs = [merge(by_unit[i, k]) if (i, k) in by_unit else None for k in range(len(job.spans))]


__all__ = ["SEARCHES", "Branch", "Detour", "TokenTree", "canonical_ends", "canonical_log_probs", "detour_branches",
           "merge", "plan", "search_tree", "walk_branches", "walk_units"]
