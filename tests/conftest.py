"""Shared fixtures. ``../shared`` (beside the project root) holds the real data."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
LLAMA2 = SHARED / "tokenizers" / "llama2" / "tokenizer.model"


@pytest.fixture(scope="session")
def llama2_vocab():
    from ppl_tok import Vocabulary

    return Vocabulary.from_sentencepiece(LLAMA2)


@pytest.fixture(scope="session")
def smollm2_vocab():
    from ppl_tok import load_vocabulary

    return load_vocabulary("smollm2-135m")


@pytest.fixture(scope="session")
def gemma_vocab():
    from ppl_tok import load_vocabulary

    return load_vocabulary("gemma3-270m")


@pytest.fixture(scope="session")
def smollm2():
    from ppl_tok import load_lm

    return load_lm("smollm2-135m")
