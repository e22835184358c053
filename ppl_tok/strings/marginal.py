"""``p(x | c)`` summed over every tokenization of ``x``, by the byte-synchronous beam, with a certified bracket.

    p(x | c) = sum over tokenizations v of x of  prod_t p(v_t | c, v_<t)

(Geh et al., 2024, Problem 2: no EOS; the probability that the LM's next
tokens spell exactly ``x``.) The sweep of :mod:`ppl_tok.strings.beam` runs
over the nodes of the MDD (:func:`ppl_tok.mdd.compile_mdd`) in byte order;
a hypothesis at node ``i`` branches into the MDD's out-edges of ``i``, and a
branch that reaches the sink is a complete tokenization. Then

* ``lower`` = log of the mass of the complete tokenizations found (certified);
* ``upper`` = log of found + the mass of every pruned prefix (certified);
* ``estimate`` = ``lower``: the beam's sum, as genlm-bytes reports it (the
  pruned mass is a bound on what is missing, not an estimate of it);
* ``canonical`` = log p of the canonical tokenization, which the beam always
  keeps, so ``canonical <= lower``;
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
from dataclasses import dataclass
from typing import Any

from ..lm.base import LanguageModel
from ..logspace import logsumexp
from ..mdd import MDD, compile_mdd
from .beam import ByteBeam, StringSearchConfig


@dataclass(frozen=True)
class StringMarginal:
    """A certified bracket ``lower <= log p(text | context) <= upper`` from the byte-synchronous beam.

    :param estimate: the point value (the mass found: ``lower``).
    :param canonical: log p of the canonical tokenization (``<= lower``).
    :param best: the most probable tokenization found, and ``best_log_prob`` its log p.
    :param found: the number of complete tokenizations summed.
    :param forwards: token positions the search ran through the LM (cache hits included).
    :param n_bytes: the length of the text in UTF-8 bytes.
    :param departures: ``((start, end, log m), ...)``: the found mass beyond the
        canonical tokenization, by byte span where it departs (module docstring),
        most massive first; ``single_span_mass`` the log of the part of it in
        tokenizations that depart on one span only (split by nothing).
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

    @property
    def width(self) -> float:
        """``upper - lower`` in nats (0 when nothing was pruned)."""
        return self.upper - self.lower

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
                "departures": [list(d) for d in self.departures], "single_span_mass": self.single_span_mass}


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
    if config.prune_against != "offset":
        raise ValueError(f"string_marginal prunes against the offset only; prune_against={config.prune_against!r} "
                         "is for next-byte walks (StringState)")
    start = time.perf_counter()
    mdd = mdd if mdd is not None else compile_mdd(text, lm.vocab)
    canonical = mdd.canonical()
    beam = ByteBeam(lm, lm.initial(context), config, canonical_offsets(canonical, lm))
    found: dict[tuple[int, ...], float] = {}
    canonical_lp = -math.inf
    for i in sorted(mdd.nodes):
        if i == mdd.sink:
            break
        out = mdd.out_tokens(i)
        hyps = beam.settle(i, out)
        if on_offset is not None:
            on_offset(i)
        if not hyps:
            continue
        tokens = list(out)
        rows = lm.token_log_probs([h.state for h in hyps], [tokens] * len(hyps))
        for h, row in zip(hyps, rows):
            for t, lp in zip(tokens, row.tolist()):
                child = beam.branch(h, i, t, lp)
                if out[t] == mdd.sink:
                    if child.log_prob > -math.inf or child.canonical:
                        path = child.tokens()
                        found[path] = child.log_prob
                        if child.canonical:
                            canonical_lp = child.log_prob
                else:
                    beam.push(out[t], child)
            h.state = None  # its children hold it until they run; the path keeps only the small Hypothesis chain
    lower = logsumexp(found.values())
    upper = max(lower, logsumexp(list(found.values()) + beam.pruned + beam.pending_mass()))
    best = max(found, key=found.__getitem__) if found else canonical
    spans, single = departures(lm.vocab, found, canonical)
    return StringMarginal(text=text, lower=lower, upper=upper, estimate=lower, canonical=canonical_lp, best=best,
                          best_log_prob=found.get(best, -math.inf), found=len(found), forwards=beam.forwards,
                          n_bytes=len(mdd.text), seconds=time.perf_counter() - start,
                          departures=spans, single_span_mass=single)
