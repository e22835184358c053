"""Timing helpers of the benchmarks (ppl_tok.bench.timing) on a tiny GPT-2 on the CPU."""

import time

import pytest

from ppl_tok import Vocabulary
from ppl_tok.bench.timing import device_case, raw_decode_rate, timed, uncached
from ppl_tok.lm.hf import HFLanguageModel
from tests.lm.test_hf_architectures import tiny

VOCAB = Vocabulary.from_tokens([None, "a", "b", "c", "ab", "bc", "ca", "abc", "bca", "cab", "aa", "bb", "cc",
                                "d", "e", "f"])  # 16 ids: the tiny models' vocabulary size


@pytest.fixture(scope="module")
def lm():
    return HFLanguageModel(tiny("gpt2", "cpu"), None, 0, vocab=VOCAB, name="gpt2")


def test_timed_returns_the_result_and_the_seconds():
    out, seconds = timed("cpu", lambda x, y=0: (time.sleep(0.05), x + y)[1], 2, y=3)
    assert out == 5 and 0.05 <= seconds < 1.0


def test_device_case_and_the_raw_baseline(lm):
    assert device_case(lm) == {"device": "cpu", "dtype": "float32"}
    assert raw_decode_rate(lm, batch=2, past=3, steps=2) > 0


def test_uncached_gives_the_cached_numbers(lm):
    naive = uncached(lm)
    assert naive.name == "gpt2-uncached" and naive.config.cache_bytes == 0 and not naive.pooled
    texts, contexts = [(1, 4, 2), (13,)], [(0,), (0, 3)]
    want = lm.log_probs_many(texts, contexts)
    assert all(w < 0 for w in want) and naive.log_probs_many(texts, contexts) == pytest.approx(want, abs=1e-5)
