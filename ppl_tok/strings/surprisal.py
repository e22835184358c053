"""Surprisal per unit (word, character, byte or region) over strings, with the word-end correction.

Let the text ``x`` be tiled by units ``u_1 .. u_n`` (each a non-empty run of bytes, in order, no gap, no
overlap), ``x_{<=k} = u_1 .. u_k`` and ``P`` the prefix probability of :mod:`ppl_tok.strings.state` (summed
over every token sequence, after BOS and the context). After each unit ``k`` the walk scores an event ``E_k``:

* ``E_0``: nothing read, ``P(E_0) = 1``;
* ``E_n``, as ``final`` says: ``"end"``, the output is exactly ``x`` (``x`` then the end of the
  string), ``P(E_n) = P(x, end)``; ``"boundary"`` (the default for words and regions: in a
  reading study a sentence is followed by more text), the interior-word rule as if the text went on
  with a boundary character, ``P(E_n) = sum over c in B of P(x c) + P(x, end)``; ``"none"``,
  ``P(E_n) = P(x)`` (nothing asked of what follows);
* for ``0 < k < n``, at a **corrected** cut (the text's own character right after
  ``u_k`` is a boundary character of the set ``B``: whitespace or punctuation,
  :class:`WordRules`): ``E_k`` = "the output starts with ``x_{<=k}`` and the next
  character is in ``B`` or the string ends",
  ``P(E_k) = sum over c in B of P(x_{<=k} c) + P(x_{<=k}, end)``;
* at any other cut: ``E_k`` = "the output starts with ``x_{<=k}``", ``P(E_k) = P(x_{<=k})``.

The surprisal of unit ``k`` in bits is

    s(u_k) = -log2 [ P(E_k) / P(E_{k-1}) ] = -log2 P(E_k | E_{k-1}),

a conditional probability because the events nest (``E_k`` implies ``E_{k-1}``: a corrected cut is one where
the text itself goes on with a character of ``B``). With a leading-space tokenizer a word's end is in the next
token (" old" then " man"); the correction conditions on it, so " old" no longer counts " older" (Pimentel &
Meister 2024; Oh & Schuler 2024). The sum telescopes:

    sum over k of s(u_k) = -log2 P(E_n)      (the chain rule, exactly; -log2 P(x, end) under "end").

Words (:func:`~ppl_tok.strings.units.word_spans`) put a unit's leading whitespace in the unit that follows, as
leading-space tokenizers do; character and byte units are uncorrected by default (every cut then scores
``P(x_{<=k})``: the chain rule of :func:`~ppl_tok.strings.chars.next_char_log_probs`).

**Certified brackets.** Each ``P(E_k)`` has a bracket ``[L_k, U_k]`` from the beam
(the mass found, plus the pruned mass ``Pi``: ``sum over c in B of P(x c) <=
sum over c in B of P^(x c) + Pi``, since every pruned prefix bounds all its
continuations together), so

    -log2 min(1, U_k / L_{k-1})  <=  s(u_k)  <=  -log2 (L_k / U_{k-1}),

and the estimate is ``-log2 (P^(E_k) / P^(E_{k-1}))`` (the masses found, without the rounding
tolerance; they telescope to ``-log2 P^(x, end)``, the estimate of the text's event, exactly); each
``[L_k, U_k]`` is widened by the rows' rounding tolerance (:mod:`ppl_tok.strings.certified`). A bracket wider than ``wide`` bits (default
3, the shared rule :func:`~ppl_tok.strings.certified.uninformative_hint`) is flagged
uninformative, with what would tighten it (a wider beam, a larger ``prune``).

**Canonical surprisal** (what minicons and the ``surprisal`` package report): the canonical tokens ``v*`` of
``x`` (after the same context) are assigned to the unit holding their first byte; a unit's canonical surprisal
is ``-log2`` of the product of ``p(v*_j | v*_{<j})`` over its tokens (0 when no token starts in it). The end of
the string is not scored (minicons does not).

**Cost.** One :class:`StringState` walks each text once; a corrected cut reads the masses of the ASCII boundary
bytes and the end at once (:mod:`~ppl_tok.strings.word_end`: only those bytes' runs, each LM row's once); a
non-ASCII boundary character costs a copy of the state extended by it. Many texts (:func:`surprisals_many`) are
walked together, sharing LM calls (:func:`~ppl_tok.strings.state.extend_many`). The canonical column runs first,
every text's canonical tokens in one forward per batch, which leaves each canonical prefix's row in the LM's prefix
cache; the walk keeps the canonical path (``keep``), so those prefixes cost no forward again, and every event's mass
found is at least the canonical tokens'. With lazy extension (``config.extend_threshold = s > 0``) a non-canonical
prefix is run only if it holds a share ``s`` of the text's mass at its offset (else its mass goes to the bracket's
upper side). ``search="tree"`` gives each unit its own branch off the canonical cache instead
(:mod:`ppl_tok.strings.tree`). """

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.limits import check_contexts, check_texts
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.surprisal_default import StringSearchConfig, surprisal_config  # the beam, its default
from ppl_tok.strings.certified import WIDE_BITS, uninformative_hint
from ppl_tok.strings.events import end_bracket
from ppl_tok.strings.state import DeadEndError, EndUnavailableError, StringState, extend_many
from ppl_tok.strings.tree import TokenTree, search_tree, walk_units
from ppl_tok.strings.word_end import boundary_event as _boundary_event  # the word-end event, one place
from ppl_tok.strings.units import (PUNCTUATION, UNIT_KINDS, WordRules, char_at, region_spans,  # noqa: F401 - re-exported
                                   unit_byte_spans, word_spans)

