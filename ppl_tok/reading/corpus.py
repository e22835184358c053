"""A reading corpus: its stimuli, its measurements table, and the alignment of every row to a word of its stimulus.

**Stimuli**: a UTF-8 text file, one text per line; a text's id is its 1-based line number (Provo's
``StimulusID``), and each text is read normalised (:func:`~ppl_tok.reading.focal.normalise`), so its words
``w_0 .. w_{m-1}`` are its whitespace-separated runs. **Measurements**: a CSV with one row per region: the text's id,
the region's index (the word's 0-based position in the text) and the region's text, under Provo's names
(``StimulusID``, ``ContextLength``, ``Region``: :data:`PROVO`) or the generic ``text_id``, ``region``, ``text``
(:data:`GENERIC`); every other column (the measures, length, frequency) is kept.

**Alignment** (:func:`align`): a row matches word ``j`` if its text equals ``w_j`` or does after dropping one final
period on either side (Provo writes ``possible`` for ``possible.`` at a text's end: a ``"text"`` correction). First
every row that matches the word at its stated index takes it; then each other row takes, nearest first, an unclaimed
matching word within ``max_shift`` words of its index, or else the one word of its text anywhere in the stimulus if
there is exactly one and it is unclaimed (an ``"index"`` correction either way: Provo's indices drift by one in three
stimuli and point at another sentence once; the paper's code patched these four by hand). Every correction is
listed; a row that matches nothing, or only ambiguously, and a text id not in the stimuli, are errors naming the
file and line and what was expected. Nothing is shifted silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ppl_tok.common.lines import split_lines
from ppl_tok.reading.focal import normalise

#: Provo's column names (text id, region index, region text)
PROVO = ("StimulusID", "ContextLength", "Region")
#: the generic CSV's column names
GENERIC = ("text_id", "region", "text")
#: how far (in words) a row's text is looked for around its stated index
MAX_SHIFT = 3


@dataclass(frozen=True)
class Correction:
    """One change the alignment made: the row (file line), its text, what it stated and what it was aligned to."""

    line: int
    text_id: int
    region: str
    stated: int
    aligned: int
    word: str
    kind: str  # "index" (another word than the stated one) or "text" (the same word, a final period apart)

    def __str__(self) -> str:
        if self.kind == "text":
            return (f"line {self.line}: text {self.text_id} word {self.aligned}: region {self.region!r} read as "
                    f"{self.word!r} (a final period apart)")
        return (f"line {self.line}: text {self.text_id}: region {self.region!r} stated at index {self.stated}, "
                f"aligned to index {self.aligned} ({self.word!r})")


def read_stimuli(path: str | Path) -> list[str]:
    """The texts of a stimuli file, normalised; text ``i`` (1-based) is line ``i``. A blank line is an error."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the stimuli ({err})") from None
    lines = split_lines(raw)
    if lines and lines[-1] == "":
        lines = lines[:-1]
    texts = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise ValueError(f"{path}:{n}: a blank line (text {n} would be empty): one text per line, none blank")
        texts.append(normalise(line))
    if not texts:
        raise ValueError(f"{path}: no texts (one text per line)")
    return texts


def read_measurements(path: str | Path) -> tuple[pd.DataFrame, tuple[str, str, str]]:
    """The measurements table and its (id, index, text) columns (:data:`PROVO` or :data:`GENERIC`, by the header)."""
    path = Path(path)
    try:
        table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise ValueError(f"{path}: cannot read the measurements ({err})") from None
    for columns in (PROVO, GENERIC):
        if all(c in table.columns for c in columns):
            break
    else:
        raise ValueError(f"{path}: the header names neither {','.join(PROVO)} (Provo) nor {','.join(GENERIC)} "
                         f"(generic); it has {','.join(map(str, table.columns[:8]))}")
    for c in columns[:2]:
        bad = table.index[pd.to_numeric(table[c], errors="coerce").isna()
                          | (pd.to_numeric(table[c], errors="coerce") % 1 != 0)]
        if len(bad):
            raise ValueError(f"{path}:{bad[0] + 2}: column {c} is {table[c][bad[0]]!r}, not an integer")
        table[c] = table[c].astype(int)
    blank = table.index[table[columns[2]].isna()]
    if len(blank):
        raise ValueError(f"{path}:{blank[0] + 2}: the region's text ({columns[2]}) is empty")
    table[columns[2]] = table[columns[2]].astype(str)
    return table, columns


