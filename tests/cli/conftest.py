"""Fixtures of the command-line tests: no model loaded at all, or the session's SmolLM2."""

import pytest

import ppl_tok.cli.common


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a model is loaded: argument errors must come first."""
    def refuse(*a, **k):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", refuse)
    monkeypatch.setattr(ppl_tok.cli.common, "load_vocabulary", refuse)


@pytest.fixture
def loaded(monkeypatch, smollm2, smollm2_vocab):
    """The CLI on the session's SmolLM2 (no reload per call)."""
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: smollm2)
    monkeypatch.setattr(ppl_tok.cli.common, "load_vocabulary", lambda *a, **k: smollm2_vocab)
    return smollm2
