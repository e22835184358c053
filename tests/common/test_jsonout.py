"""The one JSON writer (ppl_tok.common.jsonout): RFC 8259, non-finite numbers as strings, counts of any size."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from ppl_tok.common.jsonout import count_fields, to_json, unlimited_int_digits


def test_values_json_cannot_hold_are_written_as_it_can():
    out = to_json({1: (math.nan, -math.inf), "p": Path("a/b"), "t": torch.tensor([1.5, 2.0]), "ok": [True, None]})
    assert out == '{"1": ["NaN", "-Infinity"], "p": "a/b", "t": [1.5, 2.0], "ok": [true, null]}'
    assert to_json("é") == '"é"'  # UTF-8, not \\u escapes
    with pytest.raises(TypeError, match="cannot write object as JSON"):
        to_json({"x": object()})


def test_counts_are_exact_decimal_strings_beside_their_log10():
    assert count_fields(1000) == {"count": "1000", "log10_count": 3.0}
    assert count_fields(0, "model_count") == {"model_count": "0", "log10_model_count": -math.inf}
    big = 7 ** 6000  # more than 4300 digits: str() refuses it outside unlimited_int_digits (main wraps every command)
    with unlimited_int_digits():
        fields = count_fields(big)
    assert len(fields["count"]) == 5071 and fields["log10_count"] == pytest.approx(6000 * math.log10(7))
    assert json.loads(to_json(fields))["count"] == fields["count"]


def test_unlimited_int_digits_restores_the_limit():
    before = sys.get_int_max_str_digits()
    with unlimited_int_digits():
        assert sys.get_int_max_str_digits() == 0
    assert sys.get_int_max_str_digits() == before
