"""Adversarial tokenization with a certificate: the tokenization of a prompt that moves a target's log-probability.

For a prompt string ``x`` (between fixed ``prefix`` and ``suffix`` strings, e.g. a chat template, which
stay in their canonical tokens ``P`` and ``S``) and a target string ``y`` (scored in its canonical tokens),
the objective of a tokenization ``v`` of ``x`` is

    f(v) = log p(y | P, v, S) = sum_k log p(y_k | P, v, S, y_<k)          (``P`` starts with BOS)

and the search looks for ``max_v f(v)`` (or ``min_v``) over a set ``A`` of tokenizations of ``x``
(:class:`~ppl_tok.infer.neighbourhood.TokenizationSet`: every tokenization, the ball of token edit
distance ``d`` around canonical, or at most ``k`` tokens more than canonical). Geh, Shao and Van den Broeck
(2025, "Adversarial Tokenization", the ``advtok`` package) maximise the same objective by greedy local search
over distance-2 (and 4) neighbours, without a certificate.

**What can be bounded.** ``f`` depends on the whole ``v``: a transformer may do anything after the last
prompt token, so no quantity of a path prefix of ``v`` bounds ``f`` over its completions except the trivial
``f <= 0`` (``p <= 1``). What *is* admissible is a prefix of the target: every term of the sum is ``<= 0``,
so ``F_k(v) = sum_{j<k} log p(y_j | P, v, S, y_<j) >= f(v)`` for every ``k``. The search is a branch and
bound over pairs ``(v, k)``: members are taken ring by ring (distance 0 = canonical first, then 1, 2, ...;
:meth:`~ppl_tok.infer.neighbourhood.TokenizationSet.by_distance`) in batches, their states after
``P, v, S`` are built by one batched extension per position (a shared prefix of two members, and ``P``, run
once: the LM's prefix cache), then the target is read one token at a time and a member is **pruned** as
soon as ``F_k(v) <= max(incumbent, threshold)``: it cannot beat the incumbent (nor exceed the threshold).

**The certificate** (maximising). With ``E`` the members examined (scored in full or pruned) and ``best``
the incumbent: a member pruned at level ``l`` (the incumbent then, or ``max(incumbent, t)`` with a threshold
``t``) has ``f(v) <= F_k(v) <= l``, so with ``ceiling`` the highest such level

    best <= max_{v in A} f(v) <= upper = max(best, ceiling) if E = A, else 0.

``E = A`` (``closed``) is known exactly because ``|A|`` is counted exactly. Without a threshold every level
is at most the final incumbent, so ``upper = best``: the maximum is **exact**. With one, members scoring
between the incumbent and ``t`` are pruned unscored, so a closed search proves only that the maximum is
**at most** ``max(best, t)`` (and that no member exceeds ``t``); it never names an unscored maximum.
Anytime: a budget of token-forwards or seconds stops between batches and returns the bracket so far, and
``complete_within = r`` says every member within distance ``r`` was examined: the same rule over that ball
(the best *scored in it*, and the levels its members were pruned at) gives the interval certified over it
(:attr:`AdversarialResult.certificate`, ``certified_low``/``certified_high``). The trivial 0 is honest,
not loose by choice: it is the only bound that holds for an arbitrary LM on members never run. Minimising,
no prefix of the target bounds ``f`` from below, nothing is pruned, and the lower end is ``best`` if closed,
else ``-inf``.

**Robustness radius.** With a threshold ``t`` (e.g. the log-probability the canonical prompt gives a
rival answer), the radius is the largest ``d`` such that no member within distance ``d`` has ``f(v) > t``.
Rings are examined in order, so the first ring ``r`` holding a member above ``t`` gives the radius
``r - 1`` exactly (every smaller ring was examined); if none is found, the radius is at least
``complete_within`` (``radius_exact`` false), and it is the whole set's when ``closed``.

**Sampled mode** (:func:`adversarial_sample`): members drawn uniformly from ``A`` (exact counts), each
scored in full: an unbiased estimate of the fraction of ``A`` above ``t`` and a best found (a lower end of
the max), with no upper end unless the draws happened to cover ``A``.

Cost: ``forwards`` are token-forwards (``lm.stats.forwards``); each member costs at most
``|v| + |S| + |y| - 1`` of them, less where members share a prefix or a target is pruned early.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ppl_tok.infer.neighbourhood import TokenizationSet, levenshtein
from ppl_tok.limits import check_scored_text, limits
from ppl_tok.lm.base import LanguageModel, LMState
from ppl_tok.mdd import MDD, compile_mdd

#: token-forwards of a search of ``ppl-tok adversarial`` given no ``--exact-budget`` (docs/adversarial.md: its cost)
DEFAULT_BUDGET = 20_000
#: what a search reports after each batch: (token-forwards so far, members examined, best log p so far,
#: complete_within)
Progress = Callable[[int, int, float, int], None]


@dataclass
class AdversarialProblem:
    """The compiled inputs: prefix ids ``P`` (BOS included), the prompt's set, suffix ``S`` and target ``y``."""

    lm: LanguageModel
    prompt: str
    target: str
    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    space: TokenizationSet

    @property
    def canonical(self) -> tuple[int, ...]:
        return self.space.canonical

    def cost(self, v: Sequence[int]) -> int:
        """At most this many token-forwards score ``v`` (fewer with shared prefixes or pruning)."""
        return len(v) + len(self.suffix_ids) + len(self.target_ids) - 1


