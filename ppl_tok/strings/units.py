"""The units a text is scored in: words (by documented, configurable rules), characters, bytes, or regions.

Every kind tiles the text: units are non-empty runs, in order, with no gap and no overlap
(:func:`unit_byte_spans` gives their byte and character spans). :class:`WordRules` also
holds the boundary set ``B`` of the word-end correction (:mod:`ppl_tok.strings.surprisal`).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: ASCII punctuation that splits words; the apostrophe and the hyphen stay inside a word ("don't", "man-eating")
PUNCTUATION = "".join(c for c in string.punctuation if c not in "'-")

#: the unit kinds :func:`~ppl_tok.strings.surprisal.surprisals` splits the text into itself
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


def char_at(data: bytes, at: int) -> str:
    """The character whose UTF-8 starts at byte ``at`` (``""`` if none starts there)."""
    for n in (1, 2, 3, 4):
        try:
            return data[at: at + n].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


__all__ = ["PUNCTUATION", "UNIT_KINDS", "WordRules", "char_at", "region_spans", "unit_byte_spans", "word_spans"]
