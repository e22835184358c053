"""The LM over canonical tokenizations: ``p(v | v canonical)``, locally and globally (Vieira et al., ICML 2025).

Let ``p`` be the LM, ``C`` the canonical token sequences (:mod:`ppl_tok.canonical_step`), ``ok(u, t)`` the
step test (``u t`` is still a prefix of a canonical sequence) and ``end`` the ids without a surface (EOS and
the other control tokens), allowed after ``u`` iff ``u`` may end (:meth:`CanonicalSteps.ends_text`). The
continuation ``v`` after a context ``c`` is a canonical segment of its own (lm-eval tokenizes the two apart),
so its steps are tested from the segment's start; the context is conditioned on, never tested.

**Local** (each step renormalised over the tokens that keep the prefix canonical)::

    Z_t(u)   = sum_{t : ok(u, t)} p(t | c u) + [u may end] p(end | c u)
    l(t | u) = p(t | c u) ok(u, t) / Z_t(u)
    log l(v) = log p(v | c) - sum_t log Z_t(v_<t)          (the prefix probability of v)

Exact and cheap: the same forward rows as canonical scoring, and one mask per distinct step key. Since
``Z_t <= 1``, ``log l(v*) >= log p(v*)`` for every canonical ``v*``: the local figure is never below
plain canonical scoring (bits per byte never above); it equals it only where no mass was non-canonical.

**Global** (normalised over canonical strings)::

    p_g(w | c) = p(w end | c) [w in C] / Z(c),     Z(u) = sum_{w : u w in C} p(w end | c u)
    P_g(output starts with v | c) = p(v | c) Z(c v) / Z(c)

``Z(u)`` is estimated by importance sampling with the local model as the proposal: a walk from ``u`` draws
``t ~ l(. | u)`` until it draws ``end``, and its weight is ``prod_t Z_t`` (``p / l`` along the walk), an
unbiased estimate of ``Z(u)`` (a walk cut at ``horizon`` tokens estimates ``Z_H(u) >= Z(u)``, the mass that
stays canonical for ``H`` more tokens). A certified bracket comes from best-first expansion of the prefixes
that can still end canonically: ``lower`` = the mass of the canonical texts ended so far, ``upper`` =
``lower`` + the mass of the open prefixes (each open prefix's subtree weighs at most its own mass). On a toy
LM of finite support the bracket closes to the exact ``Z``; on a real LM a small budget certifies only
``upper`` (``Z <= Z_1``), so the global figure there is an estimate, and ``lower``/``upper`` bracket it.
Global conditioning can lower a text's figure below plain canonical (where ``Z(c v) < Z(c)``); the local
one never does.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ppl_tok.canonical_step import START, CanonicalSteps, Key, steps_for
from ppl_tok.lm.base import LanguageModel, LMState

LOCAL, GLOBAL = "local", "global"
MODES = (LOCAL, GLOBAL)


@dataclass(frozen=True)
class CanonicalLMScore:
    """One (context, continuation) under the canonical LM.

    ``estimate``: ``log l(v | c)`` (local) or ``log P_g(v | c)`` (global); ``lower``/``upper``: a certified
    bracket of the figure (local: both equal to it, up to rounding); ``plain``: ``log p(v | c)`` of the same
    tokens; ``forwards``: the LM's token-forwards spent; ``log_z``: ``(log Z(c), log Z(c v))`` (global).
    """

    estimate: float
    lower: float
    upper: float
    plain: float
    forwards: int
    log_z: tuple[float, float] | None = None
    log_normalisers: list[float] = field(default_factory=list)


def _end_ids(lm: LanguageModel) -> torch.Tensor:
    ends = [i for i, s in enumerate(lm.vocab.surfaces) if s is None]
    return torch.tensor(ends, dtype=torch.long)


def _masked(row: torch.Tensor, steps: CanonicalSteps, key: Key, ends: torch.Tensor) -> torch.Tensor:
    """The row (float64, on its device) with every token failing at ``key`` set to ``-inf``; the end ids kept
    where the text may end."""
    banned = steps.banned(key, row.shape[-1]).to(row.device)
    if steps.ends_text(key) and len(ends):
        banned = banned.clone()
        banned[ends.to(row.device)] = False
    return row.double().masked_fill(banned, -math.inf)


def _continuation(lm: LanguageModel, text: str | Sequence[int]) -> list[int]:
    if isinstance(text, str):
        if not text:
            raise ValueError("an empty continuation has no canonical tokens: give a non-empty text")
        return list(lm.canonical(text))
    return [int(t) for t in text]


def local_scores(lm: LanguageModel, prefixes: Sequence[Sequence[int]], sequences: Sequence[Sequence[int]],
                 steps: CanonicalSteps, keys: Sequence[Key] | None = None,
                 on_done: Callable[[int], None] | None = None) -> list[tuple[float, float, list[float]]]:
    """``(log l(v), log p(v), [log Z_t])`` of each token sequence after its prefix (BOS and context ids). A
    sequence that fails a step scores ``-inf``. ``keys``: the step key each sequence starts at (default: a
    segment's start; a document's later window starts where its earlier tokens left it).

    The sequences run in groups of at most the LM's row budget in positions (a longer one alone, under a budget
    of its own): a group's forward puts every position's state and row in the cache, and the masked walk reads
    them there (rows dropped by the budget would cost one forward each). ``on_done(i)``: called as sequence ``i``
    is scored (progress)."""
    seqs = [list(map(int, s)) for s in sequences]
    keys = list(keys) if keys is not None else [START] * len(seqs)
    row = 4 * len(lm.vocab)
    most = max(1, lm.config.row_bytes // row)
    out: list[tuple[float, float, list[float]]] = []
    lo = 0
    while lo < len(seqs):
        hi, size = lo + 1, len(seqs[lo])
        while hi < len(seqs) and size + len(seqs[hi]) <= most:
            size += len(seqs[hi])
            hi += 1
        with lm.row_budget(2 * (size + 1) * row):
            out += _local_group(lm, prefixes[lo:hi], seqs[lo:hi], steps, keys[lo:hi])
        for i in range(lo, hi) if on_done is not None else ():
            on_done(i)
        lo = hi
    return out


def _local_group(lm: LanguageModel, prefixes: Sequence[Sequence[int]], seqs: list[list[int]],
                 steps: CanonicalSteps, keys: list[Key]) -> list[tuple[float, float, list[float]]]:
    ends = _end_ids(lm)
    full = [i for i, s in enumerate(seqs) if s]
    lm.token_log_probs_after([tuple(int(t) for t in prefixes[i]) for i in full], [seqs[i] for i in full])
    states = lm.states([tuple(int(t) for t in p) for p in prefixes])
    plain = [0.0] * len(seqs)
    norms: list[list[float]] = [[] for _ in seqs]
    failed = [False] * len(seqs)
    for k in range(max((len(s) for s in seqs), default=0)):
        live = [i for i, s in enumerate(seqs) if k < len(s)]
        if k:
            new = lm.extend([states[i] for i in live], [seqs[i][k - 1] for i in live])
            for i, st in zip(live, new):
                states[i] = st
        for i in live:
            row = states[i].log_probs
            t = seqs[i][k]
            masked = _masked(row, steps, keys[i], ends)
            norms[i].append(float(torch.logsumexp(masked, -1)))
            plain[i] += float(row[t])
            ok, keys[i] = steps.step(keys[i], t)
            failed[i] = failed[i] or not ok
    out = []
    for i in range(len(seqs)):
        est = -math.inf if failed[i] else plain[i] - math.fsum(norms[i])
        out.append((est, plain[i], norms[i]))
    return out


def sample_walks(lm: LanguageModel, prefix: Sequence[int], key: Key, steps: CanonicalSteps, num: int,
                 horizon: int, generator: torch.Generator) -> list[tuple[list[int], float, bool]]:
    """``num`` walks of the local model from ``prefix`` (ids, BOS included) at step key ``key``: each is
    ``(tokens, log weight = sum_t log Z_t, ended)``; a walk stops at an end id (not in its tokens) or after
    ``horizon`` tokens. The weight's mean estimates ``Z(prefix)`` (``Z_horizon`` for the walks cut)."""
    ends = _end_ids(lm)
    end_set = set(ends.tolist())
    states: list[LMState] = [lm.state(tuple(int(t) for t in prefix))] * num
    keys = [key] * num
    toks: list[list[int]] = [[] for _ in range(num)]
    logw = [0.0] * num
    ended = [False] * num
    for _ in range(horizon):
        live = [i for i in range(num) if not ended[i]]
        if not live:
            break
        draws = []
        for i in live:
            masked = _masked(states[i].log_probs, steps, keys[i], ends)
            log_z = torch.logsumexp(masked, -1)
            logw[i] += float(log_z)
            cdf = torch.softmax(masked, -1).cumsum(-1).cpu()
            u = torch.rand((), generator=generator, dtype=torch.float64) * float(cdf[-1])
            draws.append(min(int(torch.searchsorted(cdf, u.reshape(1), right=True)[0]), cdf.shape[0] - 1))
        going = []
        for i, t in zip(live, draws):
            if t in end_set:
                ended[i] = True
            else:
                toks[i].append(t)
                keys[i] = steps.step(keys[i], t)[1]
                going.append(i)
        if going and len(toks[going[0]]) < horizon:
            new = lm.extend([states[i] for i in going], [toks[i][-1] for i in going])
            for i, st in zip(going, new):
                states[i] = st
    return [(toks[i], logw[i], ended[i]) for i in range(num)]


