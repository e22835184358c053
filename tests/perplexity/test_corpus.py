"""Corpora from Python (``ppl_tok/perplexity/corpus.py``): one string is not three documents."""

import pytest

from ppl_tok.perplexity.corpus import CorpusError, corpus_from_texts


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
