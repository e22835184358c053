"""Every context and answer in ../shared/data: its canonical tokenization is a path of its MDD."""

import pytest

from conftest import SHARED
from ppl_tok import compile_mdd
from ppl_tok.datasets import find_data_files, load_questions, texts_of


def all_texts() -> list[str]:
    return [t for f in find_data_files(SHARED / "data") for t in texts_of(load_questions(f))]


@pytest.mark.slow
@pytest.mark.parametrize("vocab_fixture", ["smollm2_vocab", "gemma_vocab"])
def test_canonical_is_a_path_for_every_text(request, vocab_fixture):
    vocab = request.getfixturevalue(vocab_fixture)
    texts = all_texts()
    assert len(texts) > 60_000
    failures = []
    for text in texts:
        canon = vocab.encode(text)
        if not compile_mdd(text, vocab).accepts(canon):
            failures.append(text)
    assert failures == []
