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

from collections.abc import Callable, Sequence
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


def sweep_in_groups(sweep: Any, lm: Any, pieces: Sequence[Any], search: Any, keep: bool = False,
                    **options: Any) -> list[Any]:
    """``sweep(lm, texts, contexts, search, **options)`` of the windows ``pieces``, a :func:`lockstep_groups` group
    (at most the ``lm_bytes`` limit of text) at a time: memory bounded by a group's, whatever the documents'
    lengths (``options``: e.g. ``on_bytes``, the progress callback; ``resume``, one entry per piece, and
    ``checkpoint``, called with positions among the pieces, :mod:`ppl_tok.perplexity.partial`)."""
    from ppl_tok.limits import limits
    from ppl_tok.common.counts import count_bytes

    out: list[Any] = []
    resume, checkpoint = options.pop("resume", None), options.pop("checkpoint", None)
    for g in lockstep_groups([count_bytes(p.text) for p in pieces], limits().lm_bytes):
        part = pieces[g]
        extra = {"keep": [p.tokens for p in part]} if keep else {}
        if resume is not None:
            extra["resume"] = resume[g]
        if checkpoint is not None:
            extra["checkpoint"] = lambda done, at=g.start: checkpoint([(at + k, r) for k, r in done])
        extra.update(options)
        out.extend(sweep(lm, [p.text for p in part], [p.context for p in part], search, **extra))
    return out


def chain_pieces(prefix: Sequence[int], target: Sequence[int], most: int
                 ) -> list[tuple[tuple[int, ...], tuple[int, ...], bool]]:
    """``(prefix, target)`` as a chain of pieces ``(before, tokens, scored)`` of at most ``most`` tokens each, run
    in order, each on top of the previous one's last state: the prefix's first ``1 .. most`` tokens are the root
    (one prefill), the rest of the prefix follows in unscored pieces (their terms are dropped), then the target
    in scored ones. ``log p(target | prefix)`` is the sum of the scored pieces' terms (the chain rule), and no
    forward runs more than ``most`` positions, whatever the lengths."""
    prefix, target = tuple(int(t) for t in prefix), tuple(int(t) for t in target)
    if not prefix:
        raise ValueError("a prefix needs at least one token (BOS)")
    root = (len(prefix) - 1) % most + 1
    pieces = [(prefix[:k], prefix[k: k + most], False) for k in range(root, len(prefix), most)]
    pieces += [(prefix + target[:k], target[k: k + most], True) for k in range(0, max(1, len(target)), most)]
    return pieces


def log_probs_after_in_pieces(lm: Any, prefixes: list[tuple[int, ...]], targets: list, row_bytes: int,
                              on_scored: Callable[[int, tuple[int, ...]], None] | None = None) -> list[float]:
    """``log p(targets[i] | prefixes[i])`` (:meth:`~ppl_tok.lm.base.LanguageModel.token_log_probs_after`) with
    each forward bounded: at most ``most = row_bytes / (4 V)`` positions, so its ``[T, V]`` rows stay within
    ``row_bytes`` and its prefill within ``most`` positions, whatever the document's length.

    Each pair is a chain of pieces (:func:`chain_pieces`). Pairs run in groups of at most ``most`` positions in
    all (a longer pair alone), so the KV entries held at once are a group's; within a group, round ``r`` runs
    every pair's ``r``-th piece, batched one prefix length at a time: a batch of prefixes of different lengths
    is padded on the left, and under float32 SDPA a short row padded to a long one moves by ~2e-4 nats
    (measured, SmolLM2: BOS alone beside a 24-token prefix), more than lm-eval's 1e-4 agreement; rows of one
    prefix length are never padded, so each is the row run alone. A piece caches only its last state
    (``keep_states=False``: not one per position with the ``[T, V]`` rows), which the next piece resumes from,
    and a finished group's states are dropped (:meth:`~ppl_tok.lm.base.LanguageModel.forget`).
    ``on_scored(i, tokens)``: called after each scored piece, with pair ``i`` and the target tokens it scored
    (progress inside a long target: every target token is reported once).
    """
    most = max(1, row_bytes // (4 * len(lm.vocab)))
    out = [0.0] * len(prefixes)
    sizes = [len(p) + len(t) for p, t in zip(prefixes, targets)]
    for g in lockstep_groups(sizes, most):
        chains = {i: chain_pieces(prefixes[i], targets[i], most) for i in range(g.start, g.stop)}
        done: list[tuple[int, ...]] = []
        for r in range(max(len(c) for c in chains.values())):
            by_length: dict[int, list[int]] = {}
            for i, chain in chains.items():
                if r < len(chain):
                    by_length.setdefault(len(chain[r][0]), []).append(i)
            for members in by_length.values():
                for part in lockstep_groups([len(chains[i][r][1]) for i in members], most):
                    chosen = members[part]
                    terms = lm.token_log_probs_after([chains[i][r][0] for i in chosen],
                                                     [chains[i][r][1] for i in chosen], keep_states=False)
                    for i, lps in zip(chosen, terms):
                        before, tokens, scored = chains[i][r]
                        out[i] += sum(lps, 0.0) if scored else 0.0
                        done += [before, before + tokens[:-1]]
                        if scored and on_scored is not None:
                            on_scored(i, tokens)
        lm.forget(done)
    return out
