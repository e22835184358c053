"""The conditional ``log p(y | x)`` through the token tree: LM calls bounded by the alternatives, not by ``y``.

The byte-synchronous walk (:func:`~ppl_tok.strings.conditional.conditionals_many`) reads the prompt's tail and
the continuation ``y`` byte by byte, one small LM call per byte that needs a forward. Here (``search="tree"``)
the text ``x y`` is cut into units: the prompt ``u_0 = x`` (context only) and the words of ``y``
(:func:`~ppl_tok.strings.units.word_spans`: ``y``'s first unit begins at the join ``|x|``, wherever it falls,
mid-word included), ``u_1 .. u_n``. The canonical tokens ``v*`` of ``x y`` run in one prefill forward; every unit
``k >= 1`` gets a branch of :mod:`ppl_tok.strings.tree` rooted at its canonical head ``h_k`` (the canonical tokens
of ``x y`` ending before the reach of the unit's start and :attr:`~ppl_tok.strings.tree.TokenTree.back_off` bytes
before it), plus the detour roots that tree finds; the branches of every request advance together, so the
LM calls of a batch are one prefill plus at most ``(1 + detour_depth) (1 + max tail)`` (the tail: a unit, its
reach and the back-off), whatever the continuations' lengths.

**The estimand.** With ``E_0`` = "the output begins with ``x``", ``E_k`` (``0 < k < n``) = "begins with
``x u_1 .. u_k``" and ``E_n`` the event the request names (``"prefix"``: begins with ``x y``; ``"boundary"``:
``x y`` then a character of ``B`` or the end, :mod:`ppl_tok.strings.conditional`),

    log p_tree(y | x) = sum over k = 1..n of log P(E_k | E_{k-1}, c H_k),

``H_k`` the unit's roots (its canonical head and detour roots, :mod:`ppl_tok.strings.tree`): each factor is the
LM over strings conditioned on the tokenization's beginning being one of ``H_k``. It covers, per unit, every token
sequence that starts with one of its roots: all tokenizations of the tail (tokens spanning the join, a split
inside a word, a token across a word boundary) that leave the canonical path after the root. It leaves out the
histories that left it earlier (other than through a detour root), so it is not a bound on the exact
``log p(y | x)``, and the factors do not telescope (they would, to ``log P(E_n) - log P(E_0)``, with every head
empty: ``back_off`` past the text). Each factor's bracket is its branch's (found mass, plus the pruned mass
``Pi``, widened by the rows' rounding tolerance), and the interval is their sum,

    sum of (L_k - U_{k-1})  <=  log p_tree(y | x)  <=  min(0, sum of min(0, U_k - L_{k-1})),

certified **for** ``p_tree`` (with ``H_k`` as found); the estimate is the sum of ``log P^(E_k) - log P^(E_{k-1})``
(masses found). With the beam unpruned and no detour roots it equals brute force over exactly the sequences each
branch covers (tested, 1e-9).

The result's ``prompt_prefix`` and ``joint_prefix`` are the first branch's brackets on ``E_0`` and ``E_1``
(relative to its head); ``forwards`` is the batch's token-forwards shared equally among its requests;
``head_bytes`` the longest canonical head; ``greedy`` is not computed (``None``: greedy decoding needs the
next-byte distribution at every byte of ``y``, which the branches do not read).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.certified import PrefixProbability, uninformative_hint
from ppl_tok.strings.conditional import StringConditional
from ppl_tok.strings.conditional_event import DEFAULT_EVENT, EVENTS
from ppl_tok.strings.cover import cover_index
from ppl_tok.strings.tree import TokenTree, canonical_ends, walk_units


def tree_units(prompt: str, text: str) -> list[tuple[int, int]]:
    """The character spans of the units of ``prompt + text``: the prompt (if any), then the words of ``text``."""
    from ppl_tok.strings.units import WordRules, word_spans

    n = len(prompt)
    return ([(0, n)] if prompt else []) + [(n + a, n + b) for a, b in word_spans(text, WordRules())]


def factor_bracket(before: tuple[float, float, float], after: tuple[float, float, float]
                   ) -> tuple[float, float, float]:
    """``(lower, estimate, upper)`` of ``log P(E_k | E_{k-1}, root)`` from the two events' ``(L, found, U)``."""
    (lo0, found0, up0), (lo1, found1, up1) = before, after
    if lo0 == -math.inf:
        raise ValueError("the beam found no mass for the text before the unit: the conditional is undefined")
    return lo1 - up0, found1 - found0, min(0.0, up1 - lo0)


