"""The one line reader of every text input: ``\\n`` ends a line, ``\\r\\n`` is read as ``\\n``, nothing else does.

Python's ``str.splitlines`` also ends a line at ``\\r``, form feed, ``\\x1c``-``\\x1e``, U+0085, U+2028 and
U+2029, so a sentence holding one became two items (renumbering every later one) and a JSON line with a raw
U+2028 inside a string was cut in two. Every input of ppl-tok that is read line by line (a corpus split into
lines or paragraphs, JSON Lines, the items of ``surprisal`` and the batch commands, data files, stored rows)
goes through :func:`split_lines`:

* the separator is ``\\n`` alone, as in JSON Lines and POSIX text files;
* ``\\r\\n`` (a file written on Windows) is read as ``\\n``: the ``\\r`` is not part of the line;
* a lone ``\\r``, form feed, U+0085, U+2028, U+2029 are characters of the line, kept as they are;
* a final ``\\n`` ends the last line (no empty line after it).

Line ``n`` (1-based) of the result is line ``n`` of the file, so errors name ``file:n`` as an editor does.
"""

from __future__ import annotations


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` (module docstring): split at ``\\n`` only, each ``\\r\\n`` read as ``\\n``.

    ``split_lines("a\\r\\nb\\u2028c\\n") == ["a", "b\\u2028c"]``; ``split_lines("") == []``.
    """
    if not isinstance(text, str):
        raise TypeError(f"split_lines takes a str, got {type(text).__name__}")
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line (or an empty text)
    return lines
