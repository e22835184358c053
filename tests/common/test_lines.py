"""The one line reader (``ppl_tok/common/lines.py``): ``\\n`` separates, ``\\r\\n`` is ``\\n``, nothing else splits."""

import pytest

from ppl_tok.common.lines import split_lines


@pytest.mark.parametrize("text, lines", [
    ("", []),
    ("a", ["a"]),
    ("a\n", ["a"]),
    ("a\n\nb", ["a", "", "b"]),
    ("a\r\nb\r\n", ["a", "b"]),
    ("a\r\n\r\nb", ["a", "", "b"]),
    ("a\rb\x0cc\x1cd\x85e\u2028f\u2029g\x0bh\n", ["a\rb\x0cc\x1cd\x85e\u2028f\u2029g\x0bh"]),
    ("a\r", ["a\r"]),
    ("\n", [""]),
])
def test_only_newline_separates_and_crlf_is_newline(text, lines):
    assert split_lines(text) == lines


def test_a_line_number_is_the_editors():
    text = "x\r\ny\u2028z\n\nw"
    assert [n for n, line in enumerate(split_lines(text), 1) if line == "w"] == [4]
    assert len(split_lines(text)) == text.count("\n") + 1


def test_bytes_are_refused():
    with pytest.raises(TypeError, match="takes a str"):
        split_lines(b"a\nb")
