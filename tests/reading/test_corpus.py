"""Alignment of a corpus's regions to its stimuli: Provo aligns completely (its corrections listed, the same four
drifts the paper's code patches by hand), and a shifted region, a missing text id, a region absent from its
stimulus each give one line naming the row."""

from pathlib import Path

import pandas as pd
import pytest

from ppl_tok.datasets import DATA_ROOT
from ppl_tok.reading.corpus import GENERIC, align, corrections_frame, read_measurements, read_stimuli

PROVO = Path(DATA_ROOT) / "reading" / "provo"


def paper_index(sid: int, idx: int, region: str) -> int:
    """The region index after the four hand patches of psycho-toke's psyling/predictors.py (for Provo)."""
    if (sid == 3 and idx >= 45) or (sid == 13 and idx >= 19):
        return idx - 1
    if sid == 18 and idx == 2 and region == "evolution":
        return 50
    return idx + 1 if sid == 36 and idx >= 24 else idx


@pytest.mark.skipif(not (PROVO / "measurements.csv").exists(), reason="the Provo data is not in this checkout")
def test_provo_aligns_completely_with_its_corrections_listed():
    stimuli = read_stimuli(PROVO / "stimuli.txt")
    table, columns = read_measurements(PROVO / "measurements.csv")
    out, corrections = align(stimuli, table, columns)
    assert len(stimuli) == 55 and len(out) == 2659
    assert not out.duplicated(["text_id", "word_index"]).any()
    expected = [paper_index(s, i, r) for s, i, r in zip(table.StimulusID, table.ContextLength, table.Region)]
    assert out.word_index.tolist() == expected
    shifted = {(c.line, c.stated, c.aligned) for c in corrections if c.kind == "index"}
    assert shifted == {(pos + 2, i, j) for pos, (i, j) in enumerate(zip(table.ContextLength, expected)) if i != j}
    assert len(shifted) == 64
    for c in corrections:
        word = stimuli[c.text_id - 1].split(" ")[c.aligned]
        assert c.word == word and (c.region == word or c.region + "." == word)
    assert len(corrections_frame(corrections)) == len(corrections)


def write(tmp_path, rows, stimuli=("The cat sat.", "A dog ran home.")):
    (tmp_path / "stimuli.txt").write_text("\n".join(stimuli) + "\n")
    pd.DataFrame(rows, columns=[*GENERIC, "rt"]).to_csv(tmp_path / "m.csv", index=False)
    table, columns = read_measurements(tmp_path / "m.csv")
    return read_stimuli(tmp_path / "stimuli.txt"), table, columns


def test_a_generic_csv_aligns_and_corrects_a_drift(tmp_path):
    stimuli, table, columns = write(tmp_path, [(1, 0, "The", 1), (1, 2, "cat", 2), (2, 3, "home", 3)])
    assert columns == GENERIC
    out, corrections = align(stimuli, table, columns, where="m.csv")
    assert out.word_index.tolist() == [0, 1, 3]
    assert [str(c) for c in corrections] == [
        "line 3: text 1: region 'cat' stated at index 2, aligned to index 1 ('cat')",
        "line 4: text 2 word 3: region 'home' read as 'home.' (a final period apart)"]


@pytest.mark.parametrize("rows, message", [
    ([(1, 0, "The", 1), (3, 0, "A", 2)], r"^m.csv:3: text id 3 is not in the stimuli \(ids 1..2\)$"),
    ([(1, 1, "cow", 1)], r"^m.csv:2: region 'cow' \(text 1, index 1\) is not in its stimulus"),
    # a shifted region whose word is taken by the row that is right there, and nothing else nearby
    ([(2, 1, "dog", 1), (2, 0, "dog", 2)], r"^m.csv:3: region 'dog' \(text 2\) is not at its index 0 .*taken: 1 "
                                           r"\(line 2\); fix the row's index$"),
])
def test_each_bad_row_is_one_line_naming_it(tmp_path, rows, message):
    stimuli, table, columns = write(tmp_path, rows)
    with pytest.raises(ValueError, match=message) as err:
        align(stimuli, table, columns, where="m.csv")
    assert "\n" not in str(err.value)


def test_bad_files(tmp_path):
    (tmp_path / "s.txt").write_text("a b\n\nc\n")
    with pytest.raises(ValueError, match=r"s.txt:2: a blank line"):
        read_stimuli(tmp_path / "s.txt")
    (tmp_path / "m.csv").write_text("id,x\n1,2\n")
    with pytest.raises(ValueError, match="the header names neither StimulusID,ContextLength,Region"):
        read_measurements(tmp_path / "m.csv")
    (tmp_path / "m.csv").write_text("text_id,region,text\n1,x,a\n")
    with pytest.raises(ValueError, match=r"m.csv:2: column region is 'x', not an integer"):
        read_measurements(tmp_path / "m.csv")
