"""The LM over strings: prefix probabilities and next-byte distributions, incrementally.

For a prompt ``x`` (bytes) and context ``c``, the **prefix probability**

    P(x | c) = P(the LM's output starts with x)
             = sum over boundaries i < |x| and token prefixes h spelling x[:i]
                 of  p(h | c) * sum over tokens t whose surface starts with x[i:] of p(t | c, h)

sums over the *covering* of ``x``: token sequences whose last token starts
before the end of ``x`` and may run past it (Vieira et al., ICML 2025). The
string is what the LM writes before its first token without a surface (EOS or
another special token), so every next token either writes a byte or ends the
string, and with ``P(x b)`` the prefix probability of ``x`` followed by byte
``b`` and ``P(x, end)`` the probability that the output is exactly ``x``:

    sum over b of P(x b)  +  P(x, end)  =  P(x),     p(b | x) = P(x b) / P(x).

:class:`StringState` keeps the byte-synchronous beam (:mod:`ppl_tok.strings.beam`)
of the token prefixes ending at each offset of ``x``. A kept prefix ending at
``i`` is run through the LM once; its next-token row is permuted into byte
order once (:mod:`ppl_tok.strings.cover`) and then only sliced: as ``x``
grows, the tokens starting at ``i`` that still agree with ``x[i:]`` are a
shrinking contiguous run, and the offset leaves the window when the run is
empty. Extending ``x`` by a byte costs one batched forward of the prefixes
that end at the new offset (at most ``beam`` of them), whatever the length of
``x``. Every pruned prefix's probability ``p(h)`` bounds all its continuations,
so with ``Pi`` the pruned mass and ``P^`` the mass the beam found,

    P^(x) <= P(x) <= P^(x) + Pi,    P^(x b) / (P^(x) + Pi) <= p(b | x) <= (P^(x b) + Pi) / P^(x),

in exact arithmetic over the rows; every reported interval is that bracket (in logs)
widened by the rows' rounding tolerance on both sides (:mod:`ppl_tok.strings.certified`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ppl_tok.limits import check_contexts
from ppl_tok.lm.base import LanguageModel
from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings.beam import ByteBeam, Hypothesis, StringSearchConfig, needs_forward, run_kept
from ppl_tok.strings.certified import END_OF_STRING, EndUnavailableError, NextBytes, PrefixProbability  # noqa: F401
from ppl_tok.strings.cover import EQUAL, cover_index, group_log_masses, run_log_masses
from ppl_tok.strings.cover import Cover as _Cover
from ppl_tok.strings.prefill import Head, prefill_heads

class DeadEndError(ValueError):
    """No kept token prefix can spell the next byte."""


class StringState:
    """The LM over strings after the bytes fed so far (mutable: :meth:`extend` advances it in place).

    :param lm: the LM.
    :param context: a string (canonically tokenized) or token ids, after BOS, that the
        string continues (``""``: the string starts right after BOS).
    :param config: the beam's controls (:class:`StringSearchConfig`).
    :param prompt: bytes (or a str, its UTF-8) fed at once, under the config's ``prefill``
        mode (:mod:`ppl_tok.strings.prefill`): with ``canonical-head`` the prompt's canonical
        head ``h*`` is run in one prefill forward and the beam walks only the tail, so every
        figure is the LM over strings conditioned on "the head is tokenized canonically"
        (``P_H(x) = p(h* | c) P(tail | c h*)``, the prefix probabilities included). Bytes
        fed later with :meth:`extend` are always walked exactly.
    :param head: the prompt's head if already prefilled (:func:`~ppl_tok.strings.prefill.prefill_heads`,
        many prompts in one batched call); ``None``: chosen and run here.
    :param keep: token ids of one tokenization of the text to be fed (its canonical tokens, say),
        from byte 0: the beam always keeps the prefixes of this path, as the ``beam`` scoring keeps
        the canonical one, so the mass found is never below the path's (one forward more per offset
        at most; the figures stay certified brackets).
    """

    def __init__(self, lm: LanguageModel, context: str | Sequence[int] = "",
                 config: StringSearchConfig | None = None, *, prompt: str | bytes = b"", head: Head | None = None,
                 keep: Sequence[int] | None = None):
        self.lm = lm
        self.config = config or StringSearchConfig()
        self.index = cover_index(lm.vocab)
        data = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
        if head is None:
            head = prefill_heads(lm, [data], [context], self.config)[0]
        elif b"".join(lm.vocab[t] or b"" for t in head.ids) != data[:head.n_bytes]:
            raise ValueError("the head given does not spell the start of the prompt")
        self.head, self.base = head, head.n_bytes
        self.data = bytearray(data[:self.base])
        root = lm.state(lm.prefix_ids(context) + head.ids) if head.ids else lm.initial(context)
        along: dict[int, int] = {}
        at = 0
        for t in keep or ():
            along[at] = int(t)
            at += len(lm.vocab[int(t)] or b"")
        self.beam = ByteBeam(lm, root, self.config, along, start=self.base, log_prob=head.log_prob)
        if self.config.prune_against == "text" or self.config.lazy:
            self.beam.keep_dropped = self.index.longest  # what a dead-end heal may revive
        self.window: dict[int, list[_Cover]] = {}
        self.heals = 0
        self._healing = False
        self._shared = False  # a copy shares its hypotheses' LM states with others: never release them
        self._settle(self.base)
        self.extend(data[self.base:])

    def copy(self) -> StringState:
        """An independent state at the same bytes (sharing the LM states already computed).

        Extending the copy leaves ``self`` as it is; this is how several continuations
        are explored from one point (:func:`~ppl_tok.strings.chars.next_char_log_probs`).
        From then on neither state frees the LM states of prefixes that leave its window
        (the other may still need them), so a long walk after a copy holds more memory.
        """
        new = object.__new__(StringState)
        new.lm, new.config, new.index = self.lm, self.config, self.index
        new.head, new.base = self.head, self.base
        new.data = bytearray(self.data)
        new.beam = self.beam.copy()
        new.window = {i: [c.copy() for c in cs] for i, cs in self.window.items()}
        new.heals, new._healing = self.heals, False
        self._shared = new._shared = True
        return new

    # ---------------------------------------------------------------- walking
    def _settle(self, offset: int) -> None:
        """Prune and run the prefixes ending at ``offset``; their rows, in byte order, join the window."""
        hyps = self._select(offset)
        run_kept(self.lm, [(self.beam, hyps, None)])
        self._absorb(offset, hyps)

    def _select(self, offset: int) -> list[Hypothesis]:
        """Prune the prefixes ending at ``offset``: the kept ones, not yet run (:func:`extend_many` runs many)."""
        floor, text_mass = -math.inf, None
        if offset > self.base and (self.config.prune_against == "text" or self.config.lazy):
            text_mass = self.prefix_log_prob().lower  # P^(x[:offset]): lazy extension's M_i (beam module docstring)
            if self.config.prune_against == "text":
                floor = text_mass - self.config.prune
        return self.beam.select(offset, floor=floor, text_mass=text_mass)

    def _absorb(self, offset: int, hyps: list[Hypothesis]) -> None:
        """The rows of the kept prefixes ending at ``offset`` (run), in byte order, join the window."""
        if not hyps:
            return
        rows = [h.state.log_probs for h in hyps]
        ids, special = self.index.on(rows[0].device)
        if self.index.has_end:
            ends = torch.logsumexp(torch.stack([r[special] for r in rows]).double(), -1).cpu().tolist()
        else:
            ends = [-math.inf] * len(hyps)
        # each row is put in byte order lazily, on the run the next byte leaves (_Cover)
        self.window[offset] = [_Cover(h, 0, None, e, row, ids) for h, row, e in zip(hyps, rows, ends)]

    def extend(self, data: bytes | int | str) -> StringState:
        """Append bytes (an int is one byte, a str its UTF-8) and advance the beam; returns ``self``."""
        if isinstance(data, bool) or not isinstance(data, (int, str, bytes, bytearray, memoryview)):
            raise TypeError(f"extend takes bytes, a str or one byte as an int, got {data!r} ({type(data).__name__})")
        if isinstance(data, int):
            if not 0 <= data < 256:
                raise ValueError(f"a byte is an integer in 0..255, got {data}")
            data = bytes([data])
        elif isinstance(data, str):
            data = data.encode("utf-8")
        for b in bytes(data):
            self._extend_byte(b)
        return self

    def _extend_byte(self, byte: int) -> None:
        keep = self._advance(byte)
        run_kept(self.lm, [(self.beam, keep, None)])
        self._finish(byte, keep)

    def _advance(self, byte: int) -> list[Hypothesis]:
        """Append ``byte``: slide the window, branch the prefixes that now end at the new offset, and
        prune them; the kept ones are returned, not yet run (:meth:`_finish` takes them once run)."""
        self.data.append(byte)
        m = len(self.data)
        heads: list[tuple[_Cover, int, torch.Tensor, torch.Tensor]] = []
        for i in sorted(self.window):
            prefix = bytes(self.data[i:m])
            a, b = self.index.run(prefix)
            if a == b:  # no token starting at i agrees with the text any more: forget the offset's states
                for c in self.window.pop(i):
                    if not self._shared:
                        c.hyp.state = None
                continue
            e = self.index.equal(prefix, a, b)
            for c in self.window[i]:
                c.narrow(a, b)
                if e > a:  # tokens spelling exactly data[i:m]: prefixes ending at m
                    heads.append((c, i, self.index.ids[a:e], c.vals[: e - a]))
        if heads:
            lps = torch.cat([v.double() for _, _, _, v in heads]).cpu().tolist()
            at = 0
            for c, i, toks, _ in heads:
                for t in toks.tolist():
                    self.beam.push(m, self.beam.branch(c.hyp, i, t, lps[at]))
                    at += 1
        return self._select(m)

    def _finish(self, byte: int, keep: list[Hypothesis]) -> None:
        """The kept prefixes of :meth:`_advance` (run) join the window; a dead end heals or is an error."""
        m = len(self.data)
        self._absorb(m, keep)
        if not self.window and self.beam.dropped and not self._healing:
            self._heal()
        if not self.window and not any(o > m for o in self.beam.open):  # (a heal may hold prefixes ahead)
            shown = bytes(self.data).decode("utf-8", errors="backslashreplace")
            if self.beam.pruned:
                raise DeadEndError(f"after {shown!r}: no kept token prefix can spell byte 0x{byte:02X} at offset "
                                   f"{m - 1} (the beam pruned the ones that might: raise beam or prune)")
            raise DeadEndError(f"{shown!r} has no covering token sequence under {self.lm.vocab.name}: "
                               f"no token spells byte 0x{byte:02X} at offset {m - 1}")

    def _heal(self) -> None:
        """Revive the hypotheses dropped in the last ``longest`` bytes and sweep those bytes again.

        Only pruning against the text reaches here: every kept prefix has left the text.
        The dropped prefixes (ending at offsets ``lo..m``) are put back (their mass leaves
        the pruned mass), and the bytes from ``lo`` on are fed again from a window that
        holds only them: the kept prefixes that died cannot spell ``x`` and carry
        nothing forward. The bracket stays certified (everything not revived is still
        pruned). A heal that finds nothing either ends in :class:`DeadEndError`.
        """
        data = bytes(self.data)
        offsets = self.beam.revive()
        lo = offsets[0]
        del self.data[lo:]
        self.window = {}
        self.heals += 1
        self._healing = True
        try:
            self._settle(lo)
            for b in data[lo:]:
                self._extend_byte(b)
        finally:
            self._healing = False

    # ------------------------------------------------------------- questions
    @property
    def forwards(self) -> int:
        """Token positions run through the LM: the beam's (cache hits included) and the canonical head's."""
        return self.beam.forwards + len(self.head.ids)

    @property
    def prefill(self) -> str:
        """The prefill mode the prompt got: ``"canonical-head"`` (a head of :attr:`base` bytes) or ``"exact"``."""
        return self.head.mode

    def tolerance(self) -> float:
        """The rounding tolerance (nats) of the brackets here: the beam's deepest prefix, the covering token and
        the canonical head's tokens (:func:`~ppl_tok.common.rounding.tolerance`)."""
        return self.beam.tolerance(1 + len(self.head.ids))

    def pruned_log_mass(self) -> float:
        """``log Pi``: the total probability of the pruned prefixes (``-inf``: nothing pruned)."""
        return self.beam.pruned_log_mass()

    def _covers_before(self) -> list[_Cover]:
        n = len(self.data)
        return [c for i, cs in self.window.items() if i < n for c in cs]

    def prefix_log_prob(self) -> PrefixProbability:
        """The bracket on ``log P(x | c)`` for the bytes ``x`` fed so far."""
        covers = self._covers_before()
        if len(self.data) == self.base:
            found = self.head.log_prob
        elif covers:
            masses = run_log_masses(covers)  # (kept per LM state and run: the tree reads rows again)
            found = logsumexp(c.hyp.log_prob + m for c, m in zip(covers, masses))
        else:
            found = -math.inf
        pruned = self.pruned_log_mass()
        return PrefixProbability(found, min(0.0, logsumexp([found, pruned])), self.tolerance())

    def sample_covering(self, uniforms: torch.Tensor) -> tuple[Hypothesis, int | None, int]:
        """Draw ``(h, t, i)``: a covering of the bytes fed so far, with probability ``p(h) p(t | h) / P^(x)``.

        ``h`` is a kept prefix ending at offset ``i < |x|`` and ``t`` a token whose surface
        starts with ``x[i:]`` (drawn by inverse CDF at ``uniforms[0]`` and ``uniforms[1]``).
        Every token sequence whose text starts with ``x`` is one covering followed by
        what the LM writes after it, so continuing with plain token sampling from
        ``h`` then ``t`` samples the LM over strings after ``x``. With nothing fed,
        ``(root, None, 0)``.
        """
        from ppl_tok.distributions import OverCandidates

        if len(self.data) == self.base:
            (root,) = [c.hyp for c in self.window[self.base]]
            return root, None, self.base
        covers = [(i, c) for i, cs in self.window.items() if i < len(self.data) for c in cs]
        masses = torch.stack([torch.logsumexp(c.vals.double(), 0) for _, c in covers]).cpu()
        masses = masses + torch.tensor([c.hyp.log_prob for _, c in covers], dtype=torch.float64)
        k = int(OverCandidates.from_lists([list(range(len(covers)))], [masses], uniforms=uniforms[:1]).sample())
        i, c = covers[k]
        ids = self.index.ids[c.a: c.a + len(c.vals)].tolist()
        t = int(OverCandidates.from_lists([ids], [c.vals.double().cpu()], uniforms=uniforms[1:2]).sample())
        return c.hyp, t, i

    def next_byte_log_probs(self) -> NextBytes:
        """``p(b | x)`` for every byte ``b`` and the end of the string, with certified bounds."""
        n = len(self.data)
        covers, values, segs, heads = [], [], [], []
        for i, cs in self.window.items():
            a, b, seg = self.index.groups(bytes(self.data[i:n]))
            for c in cs:
                covers.append(c)
                values.append(c.vals)
                segs.append(seg)
                heads.append(i == n)
        table = group_log_masses(values, segs)  # [Q, 257]
        lp = torch.tensor([c.hyp.log_prob for c in covers], dtype=torch.float64)
        ends = torch.tensor([c.end if h else -math.inf for c, h in zip(covers, heads)], dtype=torch.float64)
        per = torch.cat([table[:, :256], ends.unsqueeze(1)], 1) + lp.unsqueeze(1)  # [Q, 257]
        unnormalised = torch.logsumexp(per, 0)
        before = torch.tensor([not h for h in heads])
        if n == self.base:
            found = self.head.log_prob
        elif before.any():
            found = float(torch.logsumexp(torch.logsumexp(table[before][:, : EQUAL + 1], 1) + lp[before], 0))
        else:
            found = -math.inf
        pruned = self.pruned_log_mass()
        total = torch.logsumexp(unnormalised, 0)
        if total == -math.inf:
            raise DeadEndError(f"after {bytes(self.data)!r} the beam holds no mass: no next byte has probability")
        upper_prefix = min(0.0, logsumexp([found, pruned]))
        tol = self.tolerance()
        lower = unnormalised - upper_prefix - tol
        if found == -math.inf:
            upper = torch.zeros_like(unnormalised)
        else:
            upper = (torch.logaddexp(unnormalised, torch.tensor(pruned, dtype=torch.float64)) - found).clamp(max=0.0)
        return NextBytes(log_probs=unnormalised - total, lower=lower, upper=(upper + tol).clamp(max=0.0),
                         prefix=PrefixProbability(found, upper_prefix, tol), unnormalised=unnormalised,
                         has_end=self.index.has_end, tolerance=tol)


