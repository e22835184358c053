"""Surprisal per unit (word, character, byte or region) over strings, with the word-end correction.

Let the text ``x`` be tiled by units ``u_1 .. u_n`` (each a non-empty run of
bytes, in order, no gap, no overlap), ``x_{<=k} = u_1 .. u_k`` and ``P`` the
prefix probability of :mod:`ppl_tok.strings.state` (summed over every token
sequence, after BOS and the context). After each unit ``k`` the walk scores an
event ``E_k``:

* ``E_0``: nothing read, ``P(E_0) = 1``;
* ``E_n``: the output is exactly ``x`` (``x`` then the end of the string),
  ``P(E_n) = P(x, end)``;
* for ``0 < k < n``, at a **corrected** cut (the text's own character right after
  ``u_k`` is a boundary character of the set ``B``: whitespace or punctuation,
  :class:`WordRules`): ``E_k`` = "the output starts with ``x_{<=k}`` and the next
  character is in ``B`` or the string ends",
  ``P(E_k) = sum over c in B of P(x_{<=k} c) + P(x_{<=k}, end)``;
* at any other cut: ``E_k`` = "the output starts with ``x_{<=k}``", ``P(E_k) = P(x_{<=k})``.

The surprisal of unit ``k`` in bits is

    s(u_k) = -log2 [ P(E_k) / P(E_{k-1}) ] = -log2 P(E_k | E_{k-1}),

a conditional probability because the events nest (``E_k`` implies ``E_{k-1}``:
a corrected cut is one where the text itself goes on with a character of ``B``).
With a leading-space tokenizer a word's end is in the next token (" old" then
" man"); the correction conditions on it, so " old" no longer counts " older"
(Pimentel & Meister 2024; Oh & Schuler 2024). The sum telescopes:

    sum over k of s(u_k) = -log2 P(x, end)      (the chain rule, exactly).

Words (:func:`word_spans`) put a unit's leading whitespace in the unit that
follows, as leading-space tokenizers do; character and byte units are
uncorrected by default (every cut then scores ``P(x_{<=k})``: the chain rule of
:func:`~ppl_tok.strings.chars.next_char_log_probs`).

**Certified brackets.** Each ``P(E_k)`` has a bracket ``[L_k, U_k]`` from the beam
(the mass found, plus the pruned mass ``Pi``: ``sum over c in B of P(x c) <=
sum over c in B of P^(x c) + Pi``, since every pruned prefix bounds all its
continuations together), so

    -log2 min(1, U_k / L_{k-1})  <=  s(u_k)  <=  -log2 (L_k / U_{k-1}),

and the estimate is ``-log2 (L_k / L_{k-1})`` (the masses found; they telescope
to ``-log2 P^(x, end)`` exactly). A bracket wider than ``wide`` bits is flagged
uninformative: a wider beam or a larger ``prune`` tightens it.

**Canonical surprisal** (what minicons and the ``surprisal`` package report):
the canonical tokens ``v*`` of ``x`` (after the same context) are assigned to
the unit holding their first byte; a unit's canonical surprisal is
``-log2`` of the product of ``p(v*_j | v*_{<j})`` over its tokens (0 when no
token starts in it). The end of the string is not scored (minicons does not).

**Cost.** One :class:`StringState` walks the text once; a corrected cut reads
one next-byte distribution (all ASCII boundary bytes and the end at once); a
non-ASCII boundary character costs a copy of the state extended by it.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.state import END_OF_STRING, DeadEndError, EndUnavailableError, StringState

LN2 = math.log(2.0)

#: ASCII punctuation that splits words; the apostrophe and the hyphen stay inside a word ("don't", "man-eating")
PUNCTUATION = "".join(c for c in string.punctuation if c not in "'-")

#: the unit kinds :func:`surprisals` splits the text into itself
UNIT_KINDS = ("word", "char", "byte")


@dataclass(frozen=True)
class WordRules:
    """How text splits into words, and the boundary set ``B`` of the word-end correction.

    :param space: characters that separate words (default ASCII whitespace). A run of them
        belongs to the unit that follows (leading space, as leading-space tokenizers put it);
        a run at the end of the text belongs to the last unit.
    :param punctuation: characters that end a word (default ASCII punctuation except ``'`` and ``-``).
    :param split_punctuation: ``True``: a run of punctuation is a unit of its own (with its leading
        space), so "boat." is " boat" then "."; ``False``: words are whitespace-delimited and keep
        their punctuation (" boat." one unit), as many eye-tracking corpora count them.
    :param boundary: the set ``B`` whose next character ends a word (``None``: ``space`` plus
        ``punctuation``). ASCII characters cost nothing; each non-ASCII one costs a state copy per cut.
    """

    space: str = string.whitespace
    punctuation: str = PUNCTUATION
    split_punctuation: bool = True
    boundary: str | None = None

    def __post_init__(self) -> None:
        if not self.space:
            raise ValueError("WordRules.space is empty: words need at least one separating character")
        both = set(self.space) & set(self.punctuation)
        if both:
            raise ValueError(f"WordRules: {''.join(sorted(both))!r} is both space and punctuation")

    @property
    def boundary_chars(self) -> str:
        """The set ``B``, each character once, in order."""
        chars = self.space + self.punctuation if self.boundary is None else self.boundary
        return "".join(dict.fromkeys(chars))


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
    :param followed_by: the event after the unit: ``"boundary"`` (corrected), ``"any"`` or ``"end"``.
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


# ------------------------------------------------------------------ units
def word_spans(text: str, rules: WordRules | None = None) -> list[tuple[int, int]]:
    """The character spans of the words of ``text`` under ``rules`` (:class:`WordRules`); they tile the text.

    A unit is: its leading run of ``space``, then either a run of ``punctuation`` (when
    ``split_punctuation``) or a run of other characters (with ``split_punctuation=False``: every
    non-space character). Whitespace at the very end joins the last unit; text that is all
    whitespace is one unit.
    """
    rules = rules or WordRules()
    space, punct = set(rules.space), set(rules.punctuation) if rules.split_punctuation else set()
    spans: list[tuple[int, int]] = []
    n, i = len(text), 0
    while i < n:
        j = i
        while j < n and text[j] in space:
            j += 1
        if j == n:
            if spans:
                spans[-1] = (spans[-1][0], n)
            else:
                spans.append((i, n))
            break
        k = j
        if text[j] in punct:
            while k < n and text[k] in punct:
                k += 1
        else:
            while k < n and text[k] not in space and text[k] not in punct:
                k += 1
        spans.append((i, k))
        i = k
    return spans


def region_spans(text: str, regions: Sequence[tuple[int, int]] | Sequence[int]) -> list[tuple[int, int]]:
    """User-given regions as character spans, checked to tile ``text``.

    ``regions``: ``(start, end)`` character spans in order, or the cut offsets between regions
    (``0`` and ``len(text)`` may be included or left out).
    :raises ValueError: no regions, an empty region, a gap, an overlap, or a span outside the text.
    """
    regions = list(regions)
    if not regions:
        raise ValueError("no regions: give (start, end) character spans or cut offsets that tile the text")
    n = len(text)
    if all(isinstance(r, int) and not isinstance(r, bool) for r in regions):
        cuts = [int(r) for r in regions]
        bad = [c for c in cuts if not 0 <= c <= n]
        if bad:
            raise ValueError(f"region cut {bad[0]} is outside the text (0..{n} characters)")
        if any(b <= a for a, b in zip(cuts, cuts[1:])):
            raise ValueError(f"region cuts must increase strictly, got {cuts}")
        cuts = [0] + [c for c in cuts if 0 < c < n] + [n]
        return list(zip(cuts, cuts[1:]))
    spans = []
    for k, r in enumerate(regions):
        try:
            a, b = (int(v) for v in r)
        except (TypeError, ValueError):
            raise ValueError(f"region {k} is {r!r}: a region is a (start, end) pair of character offsets") from None
        spans.append((a, b))
    at = 0
    for k, (a, b) in enumerate(spans):
        if b <= a:
            raise ValueError(f"region {k} ({a}, {b}) is empty or reversed")
        if a > at:
            raise ValueError(f"regions do not tile the text: characters {at}..{a} ({text[at:a]!r}) are in no "
                             f"region (a gap before region {k})")
        if a < at:
            raise ValueError(f"regions do not tile the text: region {k} ({a}, {b}) overlaps the one before "
                             f"(which ends at {at})")
        at = b
    if at != n:
        what = f"characters {at}..{n} ({text[at:]!r}) are in no region" if at < n else \
            f"the last region ends at {at}, past the text's {n} characters"
        raise ValueError(f"regions do not tile the text: {what}")
    return spans


def unit_byte_spans(text: str, units: str | Sequence[Any],
                    rules: WordRules | None = None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(byte spans, character spans)`` of the units of ``text`` (the two lists align)."""
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + len(ch.encode("utf-8")))
    if isinstance(units, str):
        if units not in UNIT_KINDS:
            raise ValueError(f"units must be one of {', '.join(UNIT_KINDS)} or a list of regions, got {units!r}")
        if units == "byte":
            chars = [k for k in range(len(text)) for _ in range(offsets[k + 1] - offsets[k])]
            return [(b, b + 1) for b in range(offsets[-1])], [(k, k + 1) for k in chars]
        spans = [(k, k + 1) for k in range(len(text))] if units == "char" else word_spans(text, rules)
    else:
        spans = region_spans(text, units)
    return [(offsets[a], offsets[b]) for a, b in spans], spans


