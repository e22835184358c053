"""The hostile suite of issue 56 (round four): backends, lm-eval generation, contexts, scorings, byte audit,
messages and ignored flags.

Each case ends as rounds two and three do (``test_hostile_strings``, ``test_hostile_round3``): refused in one
line naming the input (before the model loads where a loader counts its calls), or answered with a figure
checked against the same figure computed another way. The model cards' cases are ``test_hostile_cards``.
"""

from __future__ import annotations

import pytest

from ppl_tok.cli.main import main
from ppl_tok.lm import backends


def one_line(capsys, argv, needles):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, code, out[:300], err)
    assert out == "", out[:300]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# ------------------------------------------------------------ a misbehaving --backend module:function
LOADERS = ["returns_str", "returns_none", "raises", "no_config"]


@pytest.mark.parametrize("function", LOADERS)
def test_a_misbehaving_backend_is_one_line_naming_it_on_the_command_line(capsys, monkeypatch, function):
    """The audit: "internal error ... please report it" for a loader returning a str or None, raising, or
    taking no ``config``."""
    monkeypatch.setattr(backends, "_BACKENDS", dict(backends._BACKENDS))
    name = f"tests.lm.test_backends:{function}"
    one_line(capsys, ["score", "ab", "--model", "x", "--backend", name], [f"LM backend {name!r}"])


@pytest.mark.parametrize("function", LOADERS)
def test_a_misbehaving_backend_is_a_model_argument_error_in_lm_eval(monkeypatch, function):
    """The audit: lm-eval raised a raw ``AttributeError`` (``'str' object has no attribute 'spec'``)."""
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import ModelArgumentError, PPLTokLM

    monkeypatch.setattr(backends, "_BACKENDS", dict(backends._BACKENDS))
    name = f"tests.lm.test_backends:{function}"
    with pytest.raises(ModelArgumentError, match=f"model='x': LM backend {name!r}"):
        PPLTokLM(model="x", backend=name)
