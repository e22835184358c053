"""Surprisal shaped for reading studies: spill-over, word length, per-item totals, one pandas table.

A reading-time regression predicts a word's reading time from its own surprisal, the
surprisal of the words before it (*spill-over*: the reader is still processing them), its
length and its position; items are compared through their totals. :func:`reading_columns`
adds these to one item's rows of :func:`~ppl_tok.strings.surprisal.surprisals` (as dicts), and
:func:`surprisals_frame` scores many items and returns the table as a pandas ``DataFrame``
(pandas comes with the ``lm-eval`` extra; it is imported only here, on call).

Columns added, for unit ``k`` of an item with units ``0 .. n-1`` and ``K`` spill-over steps:

* ``length``: the unit's characters, its leading and trailing whitespace left out (a word's
  leading space belongs to it under the word rules, not to its length);
* ``surprisal_prev{j}`` and ``canonical_prev{j}``, ``j = 1 .. K``: the ``surprisal`` and
  ``canonical`` of unit ``k - j`` of the same item (missing for ``k < j``: ``None`` in the rows,
  ``NaN`` in the frame, pandas' missing value; never carried across items);
* ``item_surprisal`` and ``item_canonical``: the item's sums, the same on each of its rows
  (under ``final="end"`` ``item_surprisal`` is ``-log2 P(item, end)``, the chain rule);
* with entropies given: ``next_token_entropy``, the entropy in bits of the LM's next token after the
  unit's canonical tokens, the approximation of the next unit's entropy that
  :mod:`ppl_tok.strings.entropy` defines (not an entropy over strings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ppl_tok.lm.base import LanguageModel


def spillover_names(spillover: int) -> list[str]:
    """The spill-over columns of ``spillover`` steps, in order."""
    return [f"{c}_prev{j}" for j in range(1, spillover + 1) for c in ("surprisal", "canonical")]


#: the columns :func:`reading_columns` adds besides the spill-over ones
READING_COLUMNS = ("length", "item_surprisal", "item_canonical")


def reading_columns(rows: Sequence[dict[str, Any]], spillover: int = 0,
                    entropies: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """One item's rows (in unit order, each with ``text``, ``surprisal`` and ``canonical``) with the columns of
    the module docstring added (new dicts; the rows given are left as they are); ``entropies``: one
    ``next_token_entropy`` per row (:func:`~ppl_tok.strings.entropy.next_token_entropies`)."""
    if isinstance(spillover, bool) or not isinstance(spillover, int) or spillover < 0:
        raise ValueError(f"spillover must be a whole number of units >= 0, got {spillover!r}")
    if entropies is not None and len(entropies) != len(rows):
        raise ValueError(f"{len(entropies)} entropies for {len(rows)} rows")
    total = sum(float(r["surprisal"]) for r in rows)
    canonical = sum(float(r["canonical"]) for r in rows)
    out = []
    for k, r in enumerate(rows):
        row = {**r, "length": len(str(r["text"]).strip())}
        for j in range(1, spillover + 1):
            before = rows[k - j] if k >= j else None
            row[f"surprisal_prev{j}"] = None if before is None else before["surprisal"]
            row[f"canonical_prev{j}"] = None if before is None else before["canonical"]
        row["item_surprisal"], row["item_canonical"] = total, canonical
        if entropies is not None:
            row["next_token_entropy"] = float(entropies[k])
        out.append(row)
    return out


def surprisals_frame(lm: LanguageModel, texts: Sequence[str] | str, *, spillover: int = 0, entropy: bool = False,
                     **options: Any) -> Any:
    """The surprisal table of ``texts`` as a pandas ``DataFrame``: one row per unit, regression-ready.

    Columns: ``item`` (the text's index), the fields of
    :class:`~ppl_tok.strings.surprisal.UnitSurprisal` (``surprisal``, ``canonical``, the certified
    ``lower``/``upper``, ``informative``, ``followed_by``, ...) and :func:`reading_columns`'
    (``length``, ``K`` spill-over steps, the item totals).

    :param texts: the items (one string: one item).
    :param spillover: ``K``, the previous units' surprisals as columns (0: none).
    :param entropy: add ``next_token_entropy`` (:mod:`ppl_tok.strings.entropy`: the canonical next-token
        entropy after each unit; at most one batched prefill of the items' canonical tokens more).
    :param options: :func:`~ppl_tok.strings.surprisal.surprisals_many`'s (``units``, ``contexts``,
        ``config``, ``rules``, ``final`` (default ``"boundary"`` for words: a sentence is followed by
        more text), ``wide``).
    """
    import pandas as pd

    from ppl_tok.strings.surprisal import surprisals_many

    texts = [texts] if isinstance(texts, str) else list(texts)
    reading_columns([], spillover)  # a bad spillover before any LM call
    table = []
    found = surprisals_many(lm, texts, **options)
    entropies: list[Any] = [None] * len(texts)
    if entropy:
        from ppl_tok.strings.entropy import next_token_entropies

        entropies = next_token_entropies(lm, texts, units=options.get("units", "word"),
                                         contexts=options.get("contexts"), rules=options.get("rules"))
    for item, rows in enumerate(found):
        table += reading_columns([{"item": item, **r.to_dict()} for r in rows], spillover, entropies[item])
    if not table:
        from ppl_tok.strings.surprisal import UnitSurprisal

        return pd.DataFrame(columns=["item", *UnitSurprisal.__dataclass_fields__, "length",
                                     *spillover_names(spillover), "item_surprisal", "item_canonical",
                                     *(["next_token_entropy"] if entropy else [])])
    frame = pd.DataFrame(table)
    for name in spillover_names(spillover):
        frame[name] = frame[name].astype(float)  # None -> NaN: pandas' missing value in a float column
    return frame


__all__ = ["READING_COLUMNS", "reading_columns", "spillover_names", "surprisals_frame"]
