"""The canonical LM's document-level scorings (``canonical-local``, ``canonical-global``) on a toy BPE and LM."""

from __future__ import annotations

import math

import pytest

from ppl_tok.infer.canonical_lm import canonical_lm_scores
from ppl_tok.perplexity import ScoringConfig, corpus_from_texts, score_documents
from ppl_tok.scorings import DOCUMENT, PAIR, names
from tests.canonical_toys import bpe_vocab, toy_lm

TEXTS = ["abab", "bba", "aab"]


def test_both_are_in_the_table_at_both_levels():
    for level in (DOCUMENT, PAIR):
        assert {"canonical-local", "canonical-global"} <= set(names(level))


def test_local_documents_equal_the_pair_function_and_never_fall_below_canonical():
    lm = toy_lm(bpe_vocab())
    docs = corpus_from_texts(TEXTS).documents
    local = score_documents(lm, docs, ScoringConfig(scoring="canonical-local"))
    canon = score_documents(lm, docs, ScoringConfig(scoring="canonical"))
    direct = canonical_lm_scores(lm, [""] * len(TEXTS), TEXTS, mode="local")
    for s, c, d in zip(local, canon, direct):
        assert s.log_likelihood == pytest.approx(d.estimate, abs=1e-9)
        assert s.canonical == pytest.approx(c.log_likelihood, abs=1e-9)
        assert s.log_likelihood >= c.log_likelihood - 1e-12


def test_global_documents_are_finite_and_seeded():
    lm = toy_lm(bpe_vocab())
    docs = corpus_from_texts(TEXTS).documents
    config = ScoringConfig(scoring="canonical-global", num_samples=32, seed=4)
    first = [s.log_likelihood for s in score_documents(lm, docs, config)]
    again = [s.log_likelihood for s in score_documents(lm, docs, config)]
    assert all(math.isfinite(x) and x <= 0 for x in first)
    assert first == again
    assert config.settings()["num_samples"] == 32