def _encode(lm: LanguageModel, text: str, what: str) -> tuple[int, ...]:
    try:
        compile_mdd(text, lm.vocab)  # a clear error naming the bytes no token covers
        return tuple(lm.vocab.encode(text))
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None


def problem(lm: LanguageModel, prompt: str, target: str, *, prefix: str = "", suffix: str = "",
            distance: int | None = None, extra: int | None = None, mdd: MDD | None = None) -> AdversarialProblem:
    """Check and compile the inputs (every error before any LM call)."""
    if not prompt:
        raise ValueError("the prompt is empty: give the prompt string whose tokenizations are searched")
    if not target:
        raise ValueError("the target is empty: give the response string whose log-probability is the objective")
    if mdd is None:
        try:
            mdd = compile_mdd(prompt, lm.vocab)
        except ValueError as err:
            raise ValueError(f"prompt: {err}") from None
    target_ids = _encode(lm, target, "target")
    suffix_ids = _encode(lm, suffix, "suffix") if suffix else ()
    if prefix:
        _encode(lm, prefix, "prefix")
    space = TokenizationSet(mdd, tuple(lm.vocab.encode(prompt)), distance=distance, extra=extra)
    return AdversarialProblem(lm, prompt, target, lm.prefix_ids(prefix), suffix_ids, target_ids, space)


def score_tokenizations(pb: AdversarialProblem, members: Sequence[Sequence[int]],
                        prune_at: float = -math.inf) -> list[tuple[float, bool]]:
    """``(F, done)`` per member: ``f(v)`` and ``True``, or, pruned, ``F_k(v) <= prune_at`` and ``False``.

    One batched extension per position of ``v``, of ``S`` and of the target (the prefix once, shared).
    """
    lm = pb.lm
    root = lm.state(pb.prefix_ids)
    states: list[LMState] = [root] * len(members)
    seqs = [tuple(v) + pb.suffix_ids for v in members]
    for step in range(max(len(s) for s in seqs)):
        live = [i for i, s in enumerate(seqs) if step < len(s)]
        for i, st in zip(live, lm.extend([states[i] for i in live], [seqs[i][step] for i in live])):
            states[i] = st
    partial = [0.0] * len(members)
    alive = list(range(len(members)))
    for k, y in enumerate(pb.target_ids):
        for i, lp in zip(alive, lm.token_log_probs([states[i] for i in alive], [[y]] * len(alive))):
            partial[i] += float(lp[0])
        alive = [i for i in alive if partial[i] > prune_at]
        if k + 1 < len(pb.target_ids) and alive:
            for i, st in zip(alive, lm.extend([states[i] for i in alive], [y] * len(alive))):
                states[i] = st
    done = set(alive) if pb.target_ids else set(range(len(members)))
    return [(partial[i], i in done) for i in range(len(members))]


