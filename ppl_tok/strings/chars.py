"""Next-character distributions: the LM over strings read in UTF-8 characters instead of bytes.

A character ``c`` with UTF-8 bytes ``c_1 .. c_n`` (``n <= 4``) follows ``x`` with

    p(c | x) = P(x c) / P(x) = prod_j p(c_j | x c_1 .. c_{j-1}),

the chain rule over next-byte distributions (:class:`~ppl_tok.strings.state.StringState`).
:func:`next_char_log_probs` walks that tree from ``x``: an ASCII byte is a character
at once; a lead byte of a longer character is extended on a copy of the state
(:meth:`StringState.copy`, one batched forward where prefixes end) until the
character is complete. Each factor's certified interval multiplies into the
character's (the product of lower bounds is a lower bound on the product, and the
same for upper bounds).

A state that ends inside a character (``x`` = ``"caf\\xc3"``, the first byte of
``"é"``) continues that character: its completions are named by the whole
character (``"é"``, with ``p("\\xa9" | x)``), and :attr:`NextChars.partial` holds the
bytes of it already read. Every interval is the product of the factors' certified
intervals, each widened by its rounding tolerance (:mod:`ppl_tok.strings.certified`),
so the tolerances add along a character.

What is not a character goes to ``other``: byte sequences that are not UTF-8 (an LM
can write them, e.g. through byte-fallback tokens) and branches whose probability
fell below ``min_log_prob`` before the character was complete (not explored, so
not named). With the beam's estimates, the characters, the end of the string and
``other`` sum to one exactly (every next-byte distribution on the way sums to one).
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, field

from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings.state import END_OF_STRING, NextBytes, StringState

#: a character's log-probability and its certified interval
Entry = tuple[float, float, float]

#: :func:`next_char_log_probs`' default ``min_log_prob`` (nats)
DEFAULT_MIN_LOG_PROB = -12.0

#: how :func:`visible` shows the characters that print as nothing or move the cursor
ESCAPES = {" ": "\u2420", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def visible(char: str) -> str:
    """A character as a table shows it: space ``␠``, newline ``\\n``, tab ``\\t``, return ``\\r``;
    every other control, format, separator, private-use or unassigned character ``U+XXXX``; the rest itself."""
    if char in ESCAPES:
        return ESCAPES[char]
    if len(char) == 1 and unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"):
        return f"U+{ord(char):04X}"
    return char


def visible_byte(byte: int) -> str:
    """A next byte as a table shows it: an ASCII byte as :func:`visible` shows its character, any other ``\\xNN``."""
    return visible(chr(byte)) if byte < 0x80 else f"\\x{byte:02X}"


def utf8_length(lead: int) -> int:
    """The byte length of the UTF-8 character a byte starts (0: the byte cannot start one)."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