LN2 = math.log(2.0)

@dataclass(frozen=True)
class UnitSurprisal:
    """One unit's surprisal, in bits.

    :param unit: the unit's index in the text (0-based).
    :param text: the unit (a byte that is not a whole character is shown ``\\xNN``).
    :param start: the character offset where the unit starts; ``end`` where it ends (exclusive;
        a byte unit spans the character it is part of).
    :param byte_start: the byte offset where the unit starts; ``byte_end`` where it ends.
    :param surprisal: ``-log2 P(E_k | E_{k-1})``, the estimate (module docstring).
    :param canonical: the canonical-token surprisal of the unit.
    :param lower: a certified lower bound on the surprisal; ``upper`` an upper bound (``inf``: none).
    :param informative: whether ``upper - lower <= wide``.
    :param followed_by: the event after the unit: ``"boundary"`` (corrected; the last unit under ``final``
        ``"boundary"``), ``"any"`` (the last unit under ``"none"``) or ``"end"``.
    :param tokens: the canonical tokens assigned to the unit.
    :param hint: what would tighten an uninformative bracket (``None`` when informative).
    """

    unit: int
    text: str
    start: int
    end: int
    byte_start: int
    byte_end: int
    surprisal: float
    canonical: float
    lower: float
    upper: float
    informative: bool
    followed_by: str
    tokens: int
    hint: str | None = None

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def to_dict(self) -> dict[str, Any]:
        """The row's fields (``upper`` may be ``inf``: :func:`ppl_tok.common.jsonout.to_json` writes it)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# ------------------------------------------------------------------- walk
def _end_event(state: StringState) -> tuple[float, float, float]:
    try:
        p = end_bracket(state)
    except EndUnavailableError:
        raise EndUnavailableError(f"{state.lm.name} has no EOS or other special token: the last unit's surprisal "
                                  "(followed by the end of the string) is undefined") from None
    return p.lower, p.found, p.upper


#: what the last unit of an item is conditioned on (module docstring, ``E_n``)
FINALS = ("end", "boundary", "none")


def _event(state: StringState, k: int, last: str | None, corrected: bool, ascii_bytes: list[int],
           wide_chars: list[str]) -> tuple[float, float, float]:
    """``(L_k, found, U_k)`` once ``state`` has read units ``0..k`` (``last``: the item's ``final``, else ``None``):
    the bracket and the mass found (the estimate, without the rounding tolerance that widens the bracket)."""
    if last == "end":
        return _end_event(state)
    if last == "boundary":
        corrected = True
    if corrected:
        return _boundary_event(state, ascii_bytes, wide_chars)
    p = state.prefix_log_prob()
    return p.lower, p.found, p.upper


def _walk(lm: LanguageModel, jobs: list[_Job], config: StringSearchConfig, boundary: str) -> None:
    """Fill ``job.events`` (``[L_k, U_k]`` for k = 0..n) of every job, the walks sharing LM calls.

    :func:`~ppl_tok.strings.state.extend_many` walks the texts: each reads its bytes until one
    needs a forward, and one call serves every text waiting, so ``B`` texts cost about the calls
    of the one that needs the most. Each job's beam is its own (the figures equal a walk of the
    text alone, up to float32 rounding of a batched forward). A job that fails (a byte no kept
    token covers, an LM without an end) gets ``job.error`` and leaves the walk; the others go on.
    """
    ascii_bytes = sorted({ord(c) for c in boundary if ord(c) < 128})
    wide_chars = [c for c in boundary if ord(c) >= 128]
    lm.states(sorted({j.prefix for j in jobs}))  # the contexts in one batched prefill (or the cache)
    for job in jobs:
        # the canonical path is always kept (and run: its rows are in the cache already), so the mass found of
        # every event is at least the canonical tokens', whatever lazy extension skips
        job.state = StringState(lm, job.context, config, keep=job.canonical_ids())

    def after(k: int, j: int) -> None:
        job = jobs[k]
        if job.unit_ends(j):
            unit = job.unit_at(j)
            last = job.final if unit == len(job.spans) - 1 else None
            job.events.append(_event(job.state, unit, last, job.corrected[unit], ascii_bytes, wide_chars))

    failed: dict[int, Exception] = {}
    extend_many([job.state for job in jobs], [job.data for job in jobs], after=after, failed=failed)
    for k, err in failed.items():
        jobs[k].fail(len(jobs[k].events) - 1, err)  # (the unit being read: its event is not in yet)
    for job in jobs:
        job.state = None  # its LM states may go


class _Job:
    """One text of a walk: its bytes, units, which cuts are corrected, and what the walk found."""

    def __init__(self, lm: LanguageModel, text: str, units: str | Sequence[Any], context: str | Sequence[int],
                 rules: WordRules, word_end: bool | None, final: str | None = None):
        if not isinstance(text, str) or not text:
            raise ValueError("the text is empty: there are no units to score")
        if final is not None and final not in FINALS:
            raise ValueError(f"final must be one of {', '.join(FINALS)} (what the last unit is conditioned on), "
                             f"got {final!r}")
        self.text, self.data = text, text.encode("utf-8")
        self.spans, self.chars = unit_byte_spans(text, units, rules)
        if word_end is None:
            word_end = not (isinstance(units, str) and units in ("char", "byte"))
        self.final = final or ("boundary" if word_end else "end")
        boundary = set(rules.boundary_chars)
        n = len(self.data)
        self.corrected = [word_end and b < n and char_at(self.data, b) in boundary for _, b in self.spans]
        self.texts = [self.data[a:b].decode("utf-8", errors="backslashreplace") for a, b in self.spans]
        self.context, self.lm, self._ids = context, lm, None
        self.prefix = lm.prefix_ids(context)
        self._unit = [0] * n
        for k, (a, b) in enumerate(self.spans):
            self._unit[a:b] = [k] * (b - a)
        self.state: StringState | None = None
        self.events: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)]
        self.pairs: list[Any] | None = None  # the token tree's (E_{k-1}, E_k) per unit (tree.walk_units)
        self.error: Exception | None = None

    def canonical_ids(self) -> list[int] | None:
        """The text's canonical tokens (``None`` if no token sequence spells it: the walk then names the byte)."""
        if self._ids is None:
            try:
                self._ids = self.lm.canonical(self.text)
            except ValueError:
                return None
        return self._ids

    def fail(self, k: int, err: Exception) -> None:
        """The walk stopped in unit ``k``: keep the error, named by the unit, and let the state go."""
        self.error = type(err)(f"unit {k} ({self.texts[k]!r}, bytes {self.spans[k][0]}..{self.spans[k][1]}): {err}")
        self.state = None

    def unit_at(self, j: int) -> int:
        """The unit holding byte ``j``."""
        return self._unit[j]

    def unit_ends(self, j: int) -> bool:
        """Whether a unit ends with byte ``j``."""
        return self.spans[self._unit[j]][1] == j + 1