@dataclass
class AdversarialResult:
    """The best tokenization found and what is certified about the rest of the set (see the module's docstring)."""

    best: tuple[int, ...]
    best_log_prob: float
    canonical: tuple[int, ...]
    canonical_log_prob: float
    minimize: bool
    bound: float                 #: max: >= f(v) for every member; min: <= f(v) for every member
    closed: bool                 #: every member examined (scored or pruned): ``bound == best_log_prob``
    size: int                    #: members of the set (exact)
    scored: int                  #: members scored in full
    pruned: int                  #: members cut by the target-prefix bound
    complete_within: int         #: every member within this distance was examined (-1: none)
    best_distance: int
    threshold: float | None = None
    above: tuple[int, ...] | None = None      #: a member with f(v) > threshold, from the nearest such ring
    above_log_prob: float | None = None
    radius: int | None = None                 #: the robustness radius (exact) or a lower bound on it
    radius_exact: bool = False
    forwards: int = 0
    seconds: float = 0.0
    stopped: str = "closed"                   #: closed, budget, time, threshold
    #: what is proved over the members within ``complete_within`` (the whole set when closed): ``"exact"``
    #: (the max, or min, is ``certified_low == certified_high``), ``"at-most"`` (members were pruned unscored
    #: at a threshold above the best scored: the max is at most ``certified_high``, the best scored is
    #: ``certified_low``) or ``"none"`` (no ring was closed: nothing is certified)
    certificate: str = "none"
    certified_low: float | None = None        #: the best scored within ``complete_within``
    certified_high: float | None = None       #: max: >= f(v) for every member within ``complete_within``
    certified_size: int = 0                   #: members within ``complete_within`` (exact)
    top: list[tuple[tuple[int, ...], float]] = field(default_factory=list)
    #: after each batch: (token-forwards so far, members examined, best log p so far, complete_within)
    trace: list[tuple[int, int, float, int]] = field(default_factory=list)

    @property
    def examined(self) -> int:
        return self.scored + self.pruned

    def certified_sentence(self) -> str:
        """What is proved, in one sentence: over the whole set when closed, else over the ball it closed."""
        sense = "min" if self.minimize else "max"
        if self.certificate == "none":
            return f"nothing (stopped: {self.stopped} before the first ring of the set was examined in full)"
        where = (f"all {self.size} tokenizations in the set" if self.closed else
                 f"the {self.certified_size} tokenizations within distance {self.complete_within} "
                 f"({self.size - self.certified_size} more in the set are not bounded)")
        if self.certificate == "exact":
            return f"the {sense} over {where} is {self.certified_low:.4f}"
        return (f"the {sense} over {where} is at most {self.certified_high:.4f} (members below the threshold were "
                f"pruned unscored); the best scored is {self.certified_low:.4f}")


def check_request(prompt: str, target: str, *, prefix: str = "", suffix: str = "", batch: int = 32,
                  budget: int | None = None, time_budget: float | None = None) -> None:
    """The sizes and counts of one search or draw against :mod:`ppl_tok.limits` (``lm_bytes`` of prefix, prompt,
    suffix and target, ``text_bytes`` of the prompt, ``search_batch``, ``search_forwards``): no LM is needed."""
    check_scored_text([("prefix", prefix), ("prompt", prompt), ("suffix", suffix), ("target", target)])
    if budget is not None and budget <= 0:
        raise ValueError(f"the forward budget must be a positive number of token-forwards, got {budget}")
    if time_budget is not None and not time_budget > 0:
        raise ValueError(f"the time budget must be a positive number of seconds, got {time_budget}")
    if batch < 1:
        raise ValueError(f"the batch must hold at least 1 tokenization, got {batch}")
    limits().check("search_batch", batch, "the batch (tokenizations scored together)")
    if budget is not None:
        limits().check("search_forwards", budget, "the forward budget")