# ------------------------------------------------------------------- walk
def _boundary_event(state: StringState, ascii_bytes: list[int], wide_chars: list[str]) -> tuple[float, float]:
    """``[L, U]`` on ``log (sum over c in B of P(x c) + P(x, end))`` for the bytes ``x`` the state has read."""
    nb = state.next_byte_log_probs()
    pruned = state.pruned_log_mass()
    found = nb.unnormalised[ascii_bytes + [END_OF_STRING]].tolist()
    lower_terms, upper_terms = list(found), list(found) + [pruned]
    if wide_chars:
        shared = state._shared
        try:
            for ch in wide_chars:
                data = ch.encode("utf-8")
                if float(nb.unnormalised[data[0]]) == -math.inf:
                    continue  # no mass found through its lead byte: what is pruned is in ``pruned`` already
                child = state.copy()
                try:
                    p = child.extend(data).prefix_log_prob()
                except DeadEndError:
                    continue
                lower_terms.append(p.lower)
                upper_terms.append(p.upper)
        finally:
            state._shared = shared  # the copies die here: the state may release its LM states again
    return logsumexp(lower_terms), min(nb.prefix.upper, logsumexp(upper_terms))


def _end_event(state: StringState) -> tuple[float, float]:
    nb = state.next_byte_log_probs()
    if not nb.has_end:
        raise EndUnavailableError(f"{state.lm.name} has no EOS or other special token: the last unit's surprisal "
                                  "(followed by the end of the string) is undefined")
    lower = float(nb.unnormalised[END_OF_STRING])
    return lower, min(nb.prefix.upper, logsumexp([lower, state.pruned_log_mass()]))