def _canonical_many(lm: LanguageModel, jobs: list[_Job]) -> list[tuple[list[float], list[int]] | None]:
    """Per job, per unit: the canonical tokens' log-probs summed (nats) and their number (tokens go where they
    start); every text's canonical tokens in one batched call (one forward per batch on ``transformers``, which
    also leaves each canonical prefix's row in the prefix cache). ``None`` for a text the tokenizer cannot
    encode (the walk names the byte no token covers)."""
    ids, surfaces = [], []
    for i, job in enumerate(jobs):
        toks = job.canonical_ids() or []
        surf = [lm.vocab.surfaces[t] or b"" for t in toks]
        if toks and b"".join(surf) != job.data:
            where = f"item {i}: " if len(jobs) > 1 else ""
            raise ValueError(f"{where}the canonical tokens of {job.text!r} do not spell it under {lm.vocab.name}")
        ids.append(toks)
        surfaces.append(surf)
    terms = lm.token_log_probs_after([job.prefix for job in jobs], ids)  # (an empty sequence costs no forward)
    out: list[tuple[list[float], list[int]] | None] = []
    for job, lps, surf in zip(jobs, terms, surfaces):
        if not surf:
            out.append(None)
            continue
        sums, counts = [0.0] * len(job.spans), [0] * len(job.spans)
        at = 0
        for lp, piece in zip(lps, surf):
            k = job.unit_at(at)
            sums[k] += lp
            counts[k] += 1
            at += len(piece)
        out.append((sums, counts))
    return out


