"""A text's marginal through the token tree: one prefill of the canonical tokens, one branch per segment.

The byte-synchronous beam (:func:`~ppl_tok.strings.string_marginals`) sums a text's tokenizations in one walk
from its first byte, one LM call per byte offset that needs a forward. Here the text ``x`` (canonical tokens
``v* = v_1 .. v_T``, ending at the byte offsets ``e_1 < .. < e_T``) is cut into **segments** at canonical
boundaries ``0 = e_{r_0} < e_{r_1} < .. < e_{r_m} = |x|`` (:func:`segment_cuts`: a cut where the next byte is
ASCII whitespace, at least ``segment_bytes`` after the last cut). The canonical tokens run in one prefill
forward, which leaves the state after every canonical prefix in the LM's prefix cache; segment ``j`` gets a
branch (:class:`~ppl_tok.strings.tree.Branch`, walked by :func:`~ppl_tok.strings.tree.walk_branches` with the
others: every branch of every text in the same LM calls) rooted at the cached state after ``c v_{<=r_{j-1}}``,
walking the segment's bytes ``sigma_j = x[e_{r_{j-1}}:e_{r_j}]`` and reading the mass of the token sequences
that end exactly at its end.

**The estimand** (:attr:`TreeMarginal.estimate`, nats):

    F(x) = sum over j of log S_j,    S_j = sum over tokenizations w of sigma_j of p(w | c v_{<=r_{j-1}})
         = log sum over (w_1, .., w_m) of prod_j p(w_j | c v_{<=r_{j-1}}),

a sum over the **cut-respecting** tokenizations of ``x`` (no token across a cut), each weighted by the
product of its segments' probabilities given the *canonical* tokens before them. The canonical tokenization's
weight is ``p(v* | c)`` exactly, so ``F >= log p(v* | c)``; a tokenization that leaves the canonical tokens in
one segment only gets ``p(v_{<=r}) p(w_j | v_{<=r}) p(v_after | v_{<=r'})``: its true probability but for the
rejoin factor (the canonical tokens after the segment read the canonical history, not ``w_j``). So ``F`` is
**not** ``log p(x | c)`` and no bound on it: it is the marginal with each segment's alternatives priced in the
canonical context (a product of the segments' local marginals). What it leaves out: tokenizations with a
token across a cut, and (in the weights) every effect of one segment's tokenization on the next segments'.

**The bracket**: each ``log S_j`` is bracketed by its branch's beam (the mass found ending at the segment's end;
plus the pruned mass, every pruned prefix bounding its continuations), widened by the rows' rounding tolerance
(:mod:`ppl_tok.strings.certified`), and the canonical tokens' term is a floor (they are one of the tokenizations
summed): ``[sum_j max(L_j, c_j), sum_j max(U_j, ..)]`` is certified **for F**. With the beam unpruned and no lazy
extension it is exact for F (tested against brute force over the cut-respecting tokenizations, 1e-9).

**LM calls.** One prefill call per batch (the canonical tokens' rows) and, as the branches advance together, at
most one call per byte of the longest segment: ``1 + max_j |sigma_j|`` calls whatever the texts' lengths
(``|sigma_j| < segment_bytes`` plus the longest run between two whitespace bytes).
"""

from __future__ import annotations

import itertools

from collections.abc import Sequence
from dataclasses import dataclass

from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.state import StringState
from ppl_tok.strings.tree import Branch, Event, canonical_ends, walk_branches

#: the bytes a cut may come before (the next canonical token starts with one of them)
CUT_BEFORE = frozenset(b" \t\n\r")


@dataclass(frozen=True)
class TreeMarginal:
    """One text's figures through the tree (nats): ``estimate`` is ``F`` (module docstring), ``[lower, upper]`` its
    certified bracket, ``canonical`` ``log p(v* | c)``; ``cuts``: the segments' ends (canonical token counts)."""

    lower: float
    upper: float
    estimate: float
    canonical: float
    cuts: tuple[int, ...]