def _events(state: StringState, data: bytes, spans: list[tuple[int, int]], corrected: list[bool],
            boundary: str, texts: list[str]) -> list[tuple[float, float]]:
    """``[L_k, U_k]`` for k = 0..n, walking ``state`` along ``data`` unit by unit."""
    ascii_bytes = sorted({ord(c) for c in boundary if ord(c) < 128})
    wide_chars = [c for c in boundary if ord(c) >= 128]
    events = [(0.0, 0.0)]
    for k, (a, b) in enumerate(spans):
        try:
            state.extend(data[a:b])
        except DeadEndError as err:
            raise DeadEndError(f"unit {k} ({texts[k]!r}, bytes {a}..{b}): {err}") from None
        if k == len(spans) - 1:
            events.append(_end_event(state))
        elif corrected[k]:
            events.append(_boundary_event(state, ascii_bytes, wide_chars))
        else:
            p = state.prefix_log_prob()
            events.append((p.lower, p.upper))
    return events


def _canonical(lm: LanguageModel, text: str, data: bytes, context: str | Sequence[int],
               spans: list[tuple[int, int]]) -> tuple[list[float], list[int]]:
    """Per unit: the canonical tokens' log-probs summed (nats) and their number (tokens go where they start)."""
    ids = lm.canonical(text)
    surfaces = [lm.vocab.surfaces[t] or b"" for t in ids]
    if b"".join(surfaces) != data:
        raise ValueError(f"the canonical tokens of {text!r} do not spell it under {lm.vocab.name}")
    owner = [0] * (len(data) + 1)
    for k, (a, b) in enumerate(spans):
        owner[a:b] = [k] * (b - a)
    sums, counts = [0.0] * len(spans), [0] * len(spans)
    (lps,) = lm.token_log_probs_after([lm.prefix_ids(context)], [ids])
    at = 0
    for lp, s in zip(lps, surfaces):
        k = owner[at]
        sums[k] += lp
        counts[k] += 1
        at += len(s)
    return sums, counts