def _rows(job: _Job, canon: list[float], counts: list[int], config: StringSearchConfig,
          wide: float) -> list[UnitSurprisal]:
    rows = []
    for k, ((a, b), (ca, cb)) in enumerate(zip(job.spans, job.chars)):
        (lo0, found0, up0), (lo1, found1, up1) = job.pairs[k] if job.pairs else job.events[k: k + 2]
        if lo0 == -math.inf:
            raise DeadEndError(f"unit {k} ({job.texts[k]!r}): the beam found no mass for the text before it")
        lower = max(0.0, -min(0.0, up1 - lo0) / LN2)
        upper = math.inf if lo1 == -math.inf else -(lo1 - up0) / LN2
        hint = uninformative_hint(upper - lower, config, wide, unit="bits")
        rows.append(UnitSurprisal(
            unit=k, text=job.texts[k], start=ca, end=cb, byte_start=a, byte_end=b,
            surprisal=-(found1 - found0) / LN2, canonical=0.0 - canon[k] / LN2, lower=lower, upper=upper,
            informative=hint is None, followed_by={"none": "any"}.get(job.final, job.final) if k == len(job.spans) - 1
            else ("boundary" if job.corrected[k] else "any"), tokens=counts[k], hint=hint))
    return rows


#: next-token rows held per canonical token for the token tree's branches (they run about 4.6 prefixes per canonical
#: token on OpenBookQA test words, SmolLM2-135M): under the LM's row budget alone their rows were dropped before
#: their events read them, and recomputed one LM call per round (54 rows, 9 calls of 32 on 200 words)
TREE_ROWS = 6