def segment_cuts(lm: LanguageModel, data: bytes, ids: Sequence[int], segment_bytes: int) -> list[int]:
    """``r_1 < .. < r_m = T``: the canonical token counts where the segments end (module docstring): a canonical
    boundary followed by a byte of :data:`CUT_BEFORE`, at least ``segment_bytes`` after the last cut; the text's end."""
    if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int) or segment_bytes < 0:
        raise ValueError(f"segment_bytes must be a whole number of bytes >= 0, got {segment_bytes!r}")
    ends = canonical_ends(lm, ids)
    cuts, last = [], 0
    for r, e in enumerate(ends[:-1], 1):
        if data[e] in CUT_BEFORE and e - last >= max(1, segment_bytes):
            cuts.append(r)
            last = e
    return cuts + [len(ids)] if ids else []


def _exact_end(b: Branch, at_end: bool, state: StringState) -> Event:
    """``(L, found, U)`` on ``log S_j`` once the branch has read its segment: the prefixes ending exactly there, the
    kept ones and those lazy extension left unrun (both in the pruned mass too, so ``U`` counts them twice at worst);
    ``(0, 0, 0)`` at the root (the segment's start: its root's weight is 1)."""
    if not at_end:
        return 0.0, 0.0, 0.0
    kept = [c.hyp.log_prob for c in state.window.get(b.end, ())]
    dropped = [h.log_prob for h in state.beam.dropped.get(b.end, ())]  # not run (lazy), their mass known
    found = logsumexp(kept + dropped)
    tol = state.tolerance()
    return found - tol, found, min(0.0, logsumexp([found, state.pruned_log_mass()])) + tol


def tree_marginals(lm: LanguageModel, texts: Sequence[str], contexts: Sequence[str | Sequence[int]],
                   config: StringSearchConfig, segment_bytes: int,
                   canonical: Sequence[Sequence[int]] | None = None) -> list[TreeMarginal]:
    """:class:`TreeMarginal` of each text after its context (module docstring), all in the same LM calls.

    ``canonical``: each text's canonical tokens if known (a window's slice), else ``lm.canonical(text)``.

    :raises ValueError: a branch that fails (a dead end: the beam pruned every prefix that spells a byte), naming
        the text and the segment.
    """
    datas = [t.encode("utf-8") for t in texts]
    ids = [list(map(int, c)) for c in canonical] if canonical is not None else [lm.canonical(t) for t in texts]
    for i, (d, v) in enumerate(zip(datas, ids)):
        if b"".join(lm.vocab[t] or b"" for t in v) != d:
            raise ValueError(f"text {i}: its canonical tokens do not spell it under {lm.vocab.name}")
    prefixes = [tuple(lm.prefix_ids(c)) for c in contexts]
    terms = lm.token_log_probs_after(prefixes, ids)  # one prefill per batch: every canonical prefix's row cached
    lps = [list(itertools.accumulate(t, initial=0.0)) for t in terms]
    cuts = [segment_cuts(lm, d, v, segment_bytes) for d, v in zip(datas, ids)]
    branches = []
    for i, (v, rs) in enumerate(zip(ids, cuts)):
        ends = [0] + canonical_ends(lm, v)
        for j, (r0, r1) in enumerate(zip([0] + rs, rs)):
            branches.append(Branch(i, j, r0, ends[r0], ends[r0], ends[r1]))
    errors, _ = walk_branches(lm, contexts, datas, ids, branches, config, _exact_end)
    if errors:
        i, (j, err) = min(errors.items())
        raise ValueError(f"text {i}, segment {j}: {err}")
    out = []
    for i, rs in enumerate(cuts):
        mine = [b for b in branches if b.item == i]
        lower = estimate = upper = 0.0
        for b, r1 in zip(mine, rs):
            canon = lps[i][r1] - lps[i][b.r]  # the canonical tokens of the segment: one of the tokenizations summed
            lo, found, up = b.after  # type: ignore[misc]
            lo = max(lo, canon)
            lower, estimate, upper = lower + lo, estimate + max(found, canon), upper + max(up, lo)
        out.append(TreeMarginal(lower, min(upper, 0.0), estimate, lps[i][-1], tuple(rs)))
    return out


__all__ = ["CUT_BEFORE", "TreeMarginal", "segment_cuts", "tree_marginals"]
