"""torch's CPU threads (ppl_tok.lm.threads): one default for the command line, lm-eval and the Python API."""

import pytest

from ppl_tok.lm import threads as T


def test_the_default_is_given_then_the_environment_then_one(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert T.cpu_threads() == T.DEFAULT_THREADS == 1 and T.cpu_threads(3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert T.cpu_threads() == 2 and T.cpu_threads(1) == 1
    for bad in ("0", "x", ""):
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        assert T.cpu_threads() == 1
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            T.cpu_threads(bad)


def test_the_command_line_lm_eval_and_load_lm_set_the_same_default(monkeypatch):
    import argparse

    import torch

    from ppl_tok.cli.common import set_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    monkeypatch.setattr(T, "_CHOSEN", [])
    try:
        assert set_threads(argparse.Namespace(threads=None)) == 1 == torch.get_num_threads()
        monkeypatch.setattr(T, "_CHOSEN", [])
        torch.set_num_threads(2)
        assert T.default_cpu_threads() == 1 == torch.get_num_threads()  # what load_lm and lm-eval's model call
        T.set_cpu_threads(2)
        assert T.default_cpu_threads() == 2 == torch.get_num_threads()  # a choice made before is kept
        pytest.importorskip("lm_eval")
        from ppl_tok.integrations.lm_eval import PPLTokLM
        from qa_toy import toy_lm

        monkeypatch.setattr(T, "_CHOSEN", [])
        assert PPLTokLM(lm=toy_lm()).threads == 1 == torch.get_num_threads()
        assert PPLTokLM(lm=toy_lm(), threads=2).threads == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