def surprisal_batch(lm: LanguageModel, texts: Sequence[str], *, units: str | Sequence[Any] = "word",
                    contexts: Sequence[str | Sequence[int]] | None = None, config: StringSearchConfig | None = None,
                    rules: WordRules | None = None, word_end: bool | None = None,
                    wide: float = WIDE_BITS, final: str | None = None,
                    search: str | TokenTree = "walk") -> list[list[UnitSurprisal] | Exception]:
    """:func:`surprisals_many`, an item that fails given as its error (the others' rows are kept).

    Bad arguments (an empty text, regions that do not tile it) raise before any LM call; what only
    the walk finds (a byte no kept token covers, an LM without an end) is the item's entry.
    """
    texts = check_texts("texts", texts)
    if not wide > 0:
        raise ValueError(f"wide must be a positive number of bits, got {wide!r}")
    texts = list(texts)
    rules = rules or WordRules()
    config = config or surprisal_config()  # the one default of every surprisal (SURPRISAL_LAZY)
    tree = search_tree(search)
    contexts = [""] * len(texts) if contexts is None else check_contexts("contexts", contexts)
    if len(contexts) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(contexts)} contexts")
    per_item = [units] * len(texts) if isinstance(units, str) else list(units)
    if len(per_item) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(per_item)} unit specifications (give one kind for all, or "
                         "one per text)")
    jobs = []
    for i, (text, u, c) in enumerate(zip(texts, per_item, contexts)):
        try:
            jobs.append(_Job(lm, text, u, c, rules, word_end, final))
        except ValueError as err:
            raise type(err)(f"item {i}: {err}") if len(texts) > 1 else err from None
    if not jobs:
        return []
    # the canonical column first: its forward leaves the canonical prefixes' rows in the cache, held for the
    # walk (B texts of T tokens: B T |V| 4 bytes more; without it the first would be dropped before they are read)
    held = 4 * len(lm.vocab) * sum(len(job.canonical_ids() or ()) for job in jobs)
    with lm.row_budget(lm.config.row_bytes + held * (1 if tree is None else 1 + TREE_ROWS)):
        canon = _canonical_many(lm, jobs)
        if tree is None:
            _walk(lm, jobs, config, rules.boundary_chars)
        else:
            walk_units(lm, jobs, config, tree, rules.boundary_chars, _event)
    out: list[list[UnitSurprisal] | Exception] = []
    for job, column in zip(jobs, canon):
        if job.error is not None:
            out.append(job.error)
            continue
        try:
            if column is None:
                lm.canonical(job.text)  # raises: the tokenizer cannot encode a text the walk covered
                raise ValueError(f"the tokenizer gives no canonical tokens for {job.text!r}")
            out.append(_rows(job, *column, config, wide))
        except ValueError as err:
            out.append(err)
    return out


def surprisals_many(lm: LanguageModel, texts: Sequence[str], *, units: str | Sequence[Any] = "word",
                    contexts: Sequence[str | Sequence[int]] | None = None, config: StringSearchConfig | None = None,
                    rules: WordRules | None = None, word_end: bool | None = None,
                    wide: float = WIDE_BITS, final: str | None = None,
                    search: str | TokenTree = "walk") -> list[list[UnitSurprisal]]:
    """:func:`surprisals` of many texts, walked together: one LM call serves every walk waiting for a forward.

    ``out[i]`` equals ``surprisals(lm, texts[i], units=..., context=contexts[i], ...)`` up to the
    float32 rounding of a batched forward (tested); a batch of ``B`` texts makes the LM calls of
    the longest, so on a CPU, where a call of a few rows costs about what one row does, it is
    up to ``B`` times faster than ``B`` walks.

    :param units: one kind for every text (``"word"``, ``"char"``, ``"byte"``) or one entry per
        text (a kind or that text's regions).
    :param contexts: one per text (default: none).
    :raises ValueError: the first item that fails, named by its index (``item 3: unit 2 ...``);
        :func:`surprisal_batch` keeps the other items' rows.
    """
    out = surprisal_batch(lm, texts, units=units, contexts=contexts, config=config, rules=rules, word_end=word_end,
                          wide=wide, final=final, search=search)
    for i, rows in enumerate(out):
        if isinstance(rows, Exception):
            raise type(rows)(f"item {i}: {rows}") from rows
    return out  # type: ignore[return-value]


