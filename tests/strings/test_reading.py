"""Reading-study columns and the pandas table: spill-over is the shifted surprisal column, totals, length."""

import math

import pytest

from ppl_tok.strings.reading import reading_columns, spillover_names, surprisals_frame
from ppl_tok.strings.surprisal import surprisals_many
from tests.strings.test_state import WIDE, history_lm
from tests.strings.test_surprisal import VOCAB

pd = pytest.importorskip("pandas", reason="surprisals_frame needs pandas (the lm-eval extra)")

ITEMS = ["ab ba.", "b ab a", "a"]


def test_frame_spillover_equals_the_shifted_column_within_each_item():
    lm = history_lm(3, VOCAB)
    frame = surprisals_frame(lm, ITEMS, spillover=2, config=WIDE)
    rows = surprisals_many(lm, ITEMS, config=WIDE)
    assert list(frame["surprisal"]) == pytest.approx([r.surprisal for rs in rows for r in rs], abs=1e-12)
    assert list(frame["item"]) == [i for i, rs in enumerate(rows) for _ in rs]
    assert set(spillover_names(2)) <= set(frame.columns)
    for j in (1, 2):
        shifted = frame.groupby("item")["surprisal"].shift(j)
        assert frame[f"surprisal_prev{j}"].isna().equals(shifted.isna())
        assert frame[f"surprisal_prev{j}"].dropna().tolist() == shifted.dropna().tolist()
        assert frame[f"canonical_prev{j}"].dropna().tolist() == frame.groupby("item")["canonical"].shift(j).dropna().tolist()
    totals = frame.groupby("item")["surprisal"].sum()
    assert frame["item_surprisal"].tolist() == pytest.approx([totals[i] for i in frame["item"]], abs=1e-12)
    assert frame["length"].tolist() == [2, 2, 1, 1, 2, 1, 1]
    assert (frame["followed_by"].groupby(frame["item"]).last() == "boundary").all()  # the default final


def test_reading_columns_refuse_a_bad_spillover_and_the_frame_of_nothing_has_its_columns():
    with pytest.raises(ValueError, match="spillover must be a whole number"):
        reading_columns([], -1)
    frame = surprisals_frame(history_lm(1, VOCAB), [], spillover=1)
    assert frame.empty and "surprisal_prev1" in frame.columns and "item_surprisal" in frame.columns
    one = reading_columns([{"text": " ab", "surprisal": 1.0, "canonical": 2.0}], 1)
    assert one == [{"text": " ab", "surprisal": 1.0, "canonical": 2.0, "length": 2, "surprisal_prev1": None,
                    "canonical_prev1": None, "item_surprisal": 1.0, "item_canonical": 2.0}]
    assert not math.isnan(one[0]["item_surprisal"])
