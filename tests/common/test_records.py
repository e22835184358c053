"""What a stored record holds (``ppl_tok/common/records.py``): each kind of number checked on read-back."""

import math

import pytest

from ppl_tok.common.records import FIELD_KINDS, StoreError, check_fields


@pytest.mark.parametrize("kind, good, bad", [
    ("count", [0, 7], [-1, 2.0, True, "3", None]),
    ("log", [0, -1.5, "-Infinity", None], [0.5, "x", "Infinity", False]),
    ("bound", [0.3, -2, "-Infinity", None], ["Infinity", "x", True]),
    ("bits", [0, 3.5, "Infinity", None], [-0.1, "-Infinity", "x"]),
    ("number", [0, -3.5, 2], ["1", None, False]),
])
def test_each_kind_takes_what_a_run_writes_and_nothing_else(kind, good, bad):
    assert all(FIELD_KINDS[kind](v) for v in good)
    assert not any(FIELD_KINDS[kind](v) for v in bad)


def test_non_finite_numbers_anywhere_are_damage_unless_allowed():
    record = {"a": {"b": [1.0, math.nan]}}
    with pytest.raises(StoreError, match=r"f:3: a number is nan .*; the line is damaged or edited"):
        check_fields(record, "f:3", {})
    assert check_fields(record, "f:3", {}, allow_nan=True) is record
    with pytest.raises(StoreError, match="field 'n' holds -2, not an integer >= 0"):
        check_fields({"n": -2}, "f:1", {"n": "count"})
