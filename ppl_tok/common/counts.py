"""What a text's figures are divided by: its UTF-8 bytes and lm-eval's count of its words."""

from __future__ import annotations

import re

_WHITESPACE = re.compile(r"\s+")


def count_words(text: str) -> int:
    """lm-eval's word count: ``len(re.split(r"\\s+", text))`` (the empty pieces before leading and after
    trailing whitespace included: ``" a b\\n"`` has 4)."""
    return len(_WHITESPACE.split(text))


def count_bytes(text: str) -> int:
    """The UTF-8 bytes of ``text``."""
    return len(text.encode("utf-8"))
