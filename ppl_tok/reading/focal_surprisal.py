"""Focal-area surprisal over strings in one call: every whitespace convention and focal area from one walk per text.

One byte-synchronous walk (:class:`~ppl_tok.strings.state.StringState`, texts walked together by
:func:`~ppl_tok.strings.state.extend_many`) records, at every character offset ``o`` of the text ``x``:

* the prefix event ``log P(x_{<o})`` (the output starts with the first ``o`` characters; summed over every token
  sequence), as a bracket ``[L_o, U_o]`` and the mass found;
* where ``o > 0`` and the text goes on with a boundary character (``x_o`` in ``B``,
  :class:`~ppl_tok.strings.units.WordRules`) or ends: the word-end event of :mod:`ppl_tok.strings.surprisal`,
  ``log (sum over c in B of P(x_{<o} c) + P(x_{<o}, end))``.

Every focal area ``F = [s, e)`` (:mod:`ppl_tok.reading.focal`) then has, without another LM call,

    S(F) = -log2 P(E_e) / P(E_s),

with ``E_o`` the prefix event (the paper's character surprisal summed over ``F``: Giulianelli et al. 2024 score
``-log2 P(x_{<e}) / P(x_{<s})``), or, **with the word-end correction** (``...Corrected`` columns; Pimentel & Meister
2024, Oh & Schuler 2024), the word-end event at each end of ``F`` where the text goes on with a character of ``B``
(the events nest: ``E_e`` implies ``E_s``, so ``S(F) >= 0``). Adjacent areas ``[s, t), [t, e)`` sum to ``S([s, e))``
exactly (the ratio telescopes), and the areas of a convention that tile the text sum to ``-log2 P(x)``.

The bracket is the one of :mod:`ppl_tok.strings.surprisal`:
``-log2 min(1, U_e / L_s) <= S(F) <= -log2 (L_e / U_s)``. The canonical figure beside each (``Canonical...``):
the canonical tokens ``v*`` of ``x`` (what minicons scores) are assigned to the character their first byte is in,
and ``F``'s canonical surprisal is ``-log2`` of the product of ``p(v*_j | v*_{<j})`` over the tokens that start in
``F`` (under ``Leading`` and ``Whole``, a leading-space tokenizer's word surprisal, the minicons way).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ppl_tok.common.records import decode_logs, encode_logs
from ppl_tok.lm.base import LanguageModel
from ppl_tok.reading.focal import AREAS, CONVENTIONS, focal_areas, normalise, predictor, regions
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.state import StringState, extend_many
from ppl_tok.strings.surprisal import _boundary_event, canonical_surprisals_many  # the word-end event, one place
from ppl_tok.strings.units import WordRules

LN2 = math.log(2.0)


@dataclass
class TextEvents:
    """What one walk of a text records (log-probabilities in nats).

    :param text: the text (normalised).
    :param lower: ``L_o`` on ``log P(x_{<o})``, ``o = 0..n`` (character offsets); ``found`` the mass found,
        ``upper`` ``U_o``.
    :param word_end: ``{o: (L, found, U)}``, the word-end event at each offset ``o > 0`` where ``x_o`` is in ``B``
        or ``o = n`` (``E_0`` is the empty prefix, probability 1, as in :mod:`ppl_tok.strings.surprisal`).
    :param canonical: per character, the log-probability (nats) of the canonical tokens that start in it.
    """

    text: str
    lower: list[float]
    found: list[float]
    upper: list[float]
    word_end: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    canonical: list[float] = field(default_factory=list)

    def event(self, o: int, corrected: bool) -> tuple[float, float, float]:
        """``(L, found, U)`` of ``E_o``: the word-end event where ``corrected`` and recorded, else the prefix."""
        if corrected and o in self.word_end:
            return self.word_end[o]
        return self.lower[o], self.found[o], self.upper[o]

    def surprisal(self, s: int, e: int, corrected: bool = False) -> tuple[float, float, float]:
        """``(estimate, lower, upper)`` in bits of the focal area ``[s, e)`` (module docstring)."""
        if e <= s:
            return 0.0, 0.0, 0.0
        lo0, f0, up0 = self.event(s, corrected)
        lo1, f1, up1 = self.event(e, corrected)
        lower = max(0.0, -min(0.0, up1 - lo0) / LN2)
        upper = math.inf if lo1 == -math.inf else -(lo1 - up0) / LN2
        return -(f1 - f0) / LN2, lower, upper

    def canonical_surprisal(self, s: int, e: int) -> float:
        """Bits: the canonical tokens that start in ``[s, e)``."""
        return -sum(self.canonical[s:e]) / LN2

    def to_record(self) -> dict[str, Any]:
        """A JSON-able record (``-inf`` as ``"-Infinity"``)."""
        return {"text": self.text, "lower": encode_logs(self.lower), "found": encode_logs(self.found),
                "upper": encode_logs(self.upper), "canonical": encode_logs(self.canonical),
                "word_end": [[o, *encode_logs(v)] for o, v in sorted(self.word_end.items())]}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TextEvents:
        """Inverse of :meth:`to_record`."""
        ends = {int(row[0]): tuple(decode_logs(row[1:])) for row in record["word_end"]}
        return cls(record["text"], decode_logs(record["lower"]), decode_logs(record["found"]),
                   decode_logs(record["upper"]), ends, decode_logs(record["canonical"]))  # type: ignore[arg-type]


def walk_events(lm: LanguageModel, texts: Sequence[str], *, config: StringSearchConfig | None = None,
                rules: WordRules | None = None) -> list[TextEvents | Exception]:
    """One walk per text (texts walked together, sharing LM calls) recording every event a focal area needs.

    Each text is scored right after BOS. A text the walk cannot finish (a byte no kept token covers) is its
    error in the list; the others are kept.
    """
    config = config or StringSearchConfig()
    rules = rules or WordRules()
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t:
            raise ValueError(f"text {i} is empty: there are no regions to score")
    boundary = rules.boundary_chars
    ascii_bytes = sorted({ord(c) for c in boundary if ord(c) < 128})
    wide_chars = [c for c in boundary if ord(c) >= 128]
    ids = []
    for i, t in enumerate(texts):
        try:
            ids.append(lm.canonical(t))
        except ValueError as err:
            raise ValueError(f"text {i} ({t[:30]!r}): {err}") from None
    held = 4 * len(lm.vocab) * sum(len(v) for v in ids)
    with lm.row_budget(lm.config.row_bytes + held):
        # the canonical column first: its forward leaves the canonical prefixes' rows in the cache for the walk
        canon = canonical_surprisals_many(lm, texts, units="char", rules=rules)
        lm.states([lm.prefix_ids("")])
        states = [StringState(lm, "", config, keep=v) for v in ids]
        datas = [t.encode("utf-8") for t in texts]
        out = [TextEvents(t, [0.0], [0.0], [0.0], canonical=[-b * LN2 for b in c]) for t, c in zip(texts, canon)]
        chars = [[k for k, ch in enumerate(t) for _ in ch.encode("utf-8")] for t in texts]  # byte -> character

        def record(k: int, j: int) -> None:
            data, ev = datas[k], out[k]
            if j + 1 < len(data) and data[j + 1] & 0xC0 == 0x80:
                return  # inside a character
            o = chars[k][j] + 1
            p = states[k].prefix_log_prob()
            ev.lower.append(p.lower)
            ev.found.append(p.found)
            ev.upper.append(p.upper)
            if o == len(ev.text) or ev.text[o] in boundary:
                ev.word_end[o] = _boundary_event(states[k], ascii_bytes, wide_chars)

        failed: dict[int, Exception] = {}
        extend_many(states, datas, after=record, failed=failed)
    return [type(failed[k])(f"text {k} ({texts[k][:30]!r}...): {failed[k]}") if k in failed else ev
            for k, ev in enumerate(out)]


def focal_table(events: Sequence[TextEvents], text_ids: Sequence[Any] | None = None,
                conventions: Sequence[str] = CONVENTIONS, areas: Sequence[str] = AREAS) -> pd.DataFrame:
    """One row per (text, region index), one column per predictor.

    Columns: ``text_id``, ``region`` (the word's index, 0-based), ``word``; then per convention ``C`` and area
    ``A``: ``Surprisal{C}{A}`` (over strings), ``Surprisal{C}{A}Corrected`` (with the word-end correction),
    ``Surprisal{C}{A}Lower``/``Upper`` (the bracket of the first) and ``Canonical{C}{A}`` (the canonical tokens);
    and ``start_{C}``/``end_{C}``, the region's characters.
    """
    text_ids = list(range(1, len(events) + 1)) if text_ids is None else list(text_ids)
    rows: list[dict[str, Any]] = []
    for tid, ev in zip(text_ids, events):
        words = ev.text.split(" ")
        table = [{"text_id": tid, "region": k, "word": w} for k, w in enumerate(words)]
        n = len(ev.text)
        for conv in conventions:
            spans = regions(ev.text, conv)
            for k, (a, b) in enumerate(spans):
                table[k][f"start_{conv}"], table[k][f"end_{conv}"] = a, b
            for area in areas:
                name = predictor(conv, area)
                for k, (s, e) in enumerate(focal_areas(spans, area, n)):
                    est, lo, up = ev.surprisal(s, e)
                    table[k][name], table[k][f"{name}Lower"], table[k][f"{name}Upper"] = est, lo, up
                    table[k][f"{name}Corrected"] = ev.surprisal(s, e, corrected=True)[0]
                    table[k][name.replace("Surprisal", "Canonical", 1)] = ev.canonical_surprisal(s, e)
        rows += table
    return pd.DataFrame(rows)


def focal_surprisals(lm: LanguageModel, texts: Sequence[str], *, text_ids: Sequence[Any] | None = None,
                     config: StringSearchConfig | None = None, rules: WordRules | None = None,
                     conventions: Sequence[str] = CONVENTIONS, areas: Sequence[str] = AREAS) -> pd.DataFrame:
    """Every focal-area predictor of every region of ``texts`` (each normalised,
    :func:`~ppl_tok.reading.focal.normalise`) in one call: one walk per text, then :func:`focal_table`.

    :raises ValueError: a text the walk cannot finish, named by its index.
    """
    texts = [normalise(t) for t in texts]
    events = walk_events(lm, texts, config=config, rules=rules)
    for ev in events:
        if isinstance(ev, Exception):
            raise ev
    return focal_table(events, text_ids, conventions, areas)  # type: ignore[arg-type]