def initial(lm: LanguageModel, prompt: str | bytes = "", context: str | Sequence[int] = "",
            config: StringSearchConfig | None = None) -> StringState:
    """The LM over strings after ``prompt``, after BOS and ``context``, under ``config.prefill``.

    ``exact``: summed over all the prompt's tokenizations; ``canonical-head``: over those
    that start with the canonical head (:mod:`ppl_tok.strings.prefill`).
    """
    return StringState(lm, context, config, prompt=prompt)


def initial_many(lm: LanguageModel, prompts: Sequence[str | bytes], contexts: Sequence[str | Sequence[int]] | None = None,
                 config: StringSearchConfig | None = None) -> list[StringState]:
    """:func:`initial` of many prompts, their canonical heads prefilled in one batched call.

    Each state equals ``initial(lm, prompts[i], contexts[i], config)``; only the heads'
    forwards are shared (:func:`~ppl_tok.strings.prefill.prefill_heads`), the tails are
    walked one prompt at a time.
    """
    if isinstance(prompts, (str, bytes)):
        raise TypeError(f"prompts must be a sequence of prompts, got the {type(prompts).__name__} {prompts[:40]!r}: "
                        "wrap one prompt in a list, [prompt]")
    config = config or StringSearchConfig()
    contexts = [""] * len(prompts) if contexts is None else check_contexts("contexts", contexts)
    data = [p.encode("utf-8") if isinstance(p, str) else bytes(p) for p in prompts]
    heads = prefill_heads(lm, data, contexts, config)
    return [StringState(lm, c, config, prompt=p, head=h) for p, c, h in zip(data, contexts, heads)]


