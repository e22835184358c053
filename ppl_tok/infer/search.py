"""Best-first search over the tree of token prefixes that the MDD allows.

One engine answers two questions (Geh et al., 2024, Secs. 4-5):

* the **sum** (:func:`marginal_bounds`): every complete tokenization found adds
  its probability to a lower bound on ``p(x | c)``; every prefix left
  unexpanded adds its own prefix probability to the upper bound, since all its
  completions together cannot exceed it. The bracket is certified: it always
  contains the exact marginal, and it closes as the search goes on.
* the **max** (:func:`most_likely`): the best complete tokenization found is a
  lower bound on the most likely one; the best open prefix is an upper bound
  (prefix probabilities never increase along a path). A prefix below the best
  complete path is pruned (branch and bound); optimality is proven when no
  open prefix beats the best path. The best path found first is the most
  likely tokenization whenever the bracket closes.

Prefixes are expanded in batches (the ``batch`` most probable at once, one LM
call), and their LM states come from the LM's incremental state: a prefix's
forward is the forward of its last token, never a recomputation (the paper's
branch-and-bound rescored the whole prefix at every expansion).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from ppl_tok.limits import check_contexts, check_texts
from ppl_tok.infer.diagnostics import CERTIFIED
from ppl_tok.lm.base import LanguageModel, LMState
from ppl_tok.lm.toy import BigramLM
from ppl_tok.common.logspace import logsumexp
from ppl_tok.mdd import MDD, compile_mdd
from ppl_tok.common.rounding import tolerance as rounding_tolerance


@dataclass(order=True)
class _Open:
    neg_log_prob: float
    order: int
    node: int = field(compare=False)
    parent: LMState = field(compare=False)
    tokens: tuple[int, ...] = field(compare=False)


class PrefixSearch:
    """The open prefixes and the complete tokenizations found so far.

    A prefix enters the queue with its probability (known from its parent's
    next-token distribution); expanding it costs one LM forward of its last token.
    """

    def __init__(self, lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "", keep_zero: bool = False):
        self.lm, self.mdd = lm, mdd
        self.keep_zero = keep_zero  # record the zero-probability tokenizations too (full enumeration)
        self.found: dict[tuple[int, ...], float] = {}
        self.forwards = 0
        self.expanded = 0
        #: what the paper's branch and bound would have run for the same expansions:
        #: every child of an expanded prefix scored by a full forward of its whole sequence
        self.recompute_forwards = 0
        self.pruned: list[float] = []  # log-probs of prefixes dropped by branch and bound
        self._queue: list[_Open] = []
        self._order = itertools.count()
        root = lm.initial(context)
        self.dtype = root.log_probs.dtype  # the rows' dtype: their rounding (:mod:`ppl_tok.strings.certified`)
        self._children(mdd.source, root, 0.0, ())

    def _children(self, node: int, state: LMState, log_prob: float, tokens: tuple[int, ...]) -> None:
        edges = list(self.mdd.out_edges(node, keys=True))
        step = self.lm.token_log_probs([state], [[t for _, _, t in edges]])[0].tolist()
        for (_, j, t), lp_t in zip(edges, step):
            lp = log_prob + lp_t
            if j == self.mdd.sink:
                self.found[tokens + (t,)] = lp
            elif lp == -math.inf:  # no mass below: its completions need no LM call
                if self.keep_zero:
                    self.found.update((tokens + (t,) + rest, lp) for rest in self.mdd.enumerate(start=j))
            else:
                heapq.heappush(self._queue, _Open(-lp, next(self._order), j, state, tokens + (t,)))

    @property
    def done(self) -> bool:
        return not self._queue

    def best_open(self) -> float:
        """The log-probability of the most probable open prefix (``-inf`` if none)."""
        return -self._queue[0].neg_log_prob if self._queue else -math.inf

    def lower(self) -> float:
        """log of the probability of the tokenizations found (a lower bound on ``log p(x)``)."""
        return logsumexp(list(self.found.values()))

    def upper(self) -> float:
        """log of found + open + pruned mass (an upper bound on ``log p(x)``)."""
        return logsumexp(list(self.found.values()) + [-o.neg_log_prob for o in self._queue] + self.pruned)

    def best(self) -> tuple[tuple[int, ...], float] | None:
        if not self.found:
            return None
        path = max(self.found, key=self.found.__getitem__)
        return path, self.found[path]

    def prune_below(self, log_prob: float) -> None:
        """Drop open prefixes whose probability is below ``log_prob`` (they cannot beat it)."""
        keep = [o for o in self._queue if -o.neg_log_prob >= log_prob]
        self.pruned.extend(-o.neg_log_prob for o in self._queue if -o.neg_log_prob < log_prob)
        self._queue = keep
        heapq.heapify(self._queue)

    def expand(self, batch: int = 1) -> None:
        """Expand the ``batch`` most probable open prefixes with one batched LM call."""
        expand_together([self], [batch])

    def _pop(self, batch: int) -> list[_Open]:
        return [heapq.heappop(self._queue) for _ in range(min(batch, len(self._queue)))]

    def _absorb(self, items: list[_Open], states: list[LMState]) -> None:
        self.forwards += len(items)
        self.expanded += len(items)
        for o, state in zip(items, states):
            self.recompute_forwards += self.mdd.out_degree(o.node) * (len(state.tokens) + 1)
            self._children(o.node, state, -o.neg_log_prob, o.tokens)


def expand_together(searches: Sequence[PrefixSearch], batches: Sequence[int]) -> None:
    """Expand the ``batches[i]`` most probable open prefixes of each ``searches[i]`` (one LM, one batched call).

    Each search expands exactly what it would alone: searches run together only share forwards.
    """
    popped = [search._pop(b) for search, b in zip(searches, batches)]
    items = [(search, o) for search, its in zip(searches, popped) for o in its]
    if not items:
        return
    lm = searches[0].lm
    # every child's log-prob gathered with the forward (``_children`` then reads them from ``state.known``)
    states = lm.extend([o.parent for _, o in items], [o.tokens[-1] for _, o in items],
                       [list(search.mdd.out_tokens(o.node)) for search, o in items])
    at = 0
    for search, its in zip(searches, popped):
        search._absorb(its, states[at: at + len(its)])
        at += len(its)


@dataclass(frozen=True)
class Bounds:
    """A certified bracket ``lower <= log p(x | c) <= upper`` in exact arithmetic.

    ``tolerance`` (nats) is the rounding tolerance of the rows it was computed from
    (:func:`ppl_tok.common.rounding.tolerance` over a path of at most one row per byte):
    computed in the rows' float dtype, the bracket that holds is
    ``[lower - tolerance, upper + tolerance]`` (:attr:`certified`), which ``ppl-tok marginal
    --bounds`` reports as its ``lower`` and ``upper``.
    """

    text: str
    lower: float
    upper: float
    tokenizations: dict[tuple[int, ...], float]
    forwards: int
    closed: bool
    seconds: float
    tolerance: float = 0.0

    @property
    def certified(self) -> tuple[float, float]:
        """``(lower - tolerance, upper + tolerance)``: the bracket that holds for the float computation."""
        return self.lower - self.tolerance, self.upper + self.tolerance

    @property
    def width(self) -> float:
        return self.upper - self.lower

    @property
    def statement(self) -> str:
        """``"certified"``: the bounds hold, closed or not (:data:`ppl_tok.infer.diagnostics.STATEMENTS`)."""
        return CERTIFIED

    @property
    def estimate(self) -> float:
        """The midpoint of the bracket in log space."""
        return (self.lower + self.upper) / 2

    def __repr__(self) -> str:
        return (f"Bounds({self.text!r}: {self.lower:.4f} <= log p <= {self.upper:.4f}, "
                f"{'closed' if self.closed else 'open'}, {len(self.tokenizations)} tokenizations summed, "
                f"{self.forwards} forwards)")

    def to_dict(self) -> dict[str, Any]:
        """The bracket's numbers (not the summed tokenizations), JSON-ready apart from infinities."""
        return {"text": self.text, "lower": self.lower, "upper": self.upper, "width": self.width,
                "estimate": self.estimate, "closed": self.closed, "tokenizations": len(self.tokenizations),
                "statement": self.statement, "tolerance_nats": self.tolerance,
                "forwards": self.forwards, "seconds": self.seconds}


