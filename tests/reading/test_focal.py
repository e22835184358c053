"""Focal areas: the paper's definitions on a hand-worked text, and bad input."""

import pytest

from ppl_tok.reading.focal import AREAS, CONVENTIONS, focal_areas, normalise, predictor, regions

TEXT = "The cat sat"  # spaces at 3 and 7


def test_regions_under_each_whitespace_convention():
    assert regions(TEXT, "Leading") == [(0, 3), (3, 7), (7, 11)]
    assert regions(TEXT, "Trailing") == [(0, 4), (4, 8), (8, 11)]
    assert regions(TEXT, "LeadingAndTrailing") == [(0, 4), (3, 8), (7, 11)]
    assert regions(TEXT, "NoWhitespace") == [(0, 3), (4, 7), (8, 11)]


def test_focal_areas_by_hand():
    lead = regions(TEXT, "Leading")
    assert focal_areas(lead, "Whole", 11) == lead
    assert focal_areas(lead, "Fixed", 11) == [(0, 3), (3, 6), (7, 10)]
    # region 0: view = 0 + ceil(3/2) - 1 = 1, end = 1 + 7 + 1 - 0 = 9, clamped to region 1's [3, 7]; region 1:
    # view = 3 + 2 - 1 = 4, end = 4 + 8 = 12, clamped to [7, 11]
    assert focal_areas(lead, "Dynamic7", 11) == [(0, 3), (3, 7), (7, 11)]
    assert focal_areas(lead, "Spanning3", 11) == [(0, 6), (3, 10), (7, 11)]
    assert focal_areas(lead, "SpanningWhole", 11) == [(0, 7), (3, 11), (7, 11)]
    no_ws = regions("Extraordinarily a b", "NoWhitespace")  # [(0, 15), (16, 17), (18, 19)]
    # view = 0 + 8 - 1 = 7, end = 7 + 7 + 1 - (15 - 16) = 16: the next region starts at 16, an empty area
    assert focal_areas(no_ws, "Dynamic7", 19)[1] == (16, 16)
    lt = regions(TEXT, "LeadingAndTrailing")
    # view = 0 + 2 - 1 = 1, end = 1 + 8 + 1 - (4 - 3) = 9 > 8: clamped to region 1's end
    assert focal_areas(lt, "Dynamic8", 11)[1] == (3, 8)
    # a Fixed area may run past its region (the paper's definition), never past the text
    assert focal_areas(regions("a b", "Trailing"), "Fixed", 3) == [(0, 3), (2, 3)]


def test_names_and_bad_input():
    assert len(CONVENTIONS) * len(AREAS) == 40
    assert predictor("Leading", "Dynamic7") == "SurprisalLeadingDynamic7"
    assert normalise("  a \n b  ") == "a b"
    with pytest.raises(ValueError, match="not normalised"):
        regions("a  b", "Leading")
    with pytest.raises(ValueError, match="unknown whitespace convention 'Left'"):
        regions(TEXT, "Left")
    with pytest.raises(ValueError, match="unknown focal area"):
        focal_areas([(0, 1)], "Spanning9", 1)