def _hint(config: StringSearchConfig) -> str:
    more = f"raise beam (now {config.beam})"
    if math.isfinite(config.prune):
        more += f" or prune (now {config.prune:g} nats)"
    if config.budget is not None:
        more += f" or budget (now {config.budget})"
    if config.prune_against == "text":
        more += " or prune against the offset"
    if config.extend_threshold > 0:
        more += f" or lower extend_threshold (now {config.extend_threshold:g})"
    return more


def surprisals(lm: LanguageModel, text: str, *, units: str | Sequence[Any] = "word", context: str | Sequence[int] = "",
               config: StringSearchConfig | None = None, rules: WordRules | None = None,
               word_end: bool | None = None, wide: float = 3.0) -> list[UnitSurprisal]:
    """The surprisal in bits of each unit of ``text`` over strings, beside its canonical-token surprisal.

    See the module docstring for the definition: ``s(u_k) = -log2 P(E_k | E_{k-1})`` with the
    word-end correction at cuts where the text goes on with a boundary character; the last unit
    is followed by the end of the string, so the units' surprisals sum to ``-log2 P(text, end)``.

    :param units: ``"word"`` (:func:`word_spans` under ``rules``), ``"char"`` (UTF-8 characters),
        ``"byte"``, or regions: ``(start, end)`` character spans or cut offsets that tile the text.
    :param context: a string (canonically tokenized) or token ids after BOS that the text continues.
    :param config: the beam (default :class:`StringSearchConfig`: beam 8, prune 12 nats).
    :param rules: the word rules and the boundary set ``B`` (:class:`WordRules`).
    :param word_end: whether to apply the word-end correction (default: yes for words and regions,
        no for characters and bytes).
    :param wide: a bracket wider than this many bits is flagged uninformative.
    :raises ValueError: empty text, regions that do not tile it; :class:`DeadEndError` (a
        ``ValueError``) when no token covers a byte, naming the unit.
    """
    if not isinstance(text, str) or not text:
        raise ValueError("the text is empty: there are no units to score")
    if not wide > 0:
        raise ValueError(f"wide must be a positive number of bits, got {wide!r}")
    rules = rules or WordRules()
    config = config or StringSearchConfig()
    data = text.encode("utf-8")
    spans, chars = unit_byte_spans(text, units, rules)
    if word_end is None:
        word_end = not (isinstance(units, str) and units in ("char", "byte"))
    boundary = set(rules.boundary_chars)
    corrected = [word_end and b < len(data) and _char_at(data, b) in boundary for _, b in spans]
    texts = [data[a:b].decode("utf-8", errors="backslashreplace") for a, b in spans]
    events = _events(StringState(lm, context, config), data, spans, corrected, rules.boundary_chars, texts)
    canon, counts = _canonical(lm, text, data, context, spans)
    rows = []
    for k, ((a, b), (ca, cb)) in enumerate(zip(spans, chars)):
        (lo0, up0), (lo1, up1) = events[k], events[k + 1]
        if lo0 == -math.inf:
            raise DeadEndError(f"unit {k} ({texts[k]!r}): the beam found no mass for the text before it")
        lower = max(0.0, -min(0.0, up1 - lo0) / LN2)
        upper = math.inf if lo1 == -math.inf else -(lo1 - up0) / LN2
        informative = upper - lower <= wide
        rows.append(UnitSurprisal(
            unit=k, text=texts[k], start=ca, end=cb, byte_start=a, byte_end=b,
            surprisal=-(lo1 - lo0) / LN2, canonical=0.0 - canon[k] / LN2, lower=lower, upper=upper,
            informative=informative, followed_by="end" if k == len(spans) - 1 else
            ("boundary" if corrected[k] else "any"), tokens=counts[k],
            hint=None if informative else f"bracket {upper - lower:.1f} bits wide: {_hint(config)}"))
    return rows


def _char_at(data: bytes, at: int) -> str:
    """The character whose UTF-8 starts at byte ``at`` (``""`` if none starts there)."""
    for n in (1, 2, 3, 4):
        try:
            return data[at: at + n].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""
