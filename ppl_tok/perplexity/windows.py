"""Rolling windows: scoring a document longer than the model's context, lm-eval's way.

Let ``t_1 .. t_n`` be the document's canonical tokens and ``L`` the window (the
most positions one forward may see). lm-eval's ``loglikelihood_rolling`` (with
its ``context_len = 1``) cuts the prediction into consecutive, disjoint windows:

* window 0 predicts ``t_1 .. t_m`` (``m = min(L, n)``) after BOS alone;
* while tokens are left, after ``p`` predicted tokens, the next window predicts
  ``t_{p+1} .. t_e`` with ``e = p + min(n - p, L)``, conditioned on the
  canonical tokens ``t_{e-L} .. t_p`` that precede it (no BOS): the ``L``
  positions before ``t_e`` fill the window. A full window is conditioned on one
  token (the last one of the previous window), the last, shorter window on more.

The document's log-likelihood is the sum over windows of
``log p(predicted tokens | conditioning tokens)``; with ``n <= L`` it is
``log p(t_1 .. t_n | BOS)``. :func:`rolling_windows` gives exactly lm-eval's
windows (tested against ``lm_eval.utils.get_rolling_token_windows``).

For the marginal over tokenizations (``--scoring marginal``/``canonical+rest``)
a window must be a *string*: :func:`text_windows` moves each cut back to the
nearest token boundary that is also a UTF-8 character boundary, and a window
after the first is conditioned on BOS followed by the same preceding canonical
tokens (the marginal engines always start from BOS; the window is then
``L - 1`` tokens so that the forward still fits). The window's marginal sums
over every tokenization of its text; the canonical figure reported beside it
is the slice of the document's canonical tokens under the same conditioning.
A document of at most ``L - 1`` tokens is one window, and then every scoring
is the plain ``log p(text | BOS)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.lm.base import model_window  # noqa: F401 (re-exported: ppl_tok.perplexity.score reads it here)


@dataclass(frozen=True)
class Window:
    """Predict ``tokens[start:end]`` after ``tokens[context:start]`` (``bos``: after BOS alone; ``context == start``)."""

    context: int
    start: int
    end: int
    bos: bool


def rolling_windows(n: int, length: int | None) -> list[Window]:
    """lm-eval's rolling windows over ``n`` tokens with windows of ``length`` positions (``None``: one window)."""
    if n < 1:
        raise ValueError("a document needs at least one token")
    if length is None:
        return [Window(0, 0, n, True)]
    if length < 1:
        raise ValueError(f"the window must hold at least one position, got {length}")
    first = min(length, n)
    out = [Window(0, 0, first, True)]
    done = first
    while done < n:
        end = done + min(n - done, length)
        out.append(Window(end - length - 1, done, end, False))
        done = end
    return out


def _char_boundaries(vocab: Any, tokens: Sequence[int]) -> list[bool]:
    """``ok[i]``: the bytes of ``tokens[:i]`` end on a UTF-8 character boundary."""
    ok = [True]
    pending = 0  # continuation bytes still owed by the last character started
    for t in tokens:
        for b in vocab.decode([t]):
            if pending:
                pending -= 1
            elif b >= 0xF0:
                pending = 3
            elif b >= 0xE0:
                pending = 2
            elif b >= 0xC0:
                pending = 1
        ok.append(pending == 0)
    return ok


@dataclass(frozen=True)
class TextWindow:
    """One string window: ``text`` after ``context`` (token ids, BOS not included; empty for the first)."""

    context: tuple[int, ...]
    text: str
    tokens: tuple[int, ...]


def text_windows(vocab: Any, tokens: Sequence[int], length: int | None) -> list[TextWindow]:
    """String windows for marginal scoring (see the module docstring): cuts at character boundaries.

    With a window of ``length`` positions the predicted part is at most ``length - 1``
    tokens (BOS takes one position).
    """
    tokens = [int(t) for t in tokens]
    n = len(tokens)
    if length is None or n <= length - 1:
        return [TextWindow((), vocab.decode(tokens).decode("utf-8"), tuple(tokens))]
    if length < 3:
        raise ValueError(f"a window of {length} positions is too small for BOS, context and text")
    ok = _char_boundaries(vocab, tokens)
    out: list[TextWindow] = []
    done = 0
    while done < n:
        end = min(n, done + (length - 1 if not out else length - 2))
        while end > done and not ok[end]:
            end -= 1
        if end == done:  # one character spans more tokens than a window holds
            end = min(n, done + 1)
            while end < n and not ok[end]:
                end += 1
        context = () if not out else tuple(tokens[max(0, end - (length - 1)): done])
        piece = tokens[done:end]
        out.append(TextWindow(context, vocab.decode(piece).decode("utf-8"), tuple(piece)))
        done = end
    return out