def marginal_bounds(text: str, lm: LanguageModel, *, context: str | Sequence[int] = "", tolerance: float = 1e-3,
                    budget: int | None = 10_000, batch: int = 16, mdd: MDD | None = None,
                    time_budget: float | None = None) -> Bounds:
    """Bracket ``log p(text | context)`` to within ``tolerance`` nats, or until ``budget`` forwards.

    ``budget=None`` runs to the end (every prefix expanded: the exact marginal).
    """
    return marginal_bounds_many([text], lm, contexts=[context], tolerance=tolerance, budget=budget, batch=batch,
                                mdds=None if mdd is None else [mdd], time_budget=time_budget)[0]


def marginal_bounds_many(texts: Sequence[str], lm: LanguageModel, *, contexts: Sequence[str | Sequence[int]] | None = None,
                         tolerance: float = 1e-3, budget: int | None = 10_000, batch: int = 16,
                         mdds: Sequence[MDD] | None = None, time_budget: float | None = None) -> list[Bounds]:
    """:func:`marginal_bounds` of many ``(text, context)`` pairs, their searches advanced together.

    Every round expands the ``batch`` best open prefixes of each unfinished
    search in one batched LM call, so a pair's bracket equals the one it gets
    alone, at the cost of far fewer forwards calls. ``budget`` is per pair;
    ``time_budget`` (seconds) is for the whole call.
    """
    texts = check_texts("texts", texts)
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 nats, got {tolerance}")
    contexts = [""] * len(texts) if contexts is None else check_contexts("contexts", contexts)
    if len(contexts) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(contexts)} contexts")
    start = time.perf_counter()
    mdds = [compile_mdd(t, lm.vocab) for t in texts] if mdds is None else list(mdds)
    searches = [PrefixSearch(lm, m, c) for m, c in zip(mdds, contexts)]
    seconds = [0.0] * len(texts)

    def finished(search: PrefixSearch) -> bool:
        if search.done:
            return True
        lower = search.lower()
        if lower > -math.inf and search.upper() - lower <= tolerance:
            return True
        return budget is not None and search.forwards >= budget

    total = None if budget is None else budget * len(texts)
    with tqdm(total=total, desc="bracketing log p", unit="fwd", disable=None, leave=False) as bar:
        live = list(range(len(searches)))
        while live:
            for i in [i for i in live if finished(searches[i])]:
                seconds[i] = time.perf_counter() - start
            live = [i for i in live if not finished(searches[i])]
            if not live or (time_budget is not None and time.perf_counter() - start > time_budget):
                break
            steps = [batch if budget is None else max(1, min(batch, budget - searches[i].forwards)) for i in live]
            expand_together([searches[i] for i in live], steps)
            bar.update(sum(s.forwards for s in searches) - bar.n)
    out = []
    for text, search, secs in zip(texts, searches, seconds):
        lower, upper = search.lower(), search.upper()
        out.append(Bounds(text, lower, upper, dict(search.found), search.forwards, closed=upper - lower <= tolerance,
                          seconds=secs or time.perf_counter() - start,
                          tolerance=rounding_tolerance(search.dtype, len(text.encode("utf-8")), len(lm.vocab))))
    return out