class _Search:
    """The state of one branch and bound: the ring-ordered members not yet taken, the incumbent, the counts."""

    def __init__(self, pb: AdversarialProblem, minimize: bool, threshold: float | None, batch: int, top_k: int):
        self.pb, self.minimize, self.threshold, self.batch, self.top_k = pb, minimize, threshold, batch, top_k
        self.sign = -1.0 if minimize else 1.0
        self.members = pb.space.by_distance()
        self.queue: list[tuple[int, tuple[int, ...]]] = []  # a member taken from the walk that did not fit
        self.exhausted = False
        self.best, self.best_lp, self.best_ring, self.canon_lp = pb.canonical, math.nan, 0, math.nan
        self.scored = self.pruned = 0
        self.complete = self.pending = -1  # rings examined in full / the last ring whose end was read
        self.ceiling = -math.inf  # the highest level a member was pruned at: every pruned member is below it
        self.ring_best: dict[int, float] = {}     # per ring: the best value scored in full
        self.ring_ceiling: dict[int, float] = {}  # per ring: the highest level one of its members was pruned at
        self.above: tuple[int, ...] | None = None
        self.above_lp: float | None = None
        self.radius: int | None = None
        self.top: list[tuple[float, tuple[int, ...]]] = []
        self.trace: list[tuple[int, int, float, int]] = []

    def next_batch(self, room: float) -> list[tuple[int, tuple[int, ...]]]:
        """The next members in ring order whose worst-case cost fits in ``room`` (the canonical alone first)."""
        todo: list[tuple[int, tuple[int, ...]]] = []
        cost = 0
        while len(todo) < (1 if self.scored + self.pruned == 0 else self.batch):
            if not self.queue:
                item = next(self.members, None)
                if item is None:
                    self.exhausted = True
                    break
                if item[1] is None:  # a ring's end: read only after all its members went into batches
                    self.pending = item[0]
                    continue
                self.queue.append(item)
            if cost + self.pb.cost(self.queue[0][1]) > room:
                break
            cost += self.pb.cost(self.queue[0][1])
            todo.append(self.queue.pop(0))
        return todo

    def prune_level(self) -> float:
        if math.isnan(self.best_lp):  # the canonical is always scored in full
            return -math.inf
        level = -math.inf if self.minimize else self.best_lp
        return level if self.threshold is None else max(level, self.threshold)

    def run_batch(self, todo: list[tuple[int, tuple[int, ...]]]) -> None:
        """Score a batch (pruning by the target-prefix bound) and update the incumbent, the rings and the radius."""
        level = self.prune_level()
        for (ring, v), (value, done) in zip(todo, score_tokenizations(self.pb, [v for _, v in todo], level)):
            if not done:
                self.pruned += 1
                self.ceiling = max(self.ceiling, level)
                self.ring_ceiling[ring] = max(self.ring_ceiling.get(ring, -math.inf), level)
                continue
            self.scored += 1
            if ring not in self.ring_best or self.sign * value > self.sign * self.ring_best[ring]:
                self.ring_best[ring] = value
            if v == self.pb.canonical:
                self.canon_lp = value
            if math.isnan(self.best_lp) or self.sign * value > self.sign * self.best_lp:
                self.best, self.best_lp, self.best_ring = v, value, ring
            self.top.append((self.sign * value, v))
            if self.threshold is not None and value > self.threshold and (self.above is None or ring <= self.radius):
                self.above, self.above_lp, self.radius = v, value, ring - 1
        self.top = sorted(self.top, reverse=True)[: self.top_k]
        self.complete = max(self.complete, self.pending)

    @property
    def done(self) -> bool:
        return self.exhausted and not self.queue

    def certified(self, within: int, size: int | None = None) -> tuple[str, float | None, float | None, int]:
        """``(certificate, low, high, members)`` over the members within distance ``within`` (all examined;
        ``size``: their number, if known)."""
        if within < 0:
            return "none", None, None, 0
        best = [v for r, v in self.ring_best.items() if r <= within]
        pick = min if self.minimize else max
        low = pick(best)  # the canonical, ring 0, is always scored in full
        high = max([low] + [c for r, c in self.ring_ceiling.items() if r <= within])
        if size is None:
            size = sum(self.pb.space.count(r) for r in range(within + 1))
        return ("exact" if high == low else "at-most"), low, high, size

    def result(self, stopped: str, forwards: int, seconds: float) -> AdversarialResult:
        size = self.pb.space.count()
        closed = self.scored + self.pruned == size
        complete = self.pb.space.max_distance() if closed else self.complete
        exact = self.above is not None
        radius = self.radius if exact else (complete if self.threshold is not None else None)
        bound = max(self.best_lp, self.ceiling) if closed else (-math.inf if self.minimize else 0.0)
        certificate, low, high, within_size = self.certified(complete, size if closed else None)
        return AdversarialResult(
            best=self.best, best_log_prob=self.best_lp, canonical=self.pb.canonical, canonical_log_prob=self.canon_lp,
            minimize=self.minimize, bound=bound, closed=closed, size=size, scored=self.scored, pruned=self.pruned,
            complete_within=complete, best_distance=self.best_ring, threshold=self.threshold, above=self.above,
            above_log_prob=self.above_lp, radius=radius, radius_exact=exact, forwards=forwards, seconds=seconds,
            stopped="closed" if closed else stopped, certificate=certificate, certified_low=low,
            certified_high=high, certified_size=within_size,
            top=[(v, self.sign * s) for s, v in self.top], trace=self.trace)