def surprisals(lm: LanguageModel, text: str, *, units: str | Sequence[Any] = "word", context: str | Sequence[int] = "",
               config: StringSearchConfig | None = None, rules: WordRules | None = None,
               word_end: bool | None = None, wide: float = WIDE_BITS,
               final: str | None = None, search: str | TokenTree = "walk") -> list[UnitSurprisal]:
    """The surprisal in bits of each unit of ``text`` over strings, beside its canonical-token surprisal.

    See the module docstring for the definition: ``s(u_k) = -log2 P(E_k | E_{k-1})`` with the
    word-end correction at cuts where the text goes on with a boundary character; the last unit
    is followed by what ``final`` says, and the units' surprisals sum to ``-log2 P(E_n)``.
    Many texts: :func:`surprisals_many` (walked together, far fewer LM calls).

    :param units: ``"word"`` (:func:`word_spans` under ``rules``), ``"char"`` (UTF-8 characters),
        ``"byte"``, or regions: ``(start, end)`` character spans or cut offsets that tile the text.
    :param context: a string (canonically tokenized) or token ids after BOS that the text continues.
    :param config: the beam (default :func:`~ppl_tok.strings.surprisal_default.surprisal_config`, as ``ppl-tok surprisal``'s).
    :param rules: the word rules and the boundary set ``B`` (:class:`WordRules`).
    :param word_end: whether to apply the word-end correction (default: yes for words and regions,
        no for characters and bytes).
    :param wide: a bracket wider than this many bits is flagged uninformative (default
        :data:`~ppl_tok.strings.certified.WIDE_BITS`, the one rule of every string figure).
    :param final: the last unit's event, :data:`FINALS`: ``"boundary"`` (a boundary character or the end
        follows, the default where ``word_end`` is on), ``"end"`` (the string ends: the default for
        characters and bytes) or ``"none"``.
    :param search: ``"walk"`` (the byte-synchronous walk, the reference) or ``"tree"`` / a ``TokenTree``: one
        branch per unit off the canonical cache, conditioned on its canonical head (:mod:`ppl_tok.strings.tree`).
    :raises ValueError: empty text, regions that do not tile it; :class:`DeadEndError` (a
        ``ValueError``) when no token covers a byte, naming the unit.
    """
    (rows,) = surprisal_batch(lm, [text], units=[units], contexts=[context], config=config, rules=rules,
                              word_end=word_end, wide=wide, final=final, search=search)
    if isinstance(rows, Exception):
        raise rows
    return rows


def canonical_surprisals(lm: LanguageModel, text: str, *, units: str | Sequence[Any] = "word",
                         context: str | Sequence[int] = "", rules: WordRules | None = None) -> list[float]:
    """The canonical-token surprisal (bits) of each unit of ``text`` alone: the column ``canonical`` of
    :func:`surprisals` without the walk over strings (what minicons reports; one forward of the text)."""
    return canonical_surprisals_many(lm, [text], units=[units], contexts=[context], rules=rules)[0]


def canonical_surprisals_many(lm: LanguageModel, texts: Sequence[str], *, units: str | Sequence[Any] = "word",
                              contexts: Sequence[str | Sequence[int]] | None = None,
                              rules: WordRules | None = None) -> list[list[float]]:
    """:func:`canonical_surprisals` of many texts in one batched call (what minicons does with a batch)."""
    texts = check_texts("texts", texts)
    texts = list(texts)
    rules = rules or WordRules()
    contexts = [""] * len(texts) if contexts is None else check_contexts("contexts", contexts)
    per_item = [units] * len(texts) if isinstance(units, str) else list(units)
    if not len(contexts) == len(per_item) == len(texts):
        raise ValueError(f"{len(texts)} texts, {len(contexts)} contexts and {len(per_item)} unit specifications: "
                         "give one of each per text")
    jobs = [_Job(lm, t, u, c, rules, None) for t, u, c in zip(texts, per_item, contexts)]
    for job in jobs:
        if job.canonical_ids() is None:
            lm.canonical(job.text)  # raises, naming the byte no token covers
    return [[0.0 - v / LN2 for v in sums] for sums, _ in _canonical_many(lm, jobs)]  # type: ignore[misc]
