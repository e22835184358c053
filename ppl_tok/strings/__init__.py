"""The LM over strings: probabilities summed over tokenizations, by a byte-synchronous beam.

See ``docs/strings.md``.

* :func:`string_marginal`: a certified bracket on ``log p(x | c)`` (the text exactly, no EOS);
  :func:`string_marginals` sweeps several strings in lockstep, one batched forward per step;
* :class:`StringState` / :func:`initial`: prefix probabilities ``P(x | c)`` and next-byte
  distributions, incrementally, a prompt walked exactly or after its canonical head
  (``StringSearchConfig.prefill``, :mod:`ppl_tok.strings.prefill`); :func:`initial_many`
  prefills many prompts' heads in one batched call;
* :func:`next_char_log_probs`: the same read in UTF-8 characters;
* :func:`string_conditional`: ``log p(y | x)`` for a prompt string ``x``, with a certified interval.
"""

from typing import TYPE_CHECKING

from ppl_tok.common.lazy import lazy_names

#: each public name -> its module, imported on first use (:mod:`ppl_tok.common.lazy`)
_LAZY: dict[str, str] = {
    "ByteBeam": "ppl_tok.strings.beam",
    "ContextLengthError": "ppl_tok.strings.beam",
    "StringSearchConfig": "ppl_tok.strings.beam",
    "NextChars": "ppl_tok.strings.chars",
    "next_char_log_probs": "ppl_tok.strings.chars",
    "StringConditional": "ppl_tok.strings.conditional",
    "string_conditional": "ppl_tok.strings.conditional",
    "StringMarginal": "ppl_tok.strings.marginal",
    "string_marginal": "ppl_tok.strings.marginal",
    "string_marginals": "ppl_tok.strings.marginal",
    "DeadEndError": "ppl_tok.strings.state",
    "EndUnavailableError": "ppl_tok.strings.state",
    "NextBytes": "ppl_tok.strings.state",
    "PrefixProbability": "ppl_tok.strings.state",
    "StringState": "ppl_tok.strings.state",
    "initial": "ppl_tok.strings.state",
    "initial_many": "ppl_tok.strings.state",
}

if TYPE_CHECKING:
    from ppl_tok.strings.beam import ByteBeam, ContextLengthError, StringSearchConfig
    from ppl_tok.strings.chars import NextChars, next_char_log_probs
    from ppl_tok.strings.conditional import StringConditional, string_conditional
    from ppl_tok.strings.marginal import StringMarginal, string_marginal, string_marginals
    from ppl_tok.strings.state import (DeadEndError, EndUnavailableError, NextBytes, PrefixProbability, StringState, initial,
                                       initial_many)

__all__ = ["ByteBeam", "ContextLengthError", "DeadEndError", "EndUnavailableError", "NextBytes", "NextChars", "PrefixProbability",
           "StringConditional", "StringMarginal", "StringSearchConfig", "StringState", "initial", "initial_many",
           "next_char_log_probs", "string_conditional", "string_marginal", "string_marginals"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
