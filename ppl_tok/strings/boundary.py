"""The boundary report: which (context, continuation) requests have a token spanning the join, and what it costs.

An evaluation harness that scores ``log p(continuation | context)`` with the canonical tokens
(lm-eval's ``hf`` model, ppl-tok's ``scoring=canonical``) is exposed to the prompt boundary
where the canonical tokenization of ``context + continuation`` has a token that starts in the
context and ends in the continuation ("Ans" + "wer": ``Answer`` is one token): then the
continuation's tokens are not the string's own, and the score moves with where the delimiter
whitespace sits. For each request, after lm-eval's convention (the context's trailing whitespace
moves to the continuation, :func:`move_trailing_space`), the report gives:

* ``spans_join``: whether a canonical token of ``context + continuation`` crosses the join;
* ``canonical``: ``log p(v*(continuation) | v*(context))`` (each tokenized apart, nats);
* ``conditional``: ``log p(continuation | context)`` over strings with its certified interval
  (:func:`~ppl_tok.strings.conditional.conditionals_many`) under ``event`` (default ``"boundary"``, lm-eval's
  ``scoring=conditional``: the continuation then a boundary character or the end), and ``prefix``, the
  ``"prefix"`` event's figure from the same walk (the output after the context *begins with* the continuation);
* ``moved``: ``conditional - canonical``, and ``moved_prefix``: ``prefix - canonical``;
* ``cause``, for a request whose prefix figure moved by more than ``threshold`` (else ``None``):
  ``"join"`` (a canonical token spans the join), else ``"prefix event"`` (the move is gone under the
  boundary event: ``|moved| <= threshold``; the prefix figure credits the continuation with every longer word
  it begins, " lever" with " levers"), else ``"rest"`` (tokenizations other than the canonical one);

and in all: the requests, those spanning the join, how many moved by more than
``threshold`` nats (default 0.01) among each, with the largest move, and the moves by cause. A benchmark whose
requests rarely span the join and rarely move is one where canonical scores can be trusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.conditional import conditionals_many
from ppl_tok.strings.conditional_event import DEFAULT_EVENT, EVENTS

#: the move in nats past which a request counts as moved
THRESHOLD = 0.01
#: why a request's prefix figure moved (module docstring), in the order they are tested
CAUSES = ("join", "prefix event", "rest")


def move_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's convention: trailing whitespace of the context belongs to the continuation."""
    stripped = context.rstrip()
    return stripped, context[len(stripped):] + continuation


def spans_join(lm: LanguageModel, context: str, continuation: str) -> bool:
    """Whether a canonical token of ``context + continuation`` starts in the context and ends in the continuation."""
    if not context or not continuation:
        return False
    join, at = len(context.encode("utf-8")), 0
    for t in lm.canonical(context + continuation):
        end = at + len(lm.vocab[t] or b"")
        if at < join < end:
            return True
        at = end
    return False


@dataclass(frozen=True)
class BoundaryReport:
    """Per request (``rows``: context, continuation, spans_join, canonical, conditional, lower, upper, moved,
    prefix, moved_prefix, cause) and in all (:meth:`summary`)."""

    rows: list[dict[str, Any]]
    threshold: float = THRESHOLD

    def summary(self) -> dict[str, Any]:
        """Counts: requests, those spanning the join, moved (|moved| > threshold) among all and among those."""
        span = [r for r in self.rows if r["spans_join"]]
        moved = [r for r in self.rows if abs(r["moved"]) > self.threshold]
        return {"requests": len(self.rows), "spanning": len(span), "moved": len(moved),
                "moved_spanning": sum(1 for r in span if abs(r["moved"]) > self.threshold),
                "threshold_nats": self.threshold,
                "max_abs_moved": max((abs(r["moved"]) for r in self.rows), default=0.0),
                "mean_abs_moved_spanning": sum(abs(r["moved"]) for r in span) / len(span) if span else 0.0,
                "moved_prefix": sum(1 for r in self.rows if r["cause"] is not None),
                "moved_prefix_by_cause": {c: sum(1 for r in self.rows if r["cause"] == c) for c in CAUSES}}


def _cause(spans: bool, moved: float, moved_prefix: float, threshold: float) -> str | None:
    """Why the prefix figure moved by more than ``threshold`` (:data:`CAUSES`; ``None``: it did not)."""
    if abs(moved_prefix) <= threshold:
        return None
    return "join" if spans else "prefix event" if abs(moved) <= threshold else "rest"


def boundary_report(lm: LanguageModel, pairs: Sequence[tuple[str, str]], config: StringSearchConfig | None = None,
                    threshold: float = THRESHOLD, event: str = DEFAULT_EVENT) -> BoundaryReport:
    """The report of ``pairs`` (``(context, continuation)``, as lm-eval hands them over) under ``lm``; ``event``:
    the conditional's (``"boundary"``: the prefix figure comes from the same walk; ``"prefix"``: both are it).

    :raises ValueError: an empty continuation, or one the tokenizer cannot encode (named by its index).
    """
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number of nats >= 0, got {threshold!r}")
    if event not in EVENTS:
        raise ValueError(f"event must be one of {', '.join(EVENTS)}, got {event!r}")
    moved_pairs = [move_trailing_space(c, x) for c, x in pairs]
    for i, (_, x) in enumerate(moved_pairs):
        if not x:
            raise ValueError(f"request {i} (counted from 0): the continuation is empty: nothing to score")
    canonical = lm.log_probs_many([lm.canonical(x) for _, x in moved_pairs], [c for c, _ in moved_pairs])
    found = conditionals_many(lm, [c for c, _ in moved_pairs], [x for _, x in moved_pairs],
                              config=config or StringSearchConfig(prefill="canonical-head"), event=event)
    rows = []
    for i, ((c, x), can, r) in enumerate(zip(moved_pairs, canonical, found)):
        prefix = r.estimate if r.prefix_estimate is None else r.prefix_estimate
        span = spans_join(lm, c, x)
        rows.append({"index": i, "context": c, "continuation": x, "spans_join": span, "canonical": can,
                     "conditional": r.estimate, "lower": r.lower, "upper": r.upper, "moved": r.estimate - can,
                     "event": event, "prefix": prefix, "moved_prefix": prefix - can,
                     "cause": _cause(span, r.estimate - can, prefix - can, threshold)})
    return BoundaryReport(rows, threshold)


__all__ = ["CAUSES", "THRESHOLD", "BoundaryReport", "boundary_report", "move_trailing_space", "spans_join"]