def extend_many(states: Sequence[StringState], data: Sequence[bytes | str], *,
                after: Callable[[int, int], None] | None = None, between: Callable[[], None] | None = None,
                failed: dict[int, Exception] | None = None) -> list[StringState]:
    """Feed ``data[k]`` to ``states[k]``, many walks sharing each LM call.

    Each state ends where ``states[k].extend(data[k])`` alone takes it (the beams never mix;
    only float32 rounding of a batched forward can differ), in far fewer LM calls, as
    :func:`~ppl_tok.strings.marginal.string_marginals` sweeps strings. The walks are not
    byte-synchronous: each state reads its bytes until the next one needs a forward (a kept
    prefix not in the LM's prefix cache), and one call then runs every waiting state's
    prefixes. ``B`` walks thus cost about the calls of the one that needs the most, not the
    union of the byte offsets where any of them needs one (on a CPU a call of a few rows
    costs about what one row does). The states must share one LM.

    :param after: ``after(k, j)`` is called once state ``k`` has read byte ``j`` of ``data[k]``
        (to read a figure there: :mod:`~ppl_tok.strings.surprisal` reads its events).
    :param between: called between two rounds of forwards, every state between two bytes (a checkpoint's moment).
    :param failed: if given, a walk that raises :class:`ValueError` (a dead end, a context too long,
        or ``after``'s error) stops there and its error is stored at ``failed[k]``; the others go on.
        Without it the error propagates.
    """
    if len(states) != len(data):
        raise ValueError(f"{len(states)} states but {len(data)} byte strings")
    if len({id(s.lm) for s in states}) > 1:
        raise ValueError("extend_many runs the states' forwards together: they must share one LM")
    if not states:
        return []
    lm = states[0].lm
    feeds = [d.encode("utf-8") if isinstance(d, str) else bytes(d) for d in data]
    at = [0] * len(states)
    stopped: dict[int, Exception] = {} if failed is None else failed

    def stop(k: int, err: ValueError) -> None:
        if failed is None:
            raise err
        stopped[k] = err

    def finish(k: int, kept: list[Hypothesis]) -> bool:
        """Byte ``at[k]`` read by walk ``k`` once its kept prefixes are run; ``False`` if the walk stopped."""
        try:
            states[k]._finish(feeds[k][at[k]], kept)
            if after is not None:
                after(k, at[k])
        except ValueError as err:
            stop(k, err)
            return False
        at[k] += 1
        return True

    live = [k for k, f in enumerate(feeds) if f]
    while live:
        waiting: list[tuple[int, list[Hypothesis]]] = []
        for k in live:
            while at[k] < len(feeds[k]):
                try:
                    kept = states[k]._advance(feeds[k][at[k]])
                except ValueError as err:  # a context too long
                    stop(k, err)
                    break
                if needs_forward(lm, kept):
                    waiting.append((k, kept))
                    break
                run_kept(lm, [(states[k].beam, kept, None)])  # cache hits only
                if not finish(k, kept):
                    break
        if waiting:
            run_kept(lm, [(states[k].beam, kept, None) for k, kept in waiting])
            lm.ensure_rows([h.state for _, kept in waiting for h in kept])
            for k, kept in waiting:
                finish(k, kept)
        live = [k for k in live if k not in stopped and at[k] < len(feeds[k])]
        if between is not None:
            between()
    return list(states)
