"""The one default beam of every surprisal: Python's surprisal functions, ``ppl-tok surprisal`` and ``ppl-tok
reading`` read it here (issue 57, "one default per parameter")."""

from __future__ import annotations

from typing import Any

from ppl_tok.strings.beam import StringSearchConfig

#: The lazy share every surprisal defaults to (:func:`surprisal_config`: Python's surprisals, ``ppl-tok surprisal``,
#: ``ppl-tok reading``): the cheapest within median 0.01 and p99 0.1 bits per word of the exhaustive walk on held-out
#: words (issue 45; 1,000 OpenBookQA words: median 0, p99 0.0022 bits, 20.2x canonical's CPU against 35.7x; from
#: 1e-4 up a p99 floor of 0.39 bits; docs/strings.md, "The default setting").
SURPRISAL_LAZY: dict[str, float | None] = {"extend_threshold": 1e-5}


def surprisal_config(**settings: Any) -> StringSearchConfig:
    """The beam every surprisal defaults to: :class:`StringSearchConfig`'s defaults with :data:`SURPRISAL_LAZY`'s
    lazy extension, ``settings`` (its fields) over them."""
    return StringSearchConfig(**{**SURPRISAL_LAZY, **settings})
