"""``p(x | c)`` summed over every tokenization of ``x``, by the byte-synchronous beam, with a certified bracket.

    p(x | c) = sum over tokenizations v of x of  prod_t p(v_t | c, v_<t)

(Geh et al., 2024, Problem 2: no EOS; the probability that the LM's next
tokens spell exactly ``x``.) The sweep of :mod:`ppl_tok.strings.beam` runs
over the nodes of the MDD (:func:`ppl_tok.mdd.compile_mdd`) in byte order;
a hypothesis at node ``i`` branches into the MDD's out-edges of ``i``, and a
branch that reaches the sink is a complete tokenization. Then

* ``estimate`` = log of the mass of the complete tokenizations found: the beam's
  sum, as genlm-bytes reports it (the pruned mass is a bound on what is missing,
  not an estimate of it);
* ``lower`` = ``estimate - tolerance`` (certified: the found mass less the rows'
  rounding tolerance, :mod:`ppl_tok.strings.certified`);
* ``upper`` = log of found + the mass of every pruned prefix, ``+ tolerance``, at most 0 (certified);
* ``canonical`` = log p of the canonical tokenization, which the beam always
  keeps, so ``canonical <= estimate``;
* ``departures``: where the mass found beyond the canonical tokenization sits.
  A found tokenization ``v`` differs from the canonical one ``v*`` on the byte
  spans between the boundaries the two share (:func:`differing_spans`); its
  mass ``p(v)`` is split equally over its ``k(v)`` spans, so that

      sum over spans s of m(s) = sum over found v != v* of p(v),
      m(s) = sum over found v departing on s of p(v) / k(v).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ppl_tok.limits import check_contexts, check_texts
from ppl_tok.lm.base import LanguageModel
from ppl_tok.common.logspace import logsumexp
from ppl_tok.mdd import MDD, compile_mdd
from ppl_tok.strings.beam import ByteBeam, Hypothesis, StringSearchConfig, run_kept
from ppl_tok.strings.certified import uninformative_hint
from ppl_tok.strings.checkpoint import Saver, restore_sweep, sweep_record


@dataclass(frozen=True)
class StringMarginal:
    """A certified bracket ``lower <= log p(text | context) <= upper`` from the byte-synchronous beam.

    :param estimate: the point value (the mass found: ``lower + tolerance``).
    :param canonical: log p of the canonical tokenization (``<= estimate``).
    :param best: the most probable tokenization found, and ``best_log_prob`` its log p.
    :param found: the number of complete tokenizations summed.
    :param forwards: token positions the search ran through the LM (cache hits included).
    :param n_bytes: the length of the text in UTF-8 bytes.
    :param departures: ``((start, end, log m), ...)``: the found mass beyond the
        canonical tokenization, by byte span where it departs (module docstring),
        most massive first; ``single_span_mass`` the log of the part of it in
        tokenizations that depart on one span only (split by nothing).
    :param tolerance: nats of rounding included on both sides of ``[lower, upper]``.
    :param hint: ``None`` when the bracket informs (at most :data:`~ppl_tok.strings.certified.WIDE_NATS`
        wide), else what would tighten it.
    :param paths: every complete tokenization summed, ``((tokens, log p), ...)``, and ``canonical_path`` the
        canonical one's tokens (what :mod:`benchmarks.oracle` prices); not in :meth:`to_dict`.
    """

    text: str
    lower: float
    upper: float
    estimate: float
    canonical: float
    best: tuple[int, ...]
    best_log_prob: float
    found: int
    forwards: int
    n_bytes: int
    seconds: float
    departures: tuple[tuple[int, int, float], ...] = ()
    single_span_mass: float = -math.inf
    tolerance: float = 0.0
    hint: str | None = None
    paths: tuple[tuple[tuple[int, ...], float], ...] = field(default=(), repr=False, compare=False)
    canonical_path: tuple[int, ...] = field(default=(), repr=False, compare=False)

    @property
    def width(self) -> float:
        """``upper - lower`` in nats (``2 * tolerance`` when nothing was pruned)."""
        return self.upper - self.lower

    @property
    def informative(self) -> bool:
        return self.hint is None

    @property
    def forwards_per_byte(self) -> float:
        return self.forwards / self.n_bytes

    def __repr__(self) -> str:
        return (f"StringMarginal({self.text!r}: {self.lower:.4f} <= log p <= {self.upper:.4f}, canonical "
                f"{self.canonical:.4f}, {self.found} tokenizations summed, {self.forwards} forwards)")

    def to_dict(self) -> dict[str, Any]:
        """The numbers, JSON-ready apart from infinities."""
        return {"text": self.text, "lower": self.lower, "upper": self.upper, "estimate": self.estimate,
                "width": self.width, "canonical": self.canonical, "best": list(self.best),
                "best_log_prob": self.best_log_prob, "found": self.found, "forwards": self.forwards,
                "n_bytes": self.n_bytes, "seconds": self.seconds,
                "departures": [list(d) for d in self.departures], "single_span_mass": self.single_span_mass,
                "tolerance_nats": self.tolerance, "informative": self.informative, "hint": self.hint}


def canonical_offsets(tokens: Sequence[int], lm: LanguageModel) -> dict[int, int]:
    """``{start offset: token}`` of a tokenization (how the beam recognises the canonical path)."""
    return {at: int(t) for at, t in zip(token_cuts(lm.vocab, tokens), tokens)}


def token_cuts(vocab: Any, tokens: Sequence[int]) -> list[int]:
    """The byte offsets where the tokens of a tokenization start, and its end (``[0, ..., n]``)."""
    out, at = [0], 0
    for t in tokens:
        at += len(vocab[t])
        out.append(at)
    return out


def differing_spans(vocab: Any, tokens: Sequence[int], canonical: Sequence[int]) -> list[tuple[int, int]]:
    """The byte ranges where two tokenizations of one text differ (between boundaries they share)."""
    a, b = token_cuts(vocab, tokens), token_cuts(vocab, canonical)
    shared = sorted(set(a) & set(b))
    own = set(a) ^ set(b)
    return [(lo, hi) for lo, hi in zip(shared, shared[1:]) if any(lo < x < hi for x in own)]


def departures(vocab: Any, found: dict[tuple[int, ...], float], canonical: Sequence[int]
               ) -> tuple[tuple[tuple[int, int, float], ...], float]:
    """The found mass beyond ``canonical`` by span where it departs, and the part in one-span departures (logs)."""
    canonical = tuple(canonical)
    by_span: dict[tuple[int, int], list[float]] = {}
    single: list[float] = []
    for path, lp in found.items():
        if path == canonical or lp == -math.inf:
            continue
        spans = differing_spans(vocab, path, canonical)
        share = lp - math.log(len(spans))
        for span in spans:
            by_span.setdefault(span, []).append(share)
        if len(spans) == 1:
            single.append(lp)
    out = sorted(((a, b, logsumexp(v)) for (a, b), v in by_span.items()), key=lambda d: -d[2])
    return tuple(out), logsumexp(single)


class _Sweep:
    """One string's byte-synchronous beam over its MDD, advanced a kept offset at a time (:func:`string_marginals`)."""

    def __init__(self, lm: LanguageModel, text: str, context: str | Sequence[int], config: StringSearchConfig,
                 mdd: MDD | None, on_offset: Callable[[int], None] | None):
        self.lm, self.text, self.on_offset, self.config = lm, text, on_offset, config
        self.mdd = mdd if mdd is not None else compile_mdd(text, lm.vocab)
        self.canonical = self.mdd.canonical()
        self.root = lm.initial(context)
        self.beam = ByteBeam(lm, self.root, config, canonical_offsets(self.canonical, lm))
        self.nodes = iter(sorted(self.mdd.nodes))
        self.found: dict[tuple[int, ...], float] = {}
        self.canonical_lp = -math.inf
        self.at, self.done = 0, False  # the last offset expanded; whether the sink is reached

    def skip_to(self, offset: int, done: bool) -> None:
        """Go on after ``offset`` (a resumed sweep: :func:`ppl_tok.strings.checkpoint.restore_sweep`)."""
        self.nodes = iter([] if done else [n for n in sorted(self.mdd.nodes) if n > offset])
        self.at, self.done = offset, done

    def next_kept(self) -> tuple[int, list[Hypothesis], dict[int, int]] | None:
        """Prune the next offset that keeps a hypothesis: ``(offset, kept, out-edges)``; ``None`` at the sink."""
        for i in self.nodes:
            if i == self.mdd.sink:
                self.done = True
                return None
            out = self.mdd.out_tokens(i)
            kept = self.beam.select(i)
            if kept:
                return i, kept, out
            if self.on_offset is not None:
                self.on_offset(i)
        self.done = True
        return None

    def expand(self, i: int, kept: list[Hypothesis], out: dict[int, int]) -> None:
        """Branch the kept hypotheses at ``i`` (already run) into the MDD's out-edges."""
        if self.on_offset is not None:
            self.on_offset(i)
        self.at = i
        tokens = list(out)
        rows = self.lm.token_log_probs([h.state for h in kept], [tokens] * len(kept))
        for h, row in zip(kept, rows):
            for t, lp in zip(tokens, row.tolist()):
                child = self.beam.branch(h, i, t, lp)
                if out[t] == self.mdd.sink:
                    if child.log_prob > -math.inf or child.canonical:
                        path = child.tokens()
                        self.found[path] = child.log_prob
                        if child.canonical:
                            self.canonical_lp = child.log_prob
                else:
                    self.beam.push(out[t], child)
            h.state = None  # its children hold it until they run; the path keeps only the small Hypothesis chain

    def result(self, seconds: float) -> StringMarginal:
        found, beam = self.found, self.beam
        estimate = logsumexp(found.values())
        upper = max(estimate, logsumexp(list(found.values()) + beam.pruned + beam.pending_mass()))
        tol = beam.tolerance()
        best = max(found, key=found.__getitem__) if found else self.canonical
        spans, single = departures(self.lm.vocab, found, self.canonical)
        return StringMarginal(text=self.text, lower=estimate - tol, upper=min(0.0, upper + tol), estimate=estimate,
                              canonical=self.canonical_lp, best=best, best_log_prob=found.get(best, -math.inf),
                              found=len(found), forwards=beam.forwards, n_bytes=len(self.mdd.text), seconds=seconds,
                              departures=spans, single_span_mass=single, tolerance=tol,
                              hint=uninformative_hint(min(0.0, upper + tol) - estimate + tol, self.config),
                              paths=tuple(found.items()), canonical_path=tuple(self.canonical))