def _key(word: str) -> str:
    return word[:-1] if word.endswith(".") and len(word) > 1 else word


def align(stimuli: list[str], table: pd.DataFrame, columns: tuple[str, str, str] = PROVO, *,
          max_shift: int = MAX_SHIFT, where: str = "measurements") -> tuple[pd.DataFrame, list[Correction]]:
    """Align every row of ``table`` to a word of its stimulus (module docstring).

    :returns: the table with ``text_id`` and ``word_index`` (the aligned word, 0-based) added, and the corrections.
    :raises ValueError: a text id not in the stimuli, a region absent from its stimulus, a shifted region that no
        rule places (ambiguous, or its word taken by another row), naming ``where:line``.
    """
    id_col, index_col, text_col = columns
    words = [t.split(" ") for t in stimuli]
    keys = [[_key(w) for w in ws] for ws in words]
    aligned: dict[int, int] = {}
    claimed: dict[tuple[int, int], int] = {}
    for pos, (tid, idx) in enumerate(zip(table[id_col], table[index_col])):
        if not 1 <= tid <= len(stimuli):
            raise ValueError(f"{where}:{pos + 2}: text id {tid} is not in the stimuli (ids 1..{len(stimuli)})")
    rows = list(zip(range(len(table)), table[id_col], table[index_col], table[text_col]))
    pending = []
    for pos, tid, idx, text in rows:  # pass 1: rows at their stated index
        ks = keys[tid - 1]
        if 0 <= idx < len(ks) and ks[idx] == _key(text) and (tid, idx) not in claimed:
            aligned[pos], claimed[(tid, idx)] = idx, pos
        else:
            pending.append((pos, tid, idx, text))
    corrections: list[Correction] = []
    for pos, tid, idx, text in pending:  # pass 2: the others, near their index or unique in the text
        ks, k = keys[tid - 1], _key(text)
        hits = [j for j, w in enumerate(ks) if w == k]
        line = pos + 2
        if not hits:
            raise ValueError(f"{where}:{line}: region {text!r} (text {tid}, index {idx}) is not in its stimulus "
                             f"(text {tid}: {stimuli[tid - 1][:50]!r}...)")
        near = sorted((j for j in hits if abs(j - idx) <= max_shift and (tid, j) not in claimed),
                      key=lambda j: (abs(j - idx), j))
        free = [j for j in hits if (tid, j) not in claimed]
        if near:
            j = near[0]
        elif len(hits) == 1 and free:
            j = hits[0]
        else:
            there = words[tid - 1][idx] if 0 <= idx < len(ks) else "past the text's end"
            taken = [f"{j} (line {claimed[(tid, j)] + 2})" for j in hits if (tid, j) in claimed]
            raise ValueError(f"{where}:{line}: region {text!r} (text {tid}) is not at its index {idx} (the word "
                             f"there is {there!r}) and cannot be placed: {text!r} is at indices "
                             f"{', '.join(map(str, hits))}" + (f"; taken: {', '.join(taken)}" if taken else "")
                             + f"; fix the row's index")
        aligned[pos], claimed[(tid, j)] = j, pos
        corrections.append(Correction(line, tid, text, idx, j, words[tid - 1][j], "index"))
    for pos, tid, idx, text in rows:
        j = aligned[pos]
        if words[tid - 1][j] != text:
            corrections.append(Correction(pos + 2, tid, text, idx, j, words[tid - 1][j], "text"))
    out = table.copy()
    out["text_id"] = table[id_col].to_numpy()
    out["word_index"] = [aligned[pos] for pos in range(len(table))]
    corrections.sort(key=lambda c: c.line)
    return out, corrections


def corrections_frame(corrections: list[Correction]) -> pd.DataFrame:
    """The corrections as a table (one row each), for the run's output."""
    cols: list[Any] = ["line", "text_id", "region", "stated", "aligned", "word", "kind"]
    return pd.DataFrame([{c: getattr(x, c) for c in cols} for x in corrections], columns=cols)
