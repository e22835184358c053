"""Corpora (``ppl_tok/perplexity/corpus.py``): text, JSON Lines and standard input; bad corpora named by file and
line; Python callers' documents (one string is not three documents)."""

import json

import pytest

from ppl_tok.perplexity import (
    CorpusError,
    check_coverage,
    corpus_from_texts,
    read_corpus,
)
from qa_toy import toy_lm


def test_a_string_is_refused_not_split_into_characters():
    """Issue 37: corpus_from_texts("abc") made three one-character documents."""
    with pytest.raises(TypeError, match=r"sequence of documents, got the str 'abc': pass \[text\]"):
        corpus_from_texts("abc")
    corpus = corpus_from_texts(["abc"])
    assert [d.text for d in corpus.documents] == ["abc"]


def test_empty_and_non_string_documents_name_their_index():
    with pytest.raises(CorpusError, match="document 1 is empty"):
        corpus_from_texts(["a", ""])
    with pytest.raises(CorpusError, match="document 0 is 'int'"):
        corpus_from_texts([3])


def test_text_jsonl_and_stdin_inputs(tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("first line\nsecond\n\nthird para\nstill\n")
    assert [d.text for d in read_corpus(text).documents] == ["first line\nsecond\n\nthird para\nstill\n"]
    lines = read_corpus(text, split="paragraphs").documents
    assert [(d.text, d.line) for d in lines] == [("first line\nsecond", 1), ("third para\nstill", 4)]
    rows = tmp_path / "c.jsonl"
    rows.write_text(json.dumps({"text": "a b"}) + "\n\n" + json.dumps({"text": "c", "x": 1}) + "\n")
    docs = read_corpus(rows, field="text").documents
    assert [(d.text, d.where) for d in docs] == [("a b", f"{rows}:1"), ("c", f"{rows}:3")]


@pytest.mark.parametrize("content, field, split, message", [
    (b'{"text": "a"}\nnot json\n', "text", "none", r"c:2: not valid JSON"),
    (b'{"text": "a"}\n{"body": "b"}\n', "text", "none", r"c:2: missing field 'text' \(fields: 'body'\)"),
    (b'{"text": "a"}\n{"text": ""}\n', "text", "none", r"c:2: field 'text' is empty"),
    (b'{"text": 3}\n', "text", "none", r"c:1: field 'text' should be a string"),
    (b'[1, 2]\n', "text", "none", r"c:1: expected a JSON object"),
    (b"ab\n\ncd\n", None, "lines", r"c:2: an empty document"),
    (b"", None, "none", r"c:1: the document is empty"),
    (b"text\nmore\x00\x01\x02", None, "none", r"c:2: a NUL byte at offset 9: this looks like a binary file"),
    (b"ok\n\xff\xfe bad", None, "none", r"c:2: not UTF-8 text"),
])
def test_bad_corpora_are_errors_naming_file_and_line(tmp_path, content, field, split, message):
    path = tmp_path / "c"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        read_corpus(path, field=field, split=split)


def test_bytes_no_token_covers_name_the_line_and_byte(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("ab cd\nef z gh\n")
    with pytest.raises(CorpusError, match=r"c.txt:1: no token of .* covers the byte 0x0a \(document 0, byte offset 5\)"):
        check_coverage(read_corpus(path), toy_lm().vocab)  # the toy vocabulary has no newline
    with pytest.raises(CorpusError, match=r"c.txt:2: no token of .* covers the byte 0x7a \(document 1, byte offset 3\)"):
        check_coverage(read_corpus(path, split="lines"), toy_lm().vocab)
