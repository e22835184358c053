"""Prefill modes: how the LM over strings conditions on a prompt.

``exact`` sums the prefix probability of the prompt ``x`` over every covering
(:mod:`ppl_tok.strings.state`): the byte-synchronous beam walks all of ``x``,
about eight token forwards per byte.

``canonical-head`` splits ``x = head . tail`` at a boundary of its canonical
tokenization ``v*(x) = (v_1 .. v_n)``: the **head** ``h* = (v_1 .. v_k)`` is
run through the LM in one batched prefill forward (as canonical scoring of the
prompt is), and the beam walks only the tail, from the state after ``c h*``.
What it computes is the LM over strings restricted to the coverings of ``x``
whose first ``k`` tokens are ``h*``:

    P_H(x | c) = P(output starts with x, and its first k tokens are h* | c)
               = p(h* | c) * P(tail | c h*),

and every figure derived from it: next bytes ``p_H(b | x) = P_H(x b) / P_H(x)``
and conditionals ``p_H(y | x) = P_H(x y) / P_H(x)`` are the LM over strings
**conditioned on "the head is tokenized canonically"** (the factor
``p(h* | c)`` cancels in them). Relation to ``exact``: ``P_H(x) <= P(x)`` (a
subset of the coverings), with equality of every figure where the head is empty
(``k = 0``: then canonical-head *is* exact); otherwise ``p_H(. | x)`` is a
different conditional from ``p(. | x)``: it leaves out the coverings that split
the head non-canonically (the share ``1 - P_H(x) / P(x)``, small on ordinary
text). The head's probability is computed exactly, so the beam's certified
bracket on ``P(tail | c h*)`` is a certified bracket on ``P_H(x)`` and every
interval derived from it holds for the canonical-head quantity (not for exact's).

**Back-off.** The tail must hold every token that can run past the end of the
prompt: a token starting at offset ``s`` does when its surface starts with
``x[s:]`` and is longer. The **reach** ``r(x)`` is the earliest such ``s`` (the
prompt's last ``longest token`` bytes are searched in the vocabulary's sorted
surfaces, :mod:`ppl_tok.strings.cover`); on prose it is the start of the last
word or two, 3-20 bytes before the end, where the vocabulary's longest tokens
(SmolLM2's 81 bytes of ``=``) only matter for prompts that end in such runs.
``k`` is the largest number of canonical tokens whose bytes end at or before
``min(r(x), |x| - tail)`` and not inside a UTF-8 character (``tail``: the
config's ``prefill_tail``, default ``None``: no minimum beyond the reach). So
whatever the tail's length, no covering that the exact LM over strings sums at
the prompt's end is cut by the head: the head only fixes how the bytes before
the reach are split. A prompt whose canonical tokens do not spell it byte for
byte (a tokenizer that normalises text) or that is not UTF-8 gets no head.

**Default** (``prefill="auto"``): ``canonical-head`` when the head so chosen
holds at least :data:`AUTO_HEAD_TOKENS` tokens, else ``exact``: a short prompt
is cheap to walk exactly, and there the head would change the quantity for
little gain in speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ppl_tok.lm.base import LanguageModel, model_window
from ppl_tok.strings.beam import AUTO_HEAD_TOKENS, PREFILL_MODES, ContextLengthError, StringSearchConfig
from ppl_tok.strings.cover import CoverIndex, cover_index
from ppl_tok.vocabulary import Vocabulary

#: the prefill modes by name (:data:`ppl_tok.strings.beam.PREFILL_MODES`)
AUTO_PREFILL, EXACT_PREFILL, CANONICAL_HEAD_PREFILL = PREFILL_MODES

#: the back-off rule's name, recorded by stores of canonical-head figures (0.2.0 backed off a longest token)
BACKOFF = "reach"



@dataclass(frozen=True)
class Head:
    """The part of a prompt run by one prefill forward.

    :param ids: the head's canonical tokens ``h*`` (empty: the prompt is walked exactly).
    :param n_bytes: the head's length in bytes (the tail starts there).
    :param log_prob: ``log p(h* | c)`` (0 for an empty head).
    """

    ids: tuple[int, ...] = ()
    n_bytes: int = 0
    log_prob: float = 0.0

    @property
    def mode(self) -> str:
        """``"canonical-head"`` where there is a head, else ``"exact"``."""
        return CANONICAL_HEAD_PREFILL if self.ids else EXACT_PREFILL


def _canonical_ends(vocab: Vocabulary, prompt: bytes) -> tuple[list[int], list[int]]:
    """The prompt's canonical tokens and the byte offset where each ends (none if they do not spell it)."""
    try:
        text = prompt.decode("utf-8")
        ids = vocab.encode(text)
    except (UnicodeDecodeError, ValueError):
        return [], []
    ends, at = [], 0
    for t in ids:
        surface = vocab[t]
        if surface is None or prompt[at: at + len(surface)] != surface:
            return [], []
        at += len(surface)
        ends.append(at)
    return (list(ids), ends) if at == len(prompt) else ([], [])


def reach(index: CoverIndex, prompt: bytes) -> int:
    """The earliest offset ``s`` from which a token longer than ``prompt[s:]`` starts with ``prompt[s:]``.

    Every token that can run past the end of ``prompt`` starts at or after it
    (``len(prompt)`` where none can, e.g. an empty prompt).
    """
    n = len(prompt)
    for s in range(max(0, n - index.longest + 1), n):
        rest = prompt[s:]
        a, b = index.run(rest)
        if index.equal(rest, a, b) < b:  # a token strictly longer than the rest starts with it
            return s
    return n


