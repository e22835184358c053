"""The word-end event's bracket: the masses of the boundary bytes only, each LM row's read once.

Surprisal's corrected units (:mod:`ppl_tok.strings.surprisal`) and the boundary-terminated conditional
(:mod:`ppl_tok.strings.conditional`) read, after bytes ``x``, the event "``x`` then a boundary character or the
end":

    P(x, B | c) = sum over ascii boundary bytes a of P(x a | c) + sum over wide boundary chars w of P(x w | c)
                  + P(x, end | c),

bracketed as :meth:`~ppl_tok.strings.state.StringState.next_byte_log_probs` brackets each term (found mass; the
upper side also ``min(P^(x), found + Pi)``; both widened by the state's rounding tolerance). That method builds the
whole ``[257]`` next-byte table; the event needs only the boundary bytes' columns and the prefix mass. A kept
prefix ending exactly at ``|x|`` (a *head* cover) spans the whole vocabulary, so its table costs one float64
log-sum-exp over ``|V|`` values; here it costs only the runs of the tokens that start with a wanted byte, and each
LM state's masses are kept (weakly, with the state) for the next reader of the same row: the token tree reads
the same canonical prefix's row in two branches (unit ``k``'s end and unit ``k+1``'s start). Each mass is the same
segmented log-sum-exp over the same values in the same order as the full table's, so the figures are those of
``next_byte_log_probs`` (tested against it).
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from weakref import WeakKeyDictionary

import torch

from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LMState
from ppl_tok.strings.cover import GROUPS, CoverIndex, group_log_masses
from ppl_tok.strings.state import DeadEndError, StringState

#: per LM state, per tuple of wanted bytes: the log-masses of its row's tokens starting with each (float64)
_HEAD_MASSES: WeakKeyDictionary[LMState, dict[tuple[int, ...], torch.Tensor]] = WeakKeyDictionary()
#: per (index, wanted bytes): the sorted positions of the tokens starting with a wanted byte, and each one's byte
_RUNS: WeakKeyDictionary[CoverIndex, dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]]] = WeakKeyDictionary()


def _runs(index: CoverIndex, wanted: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    hit = _RUNS.get(index, {}).get(wanted)
    if hit is None:
        spans = [(b, *index.run(bytes([b]))) for b in wanted]
        order = torch.cat([torch.arange(a, e) for _, a, e in spans]) if spans else torch.zeros(0, dtype=torch.long)
        seg = torch.cat([torch.full((e - a,), b, dtype=torch.long) for b, a, e in spans]) if spans \
            else torch.zeros(0, dtype=torch.long)
        hit = _RUNS.setdefault(index, {})[wanted] = (index.ids[order], seg)
    return hit


def head_masses(index: CoverIndex, states: Sequence[LMState], wanted: tuple[int, ...]) -> list[torch.Tensor]:
    """Per state, ``[len(wanted)]`` float64: ``log sum of p(t | state)`` over the tokens ``t`` whose surface starts
    with each wanted byte (kept with the state: a second call for the same row costs nothing)."""
    out: list[torch.Tensor | None] = []
    todo = []
    for s in states:
        got = _HEAD_MASSES.get(s, {}).get(wanted)
        out.append(got)
        if got is None:
            todo.append(s)
    if todo:
        ids, seg = _runs(index, wanted)
        rows = [s.log_probs for s in dict.fromkeys(todo)]
        table = group_log_masses([r[ids.to(r.device)] for r in rows], [seg] * len(rows))[:, list(wanted)]
        for s, masses in zip(dict.fromkeys(todo), table):
            _HEAD_MASSES.setdefault(s, {})[wanted] = masses
        out = [_HEAD_MASSES[s][wanted] if o is None else o for s, o in zip(states, out)]
    return out  # type: ignore[return-value]


def boundary_masses(state: StringState, wanted: Sequence[int]) -> tuple[list[float], float, float, float, float]:
    """``(per byte, end, found, bound, tolerance)`` after the bytes ``x`` the state has read: for each wanted byte
    ``a`` the mass found of ``P(x a | c)`` (log), the mass found of ``P(x, end | c)``, the prefix's found mass
    ``P^(x)`` and its bound ``min(0, log(found + Pi))``, and the rounding tolerance (nats): the columns of
    :meth:`~ppl_tok.strings.state.StringState.next_byte_log_probs` the word-end event reads."""
    n, wanted = len(state.data), tuple(wanted)
    index = state.index
    lps, tables, ends = [], [], []
    before_vals, before_segs, before_lp = [], [], []
    heads = []
    for i, cs in state.window.items():
        if i == n:
            heads.extend(cs)
            continue
        _, _, seg = index.groups(bytes(state.data[i:n]))
        for c in cs:
            before_vals.append(c.vals)
            before_segs.append(seg)
            before_lp.append(c.hyp.log_prob)
    if before_vals:
        table = group_log_masses(before_vals, before_segs)  # [Q, 257]
        lps.append(torch.tensor(before_lp, dtype=torch.float64))
        tables.append(table[:, list(wanted)])
        ends.append(torch.full((len(before_vals),), -math.inf, dtype=torch.float64))
    if heads:
        lps.append(torch.tensor([c.hyp.log_prob for c in heads], dtype=torch.float64))
        tables.append(torch.stack(head_masses(index, [c.hyp.state for c in heads], wanted)))
        ends.append(torch.tensor([c.end for c in heads], dtype=torch.float64))
    if n == state.base:
        found = state.head.log_prob
    elif before_vals:
        found = float(torch.logsumexp(torch.logsumexp(table[:, :GROUPS], 1) + lps[0], 0))
    else:
        found = -math.inf
    if found == -math.inf and not any(c.hyp.log_prob > -math.inf for c in heads):
        raise DeadEndError(f"after {bytes(state.data)!r} the beam holds no mass: no next byte has probability")
    lp = torch.cat(lps)
    per_byte = torch.logsumexp(torch.cat(tables) + lp.unsqueeze(1), 0).tolist() if wanted else []
    end = float(torch.logsumexp(torch.cat(ends) + lp, 0))
    bound = min(0.0, logsumexp([found, state.pruned_log_mass()]))
    return per_byte, end, found, bound, state.tolerance()


def boundary_event(state: StringState, ascii_bytes: list[int], wide_chars: list[str]) -> tuple[float, float, float]:
    """``(L, found, U)`` on ``log (sum over c in B of P(x c) + P(x, end))`` for the bytes ``x`` the state has read
    (module docstring): the bracket of exact arithmetic widened by the largest rounding tolerance of its terms
    (:mod:`ppl_tok.strings.certified`)."""
    leads = sorted({w.encode("utf-8")[0] for w in wide_chars} - set(ascii_bytes))
    per_byte, end, _, bound, tol = boundary_masses(state, [*ascii_bytes, *leads])
    mass = dict(zip([*ascii_bytes, *leads], per_byte))
    pruned = state.pruned_log_mass()
    found = [mass[b] for b in ascii_bytes] + [end]
    lower_terms, upper_terms = list(found), list(found) + [pruned]
    if wide_chars:
        shared = state._shared
        try:
            for ch in wide_chars:
                data = ch.encode("utf-8")
                if mass[data[0]] == -math.inf:
                    continue  # no mass found through its lead byte: what is pruned is in ``pruned`` already
                child = state.copy()
                try:
                    p = child.extend(data).prefix_log_prob()
                except DeadEndError:
                    continue
                lower_terms.append(p.found)
                upper_terms.append(p.bound)
                tol = max(tol, p.tolerance)
        finally:
            state._shared = shared  # the copies die here: the state may release its LM states again
    found_mass = logsumexp(lower_terms)
    return found_mass - tol, found_mass, min(bound, logsumexp(upper_terms)) + tol


__all__ = ["boundary_event", "boundary_masses", "head_masses"]