@dataclass(frozen=True)
class CanonicalGeneration:
    """A continuation drawn from the local canonical LM: ``tokens`` (after the prompt's canonical tokens, the
    whole a canonical sequence), its ``text``, ``log_prob`` (``log l``, the local model's) and ``plain``
    (``log p``, the LM's), why it ``stopped`` (``end``: an end id drawn; ``max-bytes``), the LM ``forwards``."""

    prompt: str
    tokens: list[int]
    text: str
    log_prob: float
    plain: float
    stopped: str
    forwards: int


def canonical_generate(lm: LanguageModel, prompt: str = "", max_bytes: int = 64, *, seed: int = 0,
                       steps: CanonicalSteps | None = None) -> CanonicalGeneration:
    """Sample a continuation of ``prompt`` from the local canonical LM ``l`` (the module docstring): each token
    drawn from ``p(. | BOS, prompt tokens, drawn)`` renormalised over the tokens that keep the whole sequence
    canonical, an end id only where the text may end. The draw stops at an end id or once ``max_bytes`` bytes
    are drawn, and is cut back to the last token after which the text may end (no character or whitespace
    window left open) within ``max_bytes``, so that ``encode(decode(prompt tokens + tokens))`` gives them back.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
    steps = steps or steps_for(lm.vocab)
    ends = _end_ids(lm)
    end_set = set(ends.tolist())
    prefix = lm.prefix_ids(prompt)
    head = list(prefix[1:] if lm.bos_id is not None else prefix)
    key = steps.key(head)
    state = lm.state(prefix)
    rng = torch.Generator().manual_seed(int(seed))
    before = lm.stats.forwards
    toks: list[int] = []
    sums = [(0.0, 0.0)]  # (log l, log p) after each token
    cut = [0]  # token counts after which the text may end, within max_bytes
    size, stopped = 0, "max-bytes"
    while size < max_bytes:
        row = state.log_probs
        masked = _masked(row, steps, key, ends)
        probs = torch.softmax(masked, -1).cpu()
        t = int(torch.multinomial(probs, 1, generator=rng)[0])
        if t in end_set:
            stopped = "end"
            break
        local = float(masked[t] - torch.logsumexp(masked, -1))
        sums.append((sums[-1][0] + local, sums[-1][1] + float(row[t])))
        toks.append(t)
        key = steps.step(key, t)[1]
        size += len(lm.vocab.surfaces[t] or b"")
        if steps.ends_text(key) and size <= max_bytes:
            cut.append(len(toks))
        if size < max_bytes:
            state = lm.extend([state], [t])[0]
    n = cut[-1] if stopped == "max-bytes" else len(toks)
    text = lm.vocab.decode(toks[:n]).decode("utf-8")
    return CanonicalGeneration(prompt, toks[:n], text, sums[n][0], sums[n][1], stopped, lm.stats.forwards - before)


def normaliser_bracket(lm: LanguageModel, prefix: Sequence[int], key: Key, steps: CanonicalSteps,
                       budget: int) -> tuple[float, float]:
    """A certified bracket ``(log lower, log upper)`` of ``Z(prefix)`` by best-first expansion of at most
    ``budget`` open prefixes (the heaviest first): ended canonical mass below, plus the open mass above."""
    ends = _end_ids(lm)
    lower: list[float] = []
    # an entry keeps its parent's key and its last token: the key is stepped when it is expanded, not when pushed
    # (a real LM pushes ~V children per expansion, and a step test may encode)
    heap: list[tuple[float, int, tuple[int, ...], Key, int | None]] = [
        (-0.0, 0, tuple(int(t) for t in prefix), key, None)]
    count = 1
    for _ in range(budget):
        if not heap:
            break
        neg, _, toks, k, last = heapq.heappop(heap)
        if last is not None:
            k = steps.step(k, last)[1]
        mass = -neg
        row = lm.state(toks).log_probs
        masked = _masked(row, steps, k, ends)
        if steps.ends_text(k) and len(ends):
            lower.append(mass + float(torch.logsumexp(masked[ends.to(masked.device)], -1)))
            masked[ends.to(masked.device)] = -math.inf
        live = torch.nonzero(torch.isfinite(masked)).flatten().tolist()
        values = masked[live].tolist() if live else []
        for t, lp in zip(live, values):
            heapq.heappush(heap, (-(mass + lp), count, toks + (t,), k, t))
            count += 1
    low = _lse(lower)
    up = _lse(lower + [-n for n, *_ in heap])
    return low, min(up, 0.0)


def _lse(values: list[float]) -> float:
    if not values:
        return -math.inf
    top = max(values)
    if top == -math.inf:
        return top
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def global_log_normaliser(lm: LanguageModel, prefix: Sequence[int], key: Key, steps: CanonicalSteps,
                          num_samples: int, horizon: int, seed: int) -> float:
    """The importance-sampling estimate of ``log Z(prefix)``: ``log mean(prod_t Z_t)`` over ``num_samples``
    local walks of at most ``horizon`` tokens (seeded)."""
    walks = sample_walks(lm, prefix, key, steps, num_samples, horizon, torch.Generator().manual_seed(seed))
    return _lse([w for _, w, _ in walks]) - math.log(num_samples)


def canonical_lm_scores(lm: LanguageModel, contexts: Sequence[str | Sequence[int]],
                        continuations: Sequence[str | Sequence[int]], mode: str = LOCAL, *,
                        steps: CanonicalSteps | None = None, num_samples: int = 16, horizon: int = 16,
                        budget: int = 1, seed: int = 0) -> list[CanonicalLMScore]:
    """The canonical LM's ``log`` figure of each continuation after its context (see the module docstring).

    :param contexts: strings (BOS and their canonical tokens) or token ids (BOS added).
    :param continuations: strings (scored in their canonical tokens) or token ids.
    :param mode: ``local`` (exact) or ``global`` (estimated: ``num_samples`` walks of at most ``horizon``
        tokens per normaliser; certified bracket by ``budget`` best-first expansions).
    """
    if mode not in MODES:
        raise ValueError(f"unknown canonical-LM mode {mode!r}: expected one of {', '.join(MODES)}")
    if len(contexts) != len(continuations):
        raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations")
    if num_samples < 1 or horizon < 1 or budget < 0:
        raise ValueError("num_samples and horizon must be >= 1 and budget >= 0")
    steps = steps or steps_for(lm.vocab)
    prefixes = [lm.prefix_ids(c) for c in contexts]
    seqs = [_continuation(lm, c) for c in continuations]
    start = lm.stats.forwards
    local = local_scores(lm, prefixes, seqs, steps)
    if mode == LOCAL:
        spent = lm.stats.forwards - start
        return [CanonicalLMScore(est, est, est, plain, spent // max(1, len(seqs)), None, norms)
                for est, plain, norms in local]
    out = []
    z_cache: dict[tuple[tuple[int, ...], Key], tuple[float, float, float]] = {}

    def z(prefix: tuple[int, ...], key: Key) -> tuple[float, float, float]:
        if (prefix, key) not in z_cache:
            est = global_log_normaliser(lm, prefix, key, steps, num_samples, horizon, seed + len(z_cache))
            low, up = normaliser_bracket(lm, prefix, key, steps, budget) if budget else (-math.inf, 0.0)
            z_cache[(prefix, key)] = (est, low, up)
        return z_cache[(prefix, key)]

    for prefix, seq, (est_local, plain, norms) in zip(prefixes, seqs, local):
        before = lm.stats.forwards
        if est_local == -math.inf:
            out.append(CanonicalLMScore(-math.inf, -math.inf, -math.inf, plain, 0, None, norms))
            continue
        z0, z0_lo, z0_hi = z(tuple(prefix), START)
        z1, z1_lo, z1_hi = z(tuple(prefix) + tuple(seq), steps.key(seq))
        est = plain + z1 - z0
        out.append(CanonicalLMScore(est, plain + z1_lo - z0_hi, plain + z1_hi - z0_lo, plain,
                                    lm.stats.forwards - before, (z0, z1), norms))
    return out


__all__ = ["CanonicalGeneration", "canonical_generate", "global_log_normaliser", "GLOBAL", "LOCAL", "MODES", "CanonicalLMScore", "canonical_lm_scores", "local_scores",
           "normaliser_bracket", "sample_walks"]