def string_marginals(lm: LanguageModel, texts: Sequence[str], contexts: Sequence[str | Sequence[int]] | None = None,
                     config: StringSearchConfig | None = None, *,
                     on_bytes: Callable[[int], None] | None = None,
                     resume: Sequence[Sequence[dict[str, Any]] | None] | None = None,
                     checkpoint: Callable[[list[tuple[int, dict[str, Any]]]], None] | None = None,
                     checkpoint_every: float = 60.0) -> list[StringMarginal]:
    """:func:`string_marginal` of several strings, swept in lockstep: one batched forward per step for all of them.

    Each step every unfinished string advances to its next byte offset that keeps a
    hypothesis; their kept hypotheses run in one LM call (:func:`~ppl_tok.strings.beam.run_kept`).
    Each string's result is what :func:`string_marginal` gives it alone (the beams never
    mix; only float32 rounding of a batched forward can differ), in far fewer LM calls.
    ``seconds`` of each result is the wall time of the whole call.

    :param on_bytes: called with the number of bytes (of all the texts together) that the sweeps have just
        gone past, as they go: progress inside a long text; the calls add up to the bytes before each text's
        last offset.
    :param resume: per text, the records of its sweep saved so far (``None``: from its start): each
        sweep goes on from the last one (:mod:`ppl_tok.strings.checkpoint`).
    :param checkpoint: called with ``[(text's position, record), ...]`` every ``checkpoint_every``
        seconds (between two steps) for the sweeps that moved since their last record.
    """
    texts = check_texts("texts", texts)
    config = config or StringSearchConfig()
    _check_config(config)
    contexts = [""] * len(texts) if contexts is None else check_contexts("contexts", contexts)
    if len(contexts) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(contexts)} contexts")
    start = time.perf_counter()
    sweeps = [_Sweep(lm, t, c, config, None, None if on_bytes is None else _bytes_gone(t, on_bytes))
              for t, c in zip(texts, contexts)]
    resume = [None] * len(texts) if resume is None else list(resume)
    if len(resume) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(resume)} resume entries")
    for s, records in zip(sweeps, resume):
        if records:
            restore_sweep(s, records)
    _run_lockstep(sweeps, None if checkpoint is None else Saver(checkpoint, checkpoint_every, resume, sweep_record))
    seconds = time.perf_counter() - start
    return [s.result(seconds) for s in sweeps]


