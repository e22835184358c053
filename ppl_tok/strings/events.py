"""The events of a string that a score can be the probability of, bracketed by one walk of the LM over strings.

For a text ``x`` after BOS and a context ``c``, the LM writes a string (its
tokens' surfaces, up to the first token without a surface: EOS or another
special token, :mod:`ppl_tok.strings.state`). Three events of that string
contain ``x``, nested:

* **prefix**: the string starts with ``x``,
  ``P(x | c) = sum over coverings (h, t) of p(h | c) p(t | c, h)``: ``h`` spells
  ``x[:i]``, ``i < |x|``, and ``t``'s surface starts with ``x[i:]`` (it may run
  past the end of ``x``);
* **text** (without the end): the LM's next tokens spell exactly ``x``,
  ``p(x | c) = sum over tokenizations v of x of p(v | c)``
  (:func:`~ppl_tok.strings.marginal.string_marginal`; no event of the string,
  since the string may go on);
* **with the end**: the string is exactly ``x``,
  ``P(x, end | c) = sum over tokenizations v of x of p(v | c) p(end | c, v)``,
  ``p(end | c, v)`` the mass of the tokens without a surface after ``v``.

A tokenization of ``x`` is one covering (its last token ends at ``|x|``), and
a tokenization followed by the end is one way to write ``x`` exactly, so

    P(x, end | c)  <=  p(x | c)  <=  P(x | c).

:func:`string_events` walks :class:`~ppl_tok.strings.state.StringState` over
each text (many texts in lockstep, :func:`~ppl_tok.strings.state.extend_many`)
and reads two certified brackets at its end: the prefix one
(:meth:`~ppl_tok.strings.state.StringState.prefix_log_prob`) and the end one
(:func:`end_bracket`: the found ``P^(x, end)``, and at most that plus the pruned
mass ``Pi``, since a pruned prefix bounds all its continuations). The walk keeps
the canonical tokens' path (``keep``), so each lower bound is at least the
canonical tokens' figure of the same event: ``log p(v*)`` for the prefix,
``log p(v*) + log p(end | v*)`` for the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.limits import check_contexts, check_texts
from ppl_tok.common.logspace import logsumexp
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.checkpoint import Saver, restore_state, state_record
from ppl_tok.strings.state import END_OF_STRING, EndUnavailableError, PrefixProbability, StringState, extend_many


def end_bracket(state: StringState) -> PrefixProbability:
    """The certified bracket on ``log P(x, end | c)`` for the bytes ``x`` the state has read.

    :raises EndUnavailableError: the LM has no token without a surface (the end is undefined).
    """
    nb = state.next_byte_log_probs()
    if not nb.has_end:
        raise EndUnavailableError(f"{state.lm.name} has no EOS or other special token: the probability that the "
                                  "string ends is undefined")
    found = float(nb.unnormalised[END_OF_STRING])
    return PrefixProbability(found, min(nb.prefix.bound, logsumexp([found, state.pruned_log_mass()])), nb.tolerance)


def require_end(lm: LanguageModel, what: str = "the end of the string") -> None:
    """A ``ValueError`` naming ``lm`` when its vocabulary has no token without a surface (no EOS)."""
    if not lm.vocab.special_ids:
        raise EndUnavailableError(f"{lm.name} has no EOS or other special token, so {what} has no probability; "
                                  "score the text without its end (--scoring beam) or its prefix (--scoring prefix)")


@dataclass(frozen=True)
class StringEvents:
    """The brackets of one text's events (natural logs; module docstring).

    :param prefix: the bracket on ``log P(x | c)``, the string starts with ``x``.
    :param end: the bracket on ``log P(x, end | c)``, the string is ``x`` (``None``: the LM has no end).
    :param canonical: ``log p(v* | c)`` of the kept path (``-inf`` if none was given).
    :param canonical_end: ``log p(v* | c) + log p(end | c, v*)``.
    :param forwards: token positions the walk ran through the LM (cache hits included).
    """

    text: str
    prefix: PrefixProbability
    end: PrefixProbability | None
    canonical: float
    canonical_end: float
    forwards: int


def _kept_path(state: StringState) -> tuple[float, float]:
    """``(log p(v*), log p(v*) + log p(end | v*))`` of the kept path ending at the state's last byte."""
    for c in state.window.get(len(state.data), []):
        if c.hyp.canonical:
            return c.hyp.log_prob, c.hyp.log_prob + c.end
    return -math.inf, -math.inf


def string_events(lm: LanguageModel, texts: Sequence[str], contexts: Sequence[str | Sequence[int]] | None = None,
                  config: StringSearchConfig | None = None, *,
                  keep: Sequence[Sequence[int] | None] | None = None,
                  on_bytes: Callable[[int], None] | None = None,
                  resume: Sequence[Sequence[dict[str, Any]] | None] | None = None,
                  checkpoint: Callable[[list[tuple[int, dict[str, Any]]]], None] | None = None,
                  checkpoint_every: float = 60.0) -> list[StringEvents]:
    """The prefix and end brackets of each of ``texts`` (module docstring), the walks in lockstep.

    :param contexts: per text, a string (canonically tokenized) or token ids after BOS.
    :param config: the beam; every text is walked exactly from its first byte (no prefill).
    :param keep: per text, a tokenization of it whose path the beam always keeps (default: its
        canonical tokens, ``lm.canonical(text)``).
    :param on_bytes: called with ``1`` each time a walk has read one more byte (progress inside long texts;
        a resumed walk first reports the bytes it had read).
    :param resume: per text, the records of its walk saved so far (``None``: from its first byte); each walk
        goes on from the last one (:mod:`ppl_tok.strings.checkpoint`).
    :param checkpoint: called with ``[(text's position, record), ...]`` every ``checkpoint_every`` seconds,
        between two rounds of forwards, for the walks that moved since their last record.
    """
    texts = check_texts("texts", texts)
    config = config or StringSearchConfig()
    contexts = [""] * len(texts) if contexts is None else check_contexts("contexts", contexts)
    paths = [lm.canonical(t) for t in texts] if keep is None else [p or lm.canonical(t) for p, t in zip(keep, texts)]
    if not len(contexts) == len(paths) == len(texts):
        raise ValueError(f"{len(texts)} texts, {len(contexts)} contexts and {len(paths)} kept paths")
    for t, p in zip(texts, paths):
        if b"".join(lm.vocab[int(k)] or b"" for k in p) != t.encode("utf-8"):
            raise ValueError(f"the kept path of {t!r} does not spell it under {lm.vocab.name}")
    resume = [None] * len(texts) if resume is None else list(resume)
    if len(resume) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(resume)} resume entries")
    states = [StringState(lm, c, config, keep=p) if not r else restore_state(lm, c, config, p, r)
              for c, p, r in zip(contexts, paths, resume)]
    done = [len(s.data) for s in states]
    if on_bytes is not None and sum(done):
        on_bytes(sum(done))
    saver = None if checkpoint is None else Saver(checkpoint, checkpoint_every, resume, state_record)
    extend_many(states, [t.encode("utf-8")[n:] for t, n in zip(texts, done)],
                after=None if on_bytes is None else (lambda k, j: on_bytes(1)),
                between=None if saver is None else (lambda: saver(states)))
    out = []
    for t, s in zip(texts, states):
        end = end_bracket(s) if s.index.has_end else None
        canonical, canonical_end = _kept_path(s)
        out.append(StringEvents(t, s.prefix_log_prob(), end, canonical, canonical_end, s.forwards))
    return out
