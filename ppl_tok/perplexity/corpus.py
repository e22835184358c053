"""A corpus to score: documents read from a text file, standard input, or JSON Lines.

* **Text** (the default): the whole input is one document (``split="none"``),
  or one document per line (``"lines"``: the line without its newline), or per
  paragraph (``"paragraphs"``: runs of lines separated by blank lines, inner
  newlines kept).
* **JSON Lines** (``field=NAME``): one JSON object per line, the document is the
  string ``object[NAME]``; blank lines are skipped.

A document is taken literally (no stripping): its bytes are what is scored. Lines
are those of :func:`ppl_tok.common.lines.split_lines`: ``\n`` separates, ``\r\n`` is
read as ``\n``, no other character ends a line (``split="none"`` keeps the bytes as they are).
Every problem is a :class:`CorpusError` naming the file and line and the fix:
a file that is not UTF-8 or holds NUL bytes (a binary file), a line that is
not JSON or not an object, a missing or non-string field, an empty document,
bytes no token of the vocabulary covers (:func:`check_coverage`); in JSON Lines, a
string escape that is not text (a lone surrogate such as ``"\\ud800"``, or ``"\\u0000"``,
a NUL). Nothing is skipped silently.

Sizes are checked as the input is read, against :mod:`ppl_tok.limits`: the whole
input against ``corpus_bytes`` (a file's size before it is read; standard input
is read no further than the limit), each document against ``text_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ppl_tok.common.lines import split_lines

STDIN = "-"
SPLITS = ("none", "lines", "paragraphs")


class CorpusError(ValueError):
    """A corpus that cannot be scored as given."""


@dataclass(frozen=True)
class Document:
    """One document: its text and where it came from (``source:line``, the first line it spans)."""

    index: int
    text: str
    source: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def n_bytes(self) -> int:
        return len(self.text.encode("utf-8"))


@dataclass(frozen=True)
class Corpus:
    """The documents of one input and the SHA-256 of its bytes (recorded by the store)."""

    source: str
    documents: tuple[Document, ...]
    sha256: str

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def n_bytes(self) -> int:
        return sum(d.n_bytes for d in self.documents)


def _read_bytes(path: str) -> tuple[bytes, str]:
    """The input's bytes, read no further than the ``corpus_bytes`` limit (a :class:`~ppl_tok.limits.LimitError`)."""
    from ppl_tok.limits import limits

    most = limits().corpus_bytes
    if path == STDIN:
        data = sys.stdin.buffer.read(most + 1)
        limits().check("corpus_bytes", len(data), "standard input's length in bytes (at least)")
        return data, "<stdin>"
    try:
        size = Path(path).stat().st_size
        limits().check("corpus_bytes", size, f"{path}'s length in bytes")
        with open(path, "rb") as f:
            data = f.read(most + 1)
    except OSError as err:
        raise CorpusError(f"cannot read {path}: {err.strerror or err}") from err
    limits().check("corpus_bytes", len(data), f"{path}'s length in bytes (at least)")
    return data, path


def check_sizes(documents: Sequence[Document]) -> None:
    """Each document within the ``text_bytes`` limit (a :class:`~ppl_tok.limits.LimitError` naming it)."""
    from ppl_tok.limits import limits

    lim = limits()
    for doc in documents:
        lim.check("text_bytes", doc.n_bytes, f"{doc.where}: document {doc.index}'s length in bytes")


def _decode(data: bytes, source: str) -> str:
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise CorpusError(f"{source}:{line}: a NUL byte at offset {nul}: this looks like a binary file, "
                          "not text; give a UTF-8 text or JSON Lines file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise CorpusError(f"{source}:{line}: not UTF-8 text ({err.reason} at byte offset {err.start}); "
                          "re-encode the file as UTF-8") from None


def _text_documents(text: str, source: str, split: str) -> list[Document]:
    if split == "none":
        if not text:
            raise CorpusError(f"{source}:1: the document is empty (an empty file)")
        return [Document(0, text, source, 1)]
    lines = split_lines(text)
    docs: list[Document] = []
    if split == "lines":
        for n, line in enumerate(lines, 1):
            if not line:
                raise CorpusError(f"{source}:{n}: an empty document (an empty line); remove it, or use "
                                  "--split paragraphs to separate documents by blank lines")
            docs.append(Document(len(docs), line, source, n))
    else:
        start, block = 0, []
        for n, line in enumerate(lines + [""], 1):
            if line.strip():
                if not block:
                    start = n
                block.append(line)
            elif block:
                docs.append(Document(len(docs), "\n".join(block), source, start))
                block = []
    if not docs:
        raise CorpusError(f"{source}: no documents (the input is empty or holds only blank lines)")
    return docs


