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

from ppl_tok.lm.base import model_window  # noqa: F401 (re-exported: ppl_tok.scorings.documents reads it here)


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


def lockstep_groups(sizes: Sequence[int], most: int) -> list[slice]:
    """Consecutive slices of the items whose ``sizes`` (bytes) sum to at most ``most`` each; an item larger than
    ``most`` is a group alone. The beam sweeps one group's windows in lockstep, then the next: its LM states grow
    with the bytes swept together, so a long document's windows are not all held at once (a 65 kB document's two
    windows together peaked at 4.8 GB; every window of a 1 MB document would not fit)."""
    groups: list[slice] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > most:
            groups.append(slice(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        groups.append(slice(start, len(sizes)))
    return groups


def split_targets(prefixes: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], most: int
                  ) -> tuple[list[tuple[tuple[int, ...], list[int]]], list[int]]:
    """Each ``(prefix, target)`` as pieces ``(prefix + target[:k], target[k:k + most])`` of at most ``most``
    target tokens, and the pair each piece belongs to: ``log p(target | prefix)`` is the sum of its pieces'
    (the chain rule), so a long window is scored a piece at a time."""
    pieces: list[tuple[tuple[int, ...], list[int]]] = []
    owner: list[int] = []
    for i, (prefix, target) in enumerate(zip(prefixes, targets)):
        prefix, target = tuple(prefix), list(target)
        for k in range(0, max(1, len(target)), most):
            pieces.append((prefix + tuple(target[:k]), target[k: k + most]))
            owner.append(i)
    return pieces, owner


def sweep_in_groups(sweep: Any, lm: Any, pieces: Sequence[Any], search: Any, keep: bool = False,
                    **options: Any) -> list[Any]:
    """``sweep(lm, texts, contexts, search, **options)`` of the windows ``pieces``, a :func:`lockstep_groups` group
    (at most the ``lm_bytes`` limit of text) at a time: memory bounded by a group's, whatever the documents'
    lengths (``options``: e.g. ``on_bytes``, the progress callback)."""
    from ppl_tok.limits import limits
    from ppl_tok.common.counts import count_bytes

    out: list[Any] = []
    for g in lockstep_groups([count_bytes(p.text) for p in pieces], limits().lm_bytes):
        part = pieces[g]
        extra = {"keep": [p.tokens for p in part]} if keep else {}
        extra.update(options)
        out.extend(sweep(lm, [p.text for p in part], [p.context for p in part], search, **extra))
    return out


def log_probs_after_in_pieces(lm: Any, prefixes: list[tuple[int, ...]], targets: list, row_bytes: int
                              ) -> list[float]:
    """:meth:`~ppl_tok.lm.base.LanguageModel.log_probs_after`, run one prefix length at a time.

    A batch of prefixes of different lengths is padded on the left; under
    float32 SDPA a short row padded to a long one moves by ~2e-4 nats
    (measured, SmolLM2: BOS alone beside a 24-token prefix), more than lm-eval's
    1e-4 agreement. Rows of one prefix length advance in lockstep and are never
    padded, so each group's numbers are those of the row run alone. A call scores at most
    ``row_bytes`` of ``[T, V]`` rows: a longer target is cut into pieces, each after the tokens before
    it (:func:`split_targets`, the chain rule), so a long window's memory stays that of a piece's.
    """
    most = max(1, row_bytes // (4 * len(lm.vocab)))
    pieces, owner = split_targets(prefixes, targets, most)
    groups: dict[int, list[int]] = {}
    for i, (p, _) in enumerate(pieces):
        groups.setdefault(len(p), []).append(i)
    out = [0.0] * len(prefixes)
    for members in groups.values():
        for part in lockstep_groups([len(pieces[i][1]) for i in members], most):
            chosen = members[part]
            scored = lm.log_probs_after([pieces[i][0] for i in chosen], [pieces[i][1] for i in chosen])
            for i, lp in zip(chosen, scored):
                out[owner[i]] += lp
    return out