def head_tokens(vocab: Vocabulary, prompt: bytes, config: StringSearchConfig,
                index: CoverIndex | None = None) -> tuple[tuple[int, ...], int]:
    """``(h*, its bytes)``: the head the config's prefill mode takes from ``prompt`` (``((), 0)``: exact).

    The back-off rule (the :func:`reach` and ``prefill_tail``) and the default are the module docstring's.
    """
    if config.prefill == EXACT_PREFILL or not prompt:
        return (), 0
    limit = min(reach(index if index is not None else cover_index(vocab), prompt), len(prompt) - 1)
    if config.prefill_tail is not None:
        limit = min(limit, len(prompt) - config.prefill_tail)
    if limit <= 0:
        return (), 0
    ids, ends = _canonical_ends(vocab, prompt)
    k = 0
    for j, e in enumerate(ends, 1):
        if e > limit:
            break
        if prompt[e] & 0xC0 != 0x80:  # the tail starts on a character, not inside one
            k = j
    if k == 0 or (config.prefill == "auto" and k < AUTO_HEAD_TOKENS):
        return (), 0
    return tuple(ids[:k]), ends[k - 1]


def fewest_tokens(vocab: Vocabulary, data: bytes, covering: bool = True) -> int:
    """The fewest tokens of any tokenization of ``data`` (``covering``: of any covering, whose last token
    may run past its end), by dynamic programming over byte offsets; ``0`` for no bytes.

    A lower bound on the positions every walk over ``data`` needs, so a prompt whose bound
    exceeds the context window is refused before any walk (:func:`check_window`). A string
    with no tokenization gets a bound past any window.
    """
    index = cover_index(vocab)
    n = len(data)
    unreachable = n + 2  # more tokens than bytes: no tokenization
    best = [0] + [unreachable] * n
    fewest = unreachable if n else 0
    for i in range(n):
        if best[i] == unreachable:
            continue
        for length in range(1, min(index.longest, n - i) + 1):
            piece = data[i: i + length]
            a, b = index.run(piece)
            if a == b:
                break  # no token starts with these bytes, nor with any longer run of them
            if index.equal(piece, a, b) > a:
                best[i + length] = min(best[i + length], best[i] + 1)
            if covering and i + length == n:
                fewest = min(fewest, best[i] + 1)
    return min(fewest, best[n])


def check_window(lm: LanguageModel, data: bytes, context: str | Sequence[int] = "", what: str = "the prompt",
                 covering: bool = True) -> None:
    """Refuse ``data`` after BOS and ``context`` up front when even its shortest tokenization overflows the window.

    :raises ContextLengthError: naming the positions needed (and the canonical tokens' count), the window and the fix.
    """
    window = model_window(lm)
    if window is None:
        return
    prefix = len(lm.prefix_ids(context))
    if prefix + len(data) <= window:  # every token spells at least one byte: it fits whatever its tokenization
        return
    need = prefix + fewest_tokens(lm.vocab, data, covering)
    if need > window:
        try:
            canonical = f", {prefix + len(lm.vocab.encode(data.decode('utf-8')))} canonically"
        except (UnicodeDecodeError, ValueError):
            canonical = ""
        raise ContextLengthError(
            f"{what} needs {need} token positions at least (BOS and context included{canonical}), more than "
            f"{lm.name}'s context window of {window}: the LM over strings conditions on the whole string and does "
            f"not window; shorten {what} or the context (e.g. keep the last bytes)")


def prefill_heads(lm: LanguageModel, prompts: Sequence[bytes], contexts: Sequence[str | Sequence[int]],
                  config: StringSearchConfig) -> list[Head]:
    """Each prompt's :class:`Head` with ``log p(h* | c)``, the heads of all prompts run in one batched call.

    ``lm.log_probs_after`` runs every head on top of its context (one batched forward
    on a pooled transformer) and caches the states along it, so the state after
    ``c h*`` that the beam starts from costs one more token.
    """
    if len(prompts) != len(contexts):
        raise ValueError(f"{len(prompts)} prompts but {len(contexts)} contexts")
    for p, c in zip(prompts, contexts):
        check_window(lm, bytes(p), c)
    index = cover_index(lm.vocab)
    split = [head_tokens(lm.vocab, bytes(p), config, index) for p in prompts]
    todo = [i for i, (ids, _) in enumerate(split) if ids]
    prefixes = [lm.prefix_ids(contexts[i]) for i in todo]
    window = model_window(lm)
    for i, prefix in zip(todo, prefixes):
        if window is not None and len(prefix) + len(split[i][0]) > window:
            raise ContextLengthError(
                f"the prompt's canonical head needs {len(prefix) + len(split[i][0])} token positions (BOS and "
                f"context included), more than {lm.name}'s context window of {window}: the LM over strings "
                "conditions on the whole prompt and does not window; shorten the prompt (e.g. keep its last bytes)")
    log_probs = lm.log_probs_after(prefixes, [split[i][0] for i in todo]) if todo else []
    heads = [Head() for _ in prompts]
    for i, lp in zip(todo, log_probs):
        heads[i] = Head(split[i][0], split[i][1], float(lp))
    return heads


__all__ = ["AUTO_HEAD_TOKENS", "AUTO_PREFILL", "BACKOFF", "CANONICAL_HEAD_PREFILL", "EXACT_PREFILL", "Head",
           "check_window", "fewest_tokens", "head_tokens", "prefill_heads", "reach"]