def adversarial_search(lm: LanguageModel, prompt: str, target: str, *, prefix: str = "", suffix: str = "",
                       distance: int | None = None, extra: int | None = None, minimize: bool = False,
                       threshold: float | None = None, stop_above: bool = False, budget: int | None = None,
                       time_budget: float | None = None, batch: int = 32, top_k: int = 5,
                       mdd: MDD | None = None, progress: Progress | None = None) -> AdversarialResult:
    """Branch and bound for ``max_v`` (``min_v``) ``log p(target | prefix, v, suffix)`` over a set of tokenizations.

    :param distance: the ball of token edit distance ``distance`` around canonical (``None``: no limit).
    :param extra: at most ``extra`` tokens more than canonical (``None``: no limit).
    :param threshold: also answer "does any member exceed ``threshold``?" and the robustness radius;
        ``stop_above`` ends the search at the first ring holding such a member. Members are then pruned at
        ``max(incumbent, threshold)``, so a closed bound is ``max(best, threshold)``.
    :param budget: token-forwards (``lm.stats.forwards``, the prefix included); a batch is started only if
        its worst-case cost fits, so the budget is never exceeded.
    :param time_budget: seconds; checked between batches.
    :param progress: called after each batch with its :attr:`AdversarialResult.trace` entry.
    """
    check_request(prompt, target, prefix=prefix, suffix=suffix, batch=batch, budget=budget, time_budget=time_budget)
    if minimize and threshold is not None:
        raise ValueError("a threshold asks whether some tokenization raises log p(target) above it: maximise, "
                         "not minimize")
    pb = problem(lm, prompt, target, prefix=prefix, suffix=suffix, distance=distance, extra=extra, mdd=mdd)
    first = len(pb.prefix_ids) + pb.cost(pb.canonical)
    if budget is not None and budget < first:
        raise ValueError(f"a budget of {budget} token-forwards cannot score even the canonical tokenization "
                         f"(it needs up to {first}): give --exact-budget {first} or more")
    search = _Search(pb, minimize, threshold, batch, top_k)
    start, f0 = time.perf_counter(), lm.stats.forwards
    stopped = "closed"
    while not search.done:
        spent = lm.stats.forwards - f0
        room = math.inf if budget is None else budget - spent - (0 if spent else len(pb.prefix_ids))
        todo = search.next_batch(room)
        if not todo:
            stopped = "closed" if search.done else "budget"
            break
        search.run_batch(todo)
        search.trace.append((lm.stats.forwards - f0, search.scored + search.pruned, search.best_lp, search.complete))
        if progress is not None:
            progress(*search.trace[-1])
        if stop_above and search.above is not None:
            stopped = "threshold"
            break
        if time_budget is not None and time.perf_counter() - start > time_budget:
            stopped = "time"
            break
    return search.result(stopped, lm.stats.forwards - f0, time.perf_counter() - start)


