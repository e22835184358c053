"""Every context and answer in ../shared/data: its canonical tokenization is a path of its MDD.

The full check (slow) compiles all 63,026 texts per vocabulary; the fast one every 200th text of each data set,
so that ``make test-fast`` still meets every data set under both vocabularies."""

import pytest

from conftest import SHARED
from ppl_tok import compile_mdd
from ppl_tok.datasets import find_data_files, load_questions, texts_of


def all_texts() -> list[str]:
    return [t for f in find_data_files(SHARED / "data") for t in texts_of(load_questions(f))]


def non_paths(texts: list[str], vocab) -> list[str]:
    """The texts whose canonical tokenization is not a path of their MDD."""
    return [text for text in texts if not compile_mdd(text, vocab).accepts(vocab.encode(text))]


@pytest.mark.parametrize("vocab_fixture", ["smollm2_vocab", "gemma_vocab"])
def test_canonical_is_a_path_for_a_sample_of_each_data_set(request, vocab_fixture):
    vocab = request.getfixturevalue(vocab_fixture)
    files = find_data_files(SHARED / "data")
    samples = [list(texts_of(load_questions(f)))[::200] for f in files]
    assert len(files) >= 4 and all(samples)
    assert non_paths([t for s in samples for t in s], vocab) == []


@pytest.mark.slow
@pytest.mark.parametrize("vocab_fixture", ["smollm2_vocab", "gemma_vocab"])
def test_canonical_is_a_path_for_every_text(request, vocab_fixture):
    vocab = request.getfixturevalue(vocab_fixture)
    texts = all_texts()
    assert len(texts) > 60_000
    assert non_paths(texts, vocab) == []
