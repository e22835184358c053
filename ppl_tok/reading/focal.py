"""Focal areas: which characters of a text a reading-time predictor scores, per region.

The definitions are those of Giulianelli, Malagutti, Gastaldi, DuSell, Vieira & Cotterell (EMNLP 2024, "On the
Proper Treatment of Tokenization in Psycholinguistics", section 4), as their public code (rycolab/psycho-toke,
``psyling/stimuli.py``) states them; restated here, none of its code copied. A text is first normalised
(:func:`normalise`: leading and trailing whitespace dropped, every run of whitespace one space), so the regions are
its whitespace-separated words ``w_0 .. w_{m-1}``; let ``i_0 < .. < i_{m-2}`` be the offsets of the spaces.

**Whitespace conventions** (the region ``R_k = [a_k, b_k)`` of word ``k``, character offsets):

* ``Leading``: the space before a word is the word's: ``R_k = [i_{k-1}, i_k)`` (``a_0 = 0``, ``b_{m-1} = n``);
* ``Trailing``: the space after a word is the word's: ``R_k = [i_{k-1} + 1, i_k + 1)``;
* ``LeadingAndTrailing``: both spaces: ``R_k = [i_{k-1}, i_k + 1)`` (neighbours overlap on their space);
* ``NoWhitespace``: neither: ``R_k = [i_{k-1} + 1, i_k)``.

**Focal areas** of region ``k`` (``F_k``, clipped to the text ``[0, n)``):

* ``Whole``: ``F_k = R_k``;
* ``Fixed``: the first 3 characters, ``F_k = [a_k, a_k + 3)``;
* ``DynamicK`` (K = 7, 8: the word identification span): the reader fixates the previous region at its viewing
  location ``v = a_{k-1} + ceil((b_{k-1} - a_{k-1}) / 2) - 1`` and identifies K characters to its right:
  ``F_k = [a_k, e)`` with ``e = v + K + 1 - (b_{k-1} - a_k)`` clamped to ``[a_k, b_k]`` (so ``F_k`` may be empty);
  ``F_0 = R_0``;
* ``SpanningK`` (K = 3..7): the region and the first K characters of the next one, ``F_k = [a_k, a_{k+1} + K)``;
  ``SpanningWhole``: the region and all of the next, ``F_k = [a_k, b_{k+1})``; the last region's is ``R_{m-1}``.

A focal area's surprisal is ``-log2 P(x_{<e}) / P(x_{<s})`` for ``F = [s, e)`` (:mod:`ppl_tok.reading.focal_surprisal`).
"""

from __future__ import annotations

import math

#: the whitespace conventions, in the paper's names
CONVENTIONS = ("Leading", "Trailing", "LeadingAndTrailing", "NoWhitespace")
#: the focal-area kinds, in the paper's names (the predictor ``Surprisal{convention}{area}``)
AREAS = ("Whole", "Fixed", "Dynamic7", "Dynamic8", "Spanning3", "Spanning4", "Spanning5", "Spanning6", "Spanning7",
         "SpanningWhole")
#: the length of a ``Fixed`` focal area
FIXED = 3


def normalise(text: str) -> str:
    """The text as the study reads it: stripped, every run of whitespace one space."""
    return " ".join(text.split())


def regions(text: str, convention: str) -> list[tuple[int, int]]:
    """The region ``[a_k, b_k)`` of each word of ``text`` (normalised) under a whitespace convention."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown whitespace convention {convention!r}: one of {', '.join(CONVENTIONS)}")
    if text != normalise(text):
        raise ValueError(f"the text is not normalised (one space between words, none at the ends): {text[:40]!r}")
    if not text:
        return []
    spaces = [i for i, c in enumerate(text) if c == " "]
    lead = convention in ("Leading", "LeadingAndTrailing")
    trail = convention in ("Trailing", "LeadingAndTrailing")
    starts = [0] + [i if lead else i + 1 for i in spaces]
    ends = [i + 1 if trail else i for i in spaces] + [len(text)]
    return list(zip(starts, ends))


def focal_areas(spans: list[tuple[int, int]], area: str, n: int) -> list[tuple[int, int]]:
    """The focal area ``F_k`` of each region (module docstring), clipped to ``[0, n)``."""
    if area not in AREAS:
        raise ValueError(f"unknown focal area {area!r}: one of {', '.join(AREAS)}")
    if not spans:
        return []
    if area == "Whole":
        out = list(spans)
    elif area == "Fixed":
        out = [(a, a + FIXED) for a, _ in spans]
    elif area.startswith("Dynamic"):
        k = int(area.removeprefix("Dynamic"))
        out = [spans[0]]
        for (a0, b0), (a, b) in zip(spans, spans[1:]):
            view = a0 + math.ceil((b0 - a0) / 2) - 1
            out.append((a, min(b, max(a, view + k + 1 - (b0 - a)))))
    else:
        size = area.removeprefix("Spanning")
        out = [(a, b1 if size == "Whole" else a1 + int(size)) for (a, _), (a1, b1) in zip(spans, spans[1:])]
        out.append(spans[-1])
    return [(min(a, n), min(b, n)) for a, b in out]


def predictor(convention: str, area: str) -> str:
    """The paper's name of a focal-area predictor: ``Surprisal{convention}{area}``."""
    return f"Surprisal{convention}{area}"