def conditionals_tree(lm: LanguageModel, prompts: Sequence[str], texts: Sequence[str],
                      context: str | Sequence[int] = "", config: StringSearchConfig | None = None,
                      event: str = DEFAULT_EVENT, tree: TokenTree | None = None) -> list[StringConditional]:
    """``log p_tree(texts[i] | prompts[i], context)`` (module docstring) of many pairs, all through one token tree.

    :param config: each branch's beam (``prefill`` plays no part: every branch is rooted at a canonical head).
    :param tree: the tree's setting (default :class:`~ppl_tok.strings.tree.TokenTree`).
    :raises ValueError: an empty text, or a pair whose branch hits a dead end (named by the pair's index).
    """
    from ppl_tok.strings.surprisal import _event, _Job
    from ppl_tok.strings.units import WordRules

    if len(prompts) != len(texts):
        raise ValueError(f"{len(prompts)} prompts but {len(texts)} texts")
    if event not in EVENTS:
        raise ValueError(f"event must be one of {', '.join(EVENTS)} (what the text's probability is of), got {event!r}")
    config, tree = config or StringSearchConfig(), tree or TokenTree()
    start = time.perf_counter()
    jobs = []
    for i, (p, t) in enumerate(zip(prompts, texts)):
        if not isinstance(p, str) or not isinstance(t, str) or not t:
            raise ValueError(f"pair {i}: the prompt and the text must be strings, the text non-empty (got {p!r}, "
                             f"{t!r}); search='walk' scores an empty text")
        jobs.append(_Job(lm, p + t, tree_units(p, t), context, WordRules(), word_end=False,
                         final="boundary" if event == "boundary" else "none"))
    firsts = [1 if p else 0 for p in prompts]
    ids = [job.canonical_ids() or [] for job in jobs]
    before = lm.stats.forwards
    with lm.row_budget(lm.config.row_bytes + 4 * len(lm.vocab) * sum(map(len, ids))):
        lm.token_log_probs_after([job.prefix for job in jobs], ids)  # the canonical column: one prefill forward
        walk_units(lm, jobs, config, tree, WordRules().boundary_chars, _event, first=firsts)
    forwards = round((lm.stats.forwards - before) / len(jobs))
    out = []
    for i, (p, t, job, k0) in enumerate(zip(prompts, texts, jobs, firsts)):
        if job.error is not None:
            raise ValueError(f"pair {i} (prompt {p!r}, text {t!r}): {job.error}") from job.error
        try:
            parts = [factor_bracket(*pair) for pair in job.pairs[k0:]]
        except ValueError as err:
            raise ValueError(f"pair {i} (prompt {p!r}): {err}") from err
        lower, estimate, upper = (sum(x[j] for x in parts) for j in range(3))
        tol = sum(max(0.0, e[1] - e[0]) for pair in job.pairs[k0:] for e in pair if e[1] > -math.inf)
        (lo0, f0, up0), (lo1, f1, up1) = job.pairs[k0]
        ends = canonical_ends(lm, ids[i])
        index = cover_index(lm.vocab)
        heads = [tree.head(index, job.data, ends, a) if ids[i] else 0 for a, _ in job.spans[k0:]]
        head_bytes = max((ends[r - 1] for r in heads if r), default=0)
        upper = min(0.0, upper)
        out.append(StringConditional(
            prompt=p, text=t, lower=lower, upper=upper, estimate=min(0.0, estimate),
            prompt_prefix=PrefixProbability(f0, up0 - (f0 - lo0), f0 - lo0),
            joint_prefix=PrefixProbability(f1, up1 - (f1 - lo1) if f1 > -math.inf else up1, max(0.0, f1 - lo1)),
            forwards=forwards, n_bytes=len(job.data), seconds=time.perf_counter() - start, prefill="tree",
            head_bytes=head_bytes, tolerance=tol, hint=uninformative_hint(upper - lower, config), event=event))
    return out


__all__ = ["conditionals_tree", "factor_bracket", "tree_units"]