@dataclass
class NextChars:
    """``p(c | x)`` for the characters explored, with certified intervals.

    :param chars: ``{character: (log_prob, lower, upper)}``, most probable first.
    :param end: ``(log_prob, lower, upper)`` of the end of the string (``None``: the LM cannot end one).
    :param other: the log of the estimated mass not named: non-UTF-8 byte sequences and
        branches below ``min_log_prob`` (``-inf``: none).
    :param forwards: token positions the exploration ran (its copies' forwards).
    :param unexplored: the partial characters (their bytes) left below ``min_log_prob``.
    :param partial: the bytes of a character the state ended inside (``b""``: none); the
        characters are then its completions.
    :param tolerance: the widest rounding tolerance (nats) included in an interval.
    """

    chars: dict[str, Entry]
    end: Entry | None
    other: float
    forwards: int = 0
    unexplored: list[bytes] = field(default_factory=list)
    partial: bytes = b""
    tolerance: float = 0.0

    def top(self, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` most probable characters and their log-probs."""
        return [(c, e[0]) for c, e in list(self.chars.items())[:k]]

    def to_dict(self) -> dict:
        """The numbers, JSON-ready apart from infinities (:func:`ppl_tok.common.jsonout.to_json` writes
        ``-inf`` as ``"-Infinity"``, the convention of every command); each entry ``[log_prob, lower, upper]``."""
        return {"chars": {c: list(e) for c, e in self.chars.items()}, "end": None if self.end is None else list(self.end),
                "other": self.other, "forwards": self.forwards, "partial": self.partial.hex(),
                "tolerance_nats": self.tolerance}


def trailing_partial(data: bytes) -> tuple[bytes, int]:
    """The bytes of an incomplete UTF-8 character at the end of ``data`` and its full length (``(b"", 0)``: none)."""
    for k in range(1, min(3, len(data)) + 1):
        b = data[-k]
        if 0x80 <= b <= 0xBF:  # a continuation byte: look further back for its lead
            continue
        n = utf8_length(b)
        return (bytes(data[-k:]), n) if n > k else (b"", 0)
    return b"", 0


def next_char_log_probs(state: StringState, min_log_prob: float = DEFAULT_MIN_LOG_PROB) -> NextChars:
    """The next-character distribution after the bytes ``state`` has read (``state`` itself is not changed).

    :param min_log_prob: a partly read character whose probability so far is below this
        (nats) is not explored further; its mass goes to ``other``. ``-math.inf``
        explores every character the beam gives mass to.
    """
    if not (min_log_prob == -math.inf or math.isfinite(min_log_prob)):
        raise ValueError(f"min_log_prob must be a number of nats or -inf, got {min_log_prob!r}")
    chars: dict[str, Entry] = {}
    other: list[float] = []
    unexplored: list[bytes] = []
    forwards = [0]
    widest = [0.0]

    def walk(st: StringState, head: bytes, acc: Entry, need: int, nb: NextBytes | None = None,
             tol: float = 0.0, top: bool = False) -> None:
        nb = st.next_byte_log_probs() if nb is None else nb
        est, lo, hi = nb.log_probs.tolist(), nb.lower.tolist(), nb.upper.tolist()
        tol += nb.tolerance
        for b in range(256):
            if est[b] == -math.inf:
                continue
            entry = (acc[0] + est[b], acc[1] + lo[b], acc[2] + hi[b])
            seq = head + bytes([b])
            if not head:  # a lead byte
                n = utf8_length(b)
            else:
                n = need if 0x80 <= b <= 0xBF else 0
            if n == 0:
                other.append(entry[0])
            elif len(seq) == n:
                try:
                    chars[seq.decode("utf-8")] = entry
                    widest[0] = max(widest[0], tol)
                except UnicodeDecodeError:  # an overlong or surrogate form
                    other.append(entry[0])
            elif entry[0] < min_log_prob:
                other.append(entry[0])
                unexplored.append(seq)
            else:
                child = st.copy()
                before = child.forwards
                child.extend(b)
                forwards[0] += child.forwards - before
                walk(child, seq, entry, n, tol=tol)
        if head and not top:  # the end of the string inside a character: not a character
            other.append(acc[0] + est[END_OF_STRING])

    nb0 = state.next_byte_log_probs()
    partial, need = trailing_partial(bytes(state.data[-3:]))
    shared = state._shared
    try:
        walk(state, partial, (0.0, 0.0, 0.0), need, nb0, top=True)
    finally:
        state._shared = shared  # the copies die here: the state may release its LM states again
    end = None
    if nb0.has_end:
        end = (float(nb0.log_probs[END_OF_STRING]), float(nb0.lower[END_OF_STRING]),
               float(nb0.upper[END_OF_STRING]))
        widest[0] = max(widest[0], nb0.tolerance)
    ranked = dict(sorted(chars.items(), key=lambda kv: -kv[1][0]))
    return NextChars(ranked, end, logsumexp(other), forwards[0], unexplored, partial, widest[0])