@dataclass
class SampledResult:
    """Uniform draws from the set, each scored in full: the best found and the fraction above a threshold."""

    best: tuple[int, ...]
    best_log_prob: float
    samples: int
    distinct: int
    size: int
    fraction_above: float | None    #: unbiased estimate of |{v in A : f(v) > threshold}| / |A|
    covered: bool                   #: the distinct draws are the whole set: ``best_log_prob`` is its max
    forwards: int
    seconds: float
    log_probs: list[float]          #: f of each draw, in draw order


def adversarial_sample(lm: LanguageModel, prompt: str, target: str, *, samples: int, prefix: str = "",
                       suffix: str = "", distance: int | None = None, extra: int | None = None,
                       threshold: float | None = None, seed: int = 0, batch: int = 32,
                       mdd: MDD | None = None) -> SampledResult:
    """Score ``samples`` tokenizations drawn uniformly from the set (for sets a search cannot cover)."""
    check_request(prompt, target, prefix=prefix, suffix=suffix, batch=batch)
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    pb = problem(lm, prompt, target, prefix=prefix, suffix=suffix, distance=distance, extra=extra, mdd=mdd)
    start, f0 = time.perf_counter(), lm.stats.forwards
    draws = pb.space.sample(samples, seed=seed)
    distinct = list(dict.fromkeys(draws))
    values: dict[tuple[int, ...], float] = {}
    for lo in range(0, len(distinct), batch):
        chunk = distinct[lo: lo + batch]
        values.update((v, f) for v, (f, _) in zip(chunk, score_tokenizations(pb, chunk)))
    lps = [values[v] for v in draws]
    k = max(range(len(draws)), key=lambda i: lps[i])
    frac = None if threshold is None else sum(lp > threshold for lp in lps) / len(lps)
    size = pb.space.count()
    return SampledResult(best=draws[k], best_log_prob=lps[k], samples=samples, distinct=len(distinct), size=size,
                         fraction_above=frac, covered=len(distinct) == size, forwards=lm.stats.forwards - f0,
                         seconds=time.perf_counter() - start, log_probs=lps)


def brute_force(lm: LanguageModel, prompt: str, target: str, **kw) -> list[tuple[tuple[int, ...], int, float]]:
    """Every member ``(v, dist(v, canonical), f(v))``, each scored alone (the reference of the tests; small sets)."""
    pb = problem(lm, prompt, target, **kw)
    out = []
    for v in pb.space.mdd.enumerate():
        if pb.space.contains(v):
            f = lm.log_prob(pb.suffix_ids + pb.target_ids, pb.prefix_ids[lm.bos_id is not None:] + tuple(v))
            f -= lm.log_prob(pb.suffix_ids, pb.prefix_ids[lm.bos_id is not None:] + tuple(v))
            out.append((tuple(v), levenshtein(v, pb.canonical), f))
    return out
