"""``log p(y | x)`` over strings: a continuation's probability after a prompt string, free of the prompt boundary.

    p(y | x, c) = P(x y | c) / P(x | c)

with ``P`` the prefix probability of :mod:`ppl_tok.strings.state` (summed over
every covering of the prompt and of prompt plus continuation; Vieira et al.,
ICML 2025). A prompt that ends inside a token ("The capital of France is P")
is no problem: the coverings of ``x`` include the tokens that run past it.
One walk of the beam along ``x`` then ``y`` gives both prefix brackets, so the
quotient has a certified interval:

    log P^(xy) - log P^+(x)  <=  log p(y | x)  <=  min(0, log P^+(xy) - log P^(x)),

where ``P^`` is the mass found and ``P^+`` adds the pruned mass, in exact arithmetic; the
reported interval widens it by both brackets' rounding tolerances (``tolerance``,
:mod:`ppl_tok.strings.certified`), and is flagged uninformative when wider than
:data:`~ppl_tok.strings.certified.WIDE_NATS`.

Under ``config.prefill`` ``canonical-head`` (:mod:`ppl_tok.strings.prefill`) both
prefix probabilities are ``P_H``, the coverings that start with the prompt's
canonical head ``h*``, and the quotient is ``p(y | x, the head is tokenized
canonically) = P(tail y | c h*) / P(tail | c h*)``; the interval is certified for
that quantity (it equals the exact one where the head is empty).

**The event the text names** (``event``, default :data:`~ppl_tok.strings.conditional_event.DEFAULT_EVENT`,
``"boundary"``, declared once in :mod:`ppl_tok.strings.conditional_event`). ``"prefix"`` is the above: the output
after the prompt *begins with* ``y``, which credits a word with every longer word it begins (" lever" with
" levers"). ``"boundary"`` (the answer's own probability) asks that ``y`` be followed by a boundary: the next character is in the set ``B`` of
:class:`~ppl_tok.strings.units.WordRules` (ASCII whitespace, or ASCII punctuation other than ``'`` and ``-``)
or the string ends, the word-end rule of ``surprisal --final boundary``
(:mod:`ppl_tok.strings.surprisal`):

    p(y, boundary | x) = [ sum over c in B of P(x y c) + P(x y, end) ] / P(x),

its interval the same quotient with the boundary event's bracket (found mass, plus the pruned mass ``Pi``
on the upper side) in place of ``P(x y)``'s. ``y``'s own last character does not matter: " lever." is
followed by a boundary as " lever" is.

**Greedy** (:attr:`StringConditional.greedy`): whether the most probable next byte over strings (the 256
bytes and the end, :meth:`~ppl_tok.strings.state.StringState.next_byte_log_probs`) is ``y``'s byte at each of
its bytes, and, under ``"boundary"``, after its last byte an ASCII byte of ``B`` or the end: greedy decoding
byte by byte (``generate --greedy``) writes ``y`` and then (under ``"boundary"``) ends the word.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.certified import uninformative_hint
from ppl_tok.strings.conditional_event import DEFAULT_EVENT, EVENTS
from ppl_tok.strings.state import PrefixProbability, StringState

#: lm-eval's ``scoring=conditional`` default lazy extension (``StringSearchConfig.extend_threshold``): a prefix is
#: run through the LM only if it holds at least this share of the text's mass at its offset. Chosen by the rule of
#: issue 58 (per request p99 <= 0.05 nats and max <= 0.5 nats from the exhaustive setting, on requests it was not
#: chosen on: ``python -m benchmarks.conditional_defaults``, docs/lm-eval.md): the old 0.01, chosen on 48
#: OpenBookQA requests, is 0.46 nats low on issue 58's request cut mid-word ("To fight Iv" | "an Drago ...") under
#: the boundary event (2.82 under the prefix event before the canonical path was kept), 1e-3 is 0.107 low there
#: (past p99 0.05); 1e-4 meets the rule on the 28 held-out SocialIQA, mid-word and HellaSwag requests measured
#: (max 0.0088 nats; docs/lm-eval.md gives the figures and the cost, 8.8x canonical's: the 1.5x target missed).
CONDITIONAL_EXTEND_THRESHOLD = 1e-4


@dataclass(frozen=True)
class StringConditional:
    """A certified interval ``lower <= log p(text | prompt, context) <= upper`` and the estimate.

    :param estimate: ``log P^(prompt text) - log P^(prompt)`` (the beam's masses).
    :param prompt_prefix: the bracket on ``log P(prompt | context)``.
    :param joint_prefix: the bracket on ``log P(prompt text | context)``.
    :param forwards: token positions run through the LM (the canonical head's included).
    :param prefill: the mode the prompt got (``"exact"`` or ``"canonical-head"``).
    :param head_bytes: the canonical head's bytes (0: exact).
    :param tolerance: nats of rounding included on both sides of the interval.
    :param hint: ``None`` when the interval informs, else what would tighten it
        (:func:`~ppl_tok.strings.certified.uninformative_hint`).
    :param event: ``"prefix"`` or ``"boundary"`` (:data:`EVENTS`): what ``joint_prefix`` brackets.
    :param greedy: whether greedy byte decoding writes the text (and the boundary) after the prompt
        (``None``: not computed).
    :param prefix_estimate: the ``"prefix"`` event's estimate from the same walk (under ``"boundary"``; free).
    """

    prompt: str
    text: str
    lower: float
    upper: float
    estimate: float
    prompt_prefix: PrefixProbability
    joint_prefix: PrefixProbability
    forwards: int
    n_bytes: int
    seconds: float
    prefill: str = "exact"
    head_bytes: int = 0
    tolerance: float = 0.0
    hint: str | None = None
    event: str = "prefix"
    greedy: bool | None = None
    prefix_estimate: float | None = None

    @property
    def width(self) -> float:
        return self.upper - self.lower

    @property
    def informative(self) -> bool:
        return self.hint is None

    @property
    def certified(self) -> bool:
        """Whether ``[lower, upper]`` is certified for ``log p(text | prompt)`` itself: not under a canonical head
        (``head_bytes > 0``), where it is certified for the conditional given that head only
        (:func:`~ppl_tok.strings.certified.head_caveat`)."""
        return self.head_bytes == 0

    def __repr__(self) -> str:
        return (f"StringConditional({self.text!r} | {self.prompt!r}: {self.lower:.4f} <= log p <= {self.upper:.4f}, "
                f"estimate {self.estimate:.4f}, {self.forwards} forwards)")

    def to_dict(self) -> dict[str, Any]:
        """The numbers, JSON-ready apart from infinities."""
        return {"prompt": self.prompt, "text": self.text, "lower": self.lower, "upper": self.upper,
                "estimate": self.estimate, "width": self.width,
                "prompt_prefix": self.prompt_prefix.to_dict(), "joint_prefix": self.joint_prefix.to_dict(),
                "forwards": self.forwards, "n_bytes": self.n_bytes, "seconds": self.seconds,
                "prefill": self.prefill, "head_bytes": self.head_bytes, "tolerance_nats": self.tolerance,
                "informative": self.informative, "hint": self.hint, "certified": self.certified,
                "event": self.event, "greedy": self.greedy, "prefix_estimate": self.prefix_estimate}


def quotient(joint: PrefixProbability, prompt: PrefixProbability) -> tuple[float, float, float]:
    """``(lower, estimate, upper)`` of ``log P(xy) - log P(x)`` from the two brackets.

    The bracket of exact arithmetic, ``[found(xy) - bound(x), min(0, bound(xy) - found(x))]``, widened
    by both tolerances (and kept at most 0); the estimate ``found(xy) - found(x)`` is not clamped into it
    (only to at most 0).
    """
    if prompt.found == -math.inf:
        raise ValueError("the prompt has probability zero under the beam: the conditional is undefined")
    tol = joint.tolerance + prompt.tolerance
    lower = joint.found - prompt.bound - tol
    estimate = min(0.0, joint.found - prompt.found)
    upper = min(0.0, joint.bound - prompt.found + tol)
    return lower, estimate, upper


def _check_event(event: str) -> None:
    if event not in EVENTS:
        raise ValueError(f"event must be one of {', '.join(EVENTS)} (what the text's probability is of), "
                         f"got {event!r}")


def string_conditional(lm: LanguageModel, prompt: str, text: str, context: str | Sequence[int] = "",
                       config: StringSearchConfig | None = None, event: str = DEFAULT_EVENT) -> StringConditional:
    """``log p(text | prompt)`` over strings, with a certified interval.

    :param prompt: the prompt string (any cut: mid-word, trailing space); ``""`` is
        the unconditional case, ``log P(text | context)`` as a prefix.
    :param context: token ids or a canonically tokenized string before the prompt (after BOS).
    :param config: the beam's controls and the prefill mode (``canonical-head``: the
        conditional given that the prompt's head is tokenized canonically; see the module docstring).
    :param event: ``"boundary"`` (the default: ``text`` then a boundary character or the end) or ``"prefix"``
        (the output begins with ``text``; module docstring).
    """
    for name, value in (("prompt", prompt), ("text", text)):
        if not isinstance(value, (str, bytes)):
            raise TypeError(f"string_conditional: {name} must be a str (or bytes), got {value!r} "
                            f"({type(value).__name__})")
    _check_event(event)
    start = time.perf_counter()
    keep = None
    if event == "boundary":  # the canonical path kept, as conditionals_many keeps it
        data, tail = _utf8(prompt), _utf8(text)
        prompt_path, joint = _canonical_path(lm, data), _canonical_path(lm, data + tail)
        keep = list((joint if _extends(joint, prompt_path, len(data)) else prompt_path).values())
    return conditional_of(StringState(lm, context, config, prompt=prompt, keep=keep), text, start=start,
                          event=event)


def _utf8(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _extends(joint: dict[int, int], prompt_path: dict[int, int], n: int) -> bool:
    """Whether the canonical path of prompt + text begins with the prompt's own (``n``: the prompt's bytes)."""
    return n in joint and {o: t for o, t in joint.items() if o < n} == prompt_path


def conditional_of(state: StringState, text: str | bytes, on_bytes: Callable[[int], None] | None = None,
                   start: float | None = None, event: str = DEFAULT_EVENT) -> StringConditional:
    """:func:`string_conditional` from a state already after the prompt (walked in place along ``text``).

    ``text`` is fed byte by byte, ``on_bytes(1)`` after each (progress); ``start``: the ``perf_counter``
    the result's ``seconds`` count from (default: now).
    """
    _check_event(event)
    start = time.perf_counter() if start is None else start
    before = state.prefix_log_prob()
    prompt_end = len(state.data)
    walked = prompt_end - state.base  # the prompt's bytes the beam walked (after a canonical head)
    for b in text.encode("utf-8") if isinstance(text, str) else bytes(text):
        state.extend(b)
        if on_bytes is not None:
            on_bytes(1)
    return _result(state, prompt_end, text, before, walked, start, event)


def _boundary_bytes() -> tuple[list[int], list[str]]:
    """The boundary set ``B`` of the default :class:`~ppl_tok.strings.units.WordRules`: its ASCII bytes, and its
    other characters."""
    from ppl_tok.strings.units import WordRules

    chars = WordRules().boundary_chars
    return sorted({ord(c) for c in chars if ord(c) < 128}), [c for c in chars if ord(c) >= 128]


def boundary_prefix(state: StringState) -> PrefixProbability:
    """The certified bracket on ``log (sum over c in B of P(x c) + P(x, end))`` for the bytes ``x`` the state has
    read, as a :class:`~ppl_tok.strings.state.PrefixProbability` (surprisal's word-end event,
    :mod:`ppl_tok.strings.surprisal`)."""
    from ppl_tok.strings.surprisal import _boundary_event

    lower, found, upper = _boundary_event(state, *_boundary_bytes())
    tol = found - lower if found > -math.inf else state.tolerance()
    return PrefixProbability(found, upper - tol, tol)


def _canonical_path(lm: LanguageModel, data: bytes) -> dict[int, int]:
    """``{byte offset: token}`` of the canonical tokens of ``data`` (empty where the tokenizer cannot encode it)."""
    try:
        ids = lm.canonical(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {}
    path, at = {}, 0
    for t in ids:
        path[at] = int(t)
        at += len(lm.vocab[int(t)] or b"")
    return path


def _greedy_next(state: StringState, want: int | None) -> bool:
    """Whether the most probable next byte (or the end) after the state is ``want`` (``None``: an ASCII byte of
    ``B`` or the end)."""
    from ppl_tok.strings.state import END_OF_STRING

    best = int(state.next_byte_log_probs().log_probs.argmax())
    if want is not None:
        return best == want
    return best == END_OF_STRING or best in _boundary_bytes()[0]


def _result(state: StringState, prompt_end: int, text: str | bytes, before: PrefixProbability, walked: int,
            start: float, event: str, greedy: bool | None = None) -> StringConditional:
    """The conditional of ``state`` (after prompt then ``text``; the prompt's bytes end at ``prompt_end``)."""
    joint = boundary_prefix(state) if event == "boundary" else state.prefix_log_prob()
    prefix_estimate = quotient(state.prefix_log_prob(), before)[1] if event == "boundary" else None
    if greedy is not None and event == "boundary":
        greedy = greedy and _greedy_next(state, None)
    lower, estimate, upper = quotient(joint, before)
    hint = uninformative_hint(upper - lower, state.config, prefill=state.prefill, prompt_bytes=walked)
    return StringConditional(prompt=bytes(state.data[:prompt_end]).decode("utf-8", errors="replace"),
                             text=text if isinstance(text, str) else text.decode("utf-8", "replace"),
                             lower=lower, upper=upper, estimate=estimate, prompt_prefix=before, joint_prefix=joint,
                             forwards=state.forwards, n_bytes=len(state.data), seconds=time.perf_counter() - start,
                             prefill=state.prefill, head_bytes=state.base, tolerance=joint.tolerance + before.tolerance,
                             hint=hint, event=event, greedy=greedy, prefix_estimate=prefix_estimate)


def conditionals_many(lm: LanguageModel, prompts: Sequence[str], texts: Sequence[str],
                      context: str | Sequence[int] = "", config: StringSearchConfig | None = None,
                      event: str = DEFAULT_EVENT, greedy: bool = False) -> list[StringConditional]:
    """``string_conditional(lm, prompts[i], texts[i], context, config, event)`` of many pairs, sharing the LM's calls.

    The distinct prompts' canonical heads are prefilled in one batched call
    (:func:`~ppl_tok.strings.prefill.prefill_heads`), their tails walked together
    (:func:`~ppl_tok.strings.state.extend_many`); each pair then walks its text from a copy
    of its prompt's state, all texts together. So the answers of a multiple-choice question
    share the walk of their question. Each result is the one :func:`string_conditional`
    gives alone (the beams never mix; only float32 rounding of a batched forward can differ).
    ``greedy``: also whether greedy byte decoding writes each text (:attr:`StringConditional.greedy`; one
    next-byte distribution per byte read, no LM call). The same pairs through the token tree, its own estimand:
    :func:`~ppl_tok.strings.conditional_tree.conditionals_tree`.

    :raises ValueError: a prompt or a text hits a dead end, or a prompt has probability zero
        (the message names the pair's index).
    """
    from ppl_tok.strings.prefill import prefill_heads
    from ppl_tok.strings.state import extend_many

    if len(prompts) != len(texts):
        raise ValueError(f"{len(prompts)} prompts but {len(texts)} texts")
    _check_event(event)
    config = config or StringSearchConfig()
    start = time.perf_counter()
    distinct = list(dict.fromkeys(prompts))
    data = [p.encode("utf-8") for p in distinct]
    heads = prefill_heads(lm, data, [context] * len(data), config)
    # under the boundary event each walk keeps its canonical path (the beam's ``canonical_at``): the prompt's,
    # then, where the canonical tokens of prompt + text begin with the prompt's, the text's; so the mass found is
    # at least that path's, and the event has rows at the text's end whatever lazy extension skips
    keep = event == "boundary"
    paths = [_canonical_path(lm, d) if keep else {} for d in data]
    states = [StringState(lm, context, config, prompt=d[:h.n_bytes], head=h, keep=list(path.values()) or None)
              for d, h, path in zip(data, heads, paths)]
    failed: dict[int, Exception] = {}
    extend_many(states, [d[h.n_bytes:] for d, h in zip(data, heads)], failed=failed)
    where = {p: k for k, p in enumerate(distinct)}
    for i, p in enumerate(prompts):
        if where[p] in failed:
            raise ValueError(f"pair {i} (prompt {p!r}): {failed[where[p]]}") from failed[where[p]]
    befores = [s.prefix_log_prob() for s in states]
    walks = [states[where[p]].copy() for p in prompts]
    feeds = [t.encode("utf-8") for t in texts]
    for w, p, f in zip(walks, prompts, feeds) if keep else ():
        k = where[p]
        joint = _canonical_path(lm, data[k] + f)
        if _extends(joint, paths[k], len(data[k])):
            w.beam.canonical_at = joint
    greedy_so_far: list[bool | None] = [None] * len(texts)
    after = None
    if greedy:
        greedy_so_far = [bool(f) and _greedy_next(w, f[0]) for w, f in zip(walks, feeds)]

        def after(k: int, j: int) -> None:
            if greedy_so_far[k] and j + 1 < len(feeds[k]):
                greedy_so_far[k] = _greedy_next(walks[k], feeds[k][j + 1])

    failed = {}
    extend_many(walks, feeds, after=after, failed=failed)
    out = []
    for i, (p, t, w) in enumerate(zip(prompts, texts, walks)):
        if i in failed:
            raise ValueError(f"pair {i} (prompt {p!r}, text {t!r}): {failed[i]}") from failed[i]
        k = where[p]
        try:
            out.append(_result(w, len(data[k]), t, befores[k], len(data[k]) - heads[k].n_bytes, start, event,
                               greedy_so_far[i]))
        except ValueError as err:
            raise ValueError(f"pair {i} (prompt {p!r}): {err}") from err
    return out