@dataclass(frozen=True)
class MostLikely:
    """The best tokenization found, and whether it is proven to be the most likely one."""

    text: str
    tokens: tuple[int, ...]
    log_prob: float
    canonical: tuple[int, ...]
    canonical_log_prob: float
    optimal: bool
    top_k: list[tuple[tuple[int, ...], float]]
    expanded: int
    forwards: int
    recompute_forwards: int
    seconds: float

    def __repr__(self) -> str:
        return (f"MostLikely({self.text!r}: log p = {self.log_prob:.4f} ({len(self.tokens)} tokens), canonical "
                f"{self.canonical_log_prob:.4f}, {'proven optimal' if self.optimal else 'not proven'})")

    def to_dict(self) -> dict[str, Any]:
        """The numbers of the search, JSON-ready apart from infinities."""
        return {"text": self.text, "tokens": list(self.tokens), "log_prob": self.log_prob,
                "canonical": list(self.canonical), "canonical_log_prob": self.canonical_log_prob,
                "optimal": self.optimal, "top_k": [[list(t), lp] for t, lp in self.top_k],
                "expanded": self.expanded, "forwards": self.forwards, "seconds": self.seconds}


def most_likely(text: str, lm: LanguageModel, *, context: str | Sequence[int] = "", time_budget: float | None = None,
                top_k: int = 1, batch: int = 16, mdd: MDD | None = None,
                initial_bound: float | None = None) -> MostLikely:
    """Anytime branch and bound for the most likely tokenization (NP-hard in general).

    The bound starts at the canonical tokenization's log-probability (or
    ``initial_bound``, e.g. any complete path); a prefix is pruned when its
    log-probability falls below the ``top_k``-th best complete path found.
    ``optimal`` is ``True`` when the search ended with nothing left to beat the bound.
    ``batch`` open prefixes are expanded per LM call (best first); on a CPU a
    batch of 16 costs little more than one forward, and the bound prunes the same.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    start = time.perf_counter()
    mdd = mdd if mdd is not None else compile_mdd(text, lm.vocab)
    canonical = tuple(lm.canonical(text))
    canonical_lp = lm.log_prob(canonical, context)
    bound0 = canonical_lp if initial_bound is None else initial_bound
    search = PrefixSearch(lm, mdd, context)

    def bound() -> float:
        ranked = sorted(search.found.values(), reverse=True)
        kth = ranked[top_k - 1] if len(ranked) >= top_k else -math.inf
        return max(kth, bound0) if top_k == 1 else kth

    timed_out = False
    while not search.done:
        search.prune_below(bound())
        if search.done:
            break
        if time_budget is not None and time.perf_counter() - start > time_budget:
            timed_out = True
            break
        search.expand(batch)
    ranked = sorted(search.found.items(), key=lambda kv: -kv[1])
    if canonical not in search.found:
        ranked.append((canonical, canonical_lp))
        ranked.sort(key=lambda kv: -kv[1])
    best, best_lp = ranked[0]
    return MostLikely(text, best, best_lp, canonical, canonical_lp, optimal=not timed_out,
                      top_k=ranked[:top_k], expanded=search.expanded,
                      forwards=search.forwards, recompute_forwards=search.recompute_forwards,
                      seconds=time.perf_counter() - start)


def most_likely_bigram(text: str, lm: BigramLM, *, context: str | Sequence[int] = "",
                       mdd: MDD | None = None) -> tuple[tuple[int, ...], float]:
    """The exact most likely tokenization under a bigram LM, in polynomial time.

    Under a bigram LM the probability of a path depends only on consecutive
    token pairs, so the MDD expanded with the last token as state is a DAG on
    which the most likely tokenization is a longest (max log-prob) path: a
    Viterbi pass over nodes in byte order, ``O(|E| * max in-degree)``.
    """
    mdd = mdd if mdd is not None else compile_mdd(text, lm.vocab)
    prefix = lm.prefix_ids(context)
    start_prev = prefix[-1] if prefix else None
    # best[node][last token] = (log prob, back pointer (node, token))
    best: dict[int, dict[int | None, tuple[float, tuple[int, int | None] | None]]] = {mdd.source: {start_prev: (0.0, None)}}
    for node in sorted(mdd.nodes):
        if node == mdd.sink or node not in best:
            continue
        for prev, (lp, _) in best[node].items():
            row = lm.transition(prev)
            for _, j, t in mdd.out_edges(node, keys=True):
                cand = lp + float(row[t])
                slot = best.setdefault(j, {})
                if t not in slot or cand > slot[t][0]:
                    slot[t] = (cand, (node, prev))
    last, (lp, _) = max(best[mdd.sink].items(), key=lambda kv: kv[1][0])
    tokens, node, tok = [], mdd.sink, last
    while tok is not None and node != mdd.source:
        tokens.append(tok)
        _, back = best[node][tok]
        node, tok = back
    return tuple(reversed(tokens)), lp
