"""The conditional's event, declared once (issue 57, "one default per parameter"): Python's
:func:`~ppl_tok.strings.conditional.string_conditional`, :func:`~ppl_tok.strings.conditional.conditionals_many` and
:func:`~ppl_tok.strings.conditional_tree.conditionals_tree`, ``ppl-tok conditional`` (and its ``--input`` run
folders), ``ppl-tok boundary`` and lm-eval's ``scoring=conditional`` all read it here. Light (no torch), so that
the command line reads it when it builds its parser.

**The default is ``"boundary"``**: ``log p(y, boundary | x)``, the continuation followed by a character of the
word-end set ``B`` (:class:`~ppl_tok.strings.units.WordRules`: ASCII whitespace, or ASCII punctuation other than
``'`` and ``-``) or the end of the string. That is the answer's own probability: ``"prefix"``, the output after the
prompt *begins with* ``y``, credits ``y`` with every longer word it begins (" lever" with " levers" and
" leverage"; docs/strings.md, "The event"). ``"prefix"`` stays one argument away (``event="prefix"``,
``--event prefix``, lm-eval's ``event=prefix``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppl_tok.common.params import Params, default_of, param

#: the events a conditional can be the probability of: the output after the prompt begins with the text
#: (``prefix``), or the text followed by a boundary character or the end (``boundary``)
EVENTS = ("prefix", "boundary")


@dataclass(frozen=True)
class EventParams(Params):
    """The conditional's event: the one declaration of its default (module docstring)."""

    event: str = param("boundary", "what the text's probability is of: boundary (the text, then a boundary "
                       "character or the end: the answer's own probability) or prefix (the output begins with the "
                       "text, crediting every longer word it begins)", flag="--event", choices=EVENTS)


#: the conditional's default event (:class:`EventParams`)
DEFAULT_EVENT: str = default_of(EventParams, "event")


__all__ = ["DEFAULT_EVENT", "EVENTS", "EventParams"]