def _check_config(config: StringSearchConfig) -> None:
    if config.prune_against != "offset":
        raise ValueError(f"string_marginal prunes against the offset only; prune_against={config.prune_against!r} "
                         "is for next-byte walks (StringState)")


def _run_lockstep(sweeps: Sequence[_Sweep], saver: Saver | None = None) -> None:
    """Advance every sweep to its next kept offset, run all their kept hypotheses in one call, expand; repeat
    (``saver``: given every sweep's state between two steps)."""
    active = [s for s in sweeps if not s.done]
    while active:
        steps = [(s, step) for s in active if (step := s.next_kept()) is not None]
        if steps:
            run_kept(steps[0][0].lm, [(s.beam, kept, out) for s, (_, kept, out) in steps])
        for s, (i, kept, out) in steps:
            s.expand(i, kept, out)
        active = [s for s, _ in steps]
        if saver is not None:
            saver(sweeps)


def _bytes_gone(text: str, on_bytes: Callable[[int], None]) -> Callable[[int], None]:
    """An ``on_offset`` of one sweep that reports to ``on_bytes`` the bytes gone past since its last call."""
    done = [0]

    def on_offset(i: int) -> None:
        if i > done[0]:
            on_bytes(i - done[0])
            done[0] = i

    return on_offset


def string_marginal(lm: LanguageModel, text: str, context: str | Sequence[int] = "",
                    config: StringSearchConfig | None = None, *, mdd: MDD | None = None,
                    on_offset: Callable[[int], None] | None = None) -> StringMarginal:
    """Bracket ``log p(text | context)`` over all tokenizations of ``text`` with the byte-synchronous beam.

    :param context: a string (canonically tokenized) or token ids, after BOS.
    :param config: beam width, pruning threshold, budget (:class:`StringSearchConfig`).
    :param mdd: the text's MDD, if already compiled.
    :param on_offset: called with each byte offset once the beam has run the hypotheses ending there
        (progress over long texts).
    """
    config = config or StringSearchConfig()
    _check_config(config)
    start = time.perf_counter()
    sweep = _Sweep(lm, text, context, config, mdd, on_offset)
    _run_lockstep([sweep])
    return sweep.result(time.perf_counter() - start)