def check_text(value: str, where: str, field: str) -> None:
    """A JSON string that is text: no NUL (an escaped ``\\u0000``) and no lone surrogate (``\\ud800``)."""
    nul = value.find("\0")
    if nul >= 0:
        raise CorpusError(f"{where}: field {field!r} holds a NUL character (an escaped \\u0000) at character {nul}: "
                          "not text; remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise CorpusError(f"{where}: field {field!r} holds a lone surrogate {value[err.start]!r} at character "
                          f"{err.start} (an escape such as \\ud800 without its pair): not text; fix the escape") \
            from None


def _jsonl_documents(text: str, source: str, field: str) -> list[Document]:
    docs: list[Document] = []
    for n, line in enumerate(split_lines(text), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise CorpusError(f"{source}:{n}: not valid JSON ({err.msg} at column {err.colno}); each line must "
                              f"be one JSON object (or drop --field to read plain text)") from None
        if not isinstance(row, dict):
            raise CorpusError(f"{source}:{n}: expected a JSON object with the field {field!r}, "
                              f"got {type(row).__name__}")
        if field not in row:
            have = ", ".join(map(repr, list(row)[:8])) or "none"
            raise CorpusError(f"{source}:{n}: missing field {field!r} (fields: {have}); choose it with --field")
        value = row[field]
        if not isinstance(value, str):
            raise CorpusError(f"{source}:{n}: field {field!r} should be a string, got {type(value).__name__}")
        if not value:
            raise CorpusError(f"{source}:{n}: field {field!r} is empty: an empty document has no "
                              "perplexity; remove the line")
        check_text(value, f"{source}:{n}", field)
        docs.append(Document(len(docs), value, source, n))
    if not docs:
        raise CorpusError(f"{source}: no documents (the input is empty or holds only blank lines)")
    return docs


def read_corpus(path: str | Path, *, field: str | None = None, split: str = "none") -> Corpus:
    """The documents of ``path`` (``"-"``: standard input): JSON Lines with ``field``, else text by ``split``."""
    if split not in SPLITS:
        raise CorpusError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if field is not None and split != "none":
        raise CorpusError("--split applies to text input; JSON Lines has one document per line")
    text, source, sha256 = read_source(path)
    docs = _text_documents(text, source, split) if field is None else _jsonl_documents(text, source, field)
    check_sizes(docs)
    return Corpus(source, tuple(docs), sha256)


def read_source(path: str | Path) -> tuple[str, str, str]:
    """``(text, source, sha256)`` of a UTF-8 input file (``"-"``: standard input), within the ``corpus_bytes``
    limit; a NUL byte or bytes that are not UTF-8 are a :class:`CorpusError` naming the file and line."""
    data, source = _read_bytes(str(path))
    return _decode(data, source), source, hashlib.sha256(data).hexdigest()


def corpus_from_texts(texts: Sequence[str], source: str = "<texts>") -> Corpus:
    """A corpus of the given strings (Python callers); empty strings are errors, and so is one string (a ``str`` is
    a sequence of characters, not of documents: pass ``[text]``)."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"texts must be a sequence of documents, got the {type(texts).__name__} {texts[:40]!r}: "
                        "pass [text] for one document")
    docs = []
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t:
            raise CorpusError(f"{source}:{i + 1}: document {i} is {'empty' if t == '' else repr(type(t).__name__)}: "
                              "every document must be a non-empty string")
        docs.append(Document(i, t, source, i + 1))
    check_sizes(docs)
    digest = hashlib.sha256(json.dumps(list(texts)).encode()).hexdigest()
    return Corpus(source, tuple(docs), digest)


def _stuck_at(data: bytes, trie) -> int | None:
    """The first byte offset no tokenization gets past (``None`` if the whole of ``data`` has one)."""
    reach = bytearray(len(data) + 1)
    reach[0] = 1
    furthest = 0
    for i in range(len(data)):
        if not reach[i]:
            if i > furthest:
                return furthest
            continue
        for end, _ in trie.matches(data, i):
            reach[end] = 1
            furthest = max(furthest, end)
    return None if reach[len(data)] else furthest


def check_coverage(corpus: Corpus, vocab) -> None:
    """Every document has a tokenization under ``vocab`` (else a :class:`CorpusError` naming the byte)."""
    for doc in corpus.documents:
        try:
            vocab.encode(doc.text)
        except ValueError as err:
            data = doc.text.encode("utf-8")
            at = _stuck_at(data, vocab.trie(True))
            if at is not None:
                line = doc.line + data.count(b"\n", 0, at)
                raise CorpusError(f"{doc.source}:{line}: no token of {vocab.name} covers the byte "
                                  f"{data[at]:#04x} (document {doc.index}, byte offset {at}); this model cannot "
                                  "score the text: remove the character or use another model") from None
            raise CorpusError(f"{doc.where}: document {doc.index} has no canonical tokenization ({err})") from None
