"""What a scoring returns: a document's figures (:class:`DocumentScore`, also what a perplexity run stores) and
what it reads of a document (:class:`ScoredText`); a request's are :mod:`ppl_tok.scorings.pairs`'."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class ScoredText(Protocol):
    """What a document-level scoring reads of a document (:class:`ppl_tok.perplexity.Document` is one)."""

    index: int
    text: str


@dataclass
class DocumentScore:
    """One document's figures (log-likelihoods in nats).

    ``log_likelihood`` is the scoring's figure; ``canonical`` the canonical
    tokens' log-likelihood under the same windows; ``lower``/``upper`` the
    certified bracket of the marginal (``None`` for ``canonical``, and
    ``upper`` is ``None`` for ``canonical+rest``).
    """

    index: int
    n_bytes: int
    n_words: int
    n_tokens: int
    windows: int
    log_likelihood: float
    canonical: float
    lower: float | None = None
    upper: float | None = None
    forwards: int = 0
    canonical_forwards: int = 0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        from ppl_tok.common.jsonl_store import encode_log

        rec: dict[str, Any] = {"index": self.index, "n_bytes": self.n_bytes, "n_words": self.n_words,
                               "n_tokens": self.n_tokens, "windows": self.windows,
                               "log_likelihood": encode_log(self.log_likelihood),
                               "canonical": encode_log(self.canonical)}
        if self.lower is not None:
            rec["lower"] = encode_log(self.lower)
        if self.upper is not None:
            rec["upper"] = encode_log(self.upper)
        rec.update(forwards=self.forwards, canonical_forwards=self.canonical_forwards, **self.extra)
        return rec

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> DocumentScore:
        from ppl_tok.common.jsonl_store import decode_log

        known = {"index", "n_bytes", "n_words", "n_tokens", "windows", "log_likelihood", "canonical", "lower",
                 "upper", "forwards", "canonical_forwards"}
        return cls(index=rec["index"], n_bytes=rec["n_bytes"], n_words=rec["n_words"], n_tokens=rec["n_tokens"],
                   windows=rec["windows"], log_likelihood=decode_log(rec["log_likelihood"]),
                   canonical=decode_log(rec["canonical"]),
                   lower=decode_log(rec["lower"]) if "lower" in rec else None,
                   upper=decode_log(rec["upper"]) if "upper" in rec else None,
                   forwards=rec.get("forwards", 0), canonical_forwards=rec.get("canonical_forwards", 0),
                   extra={k: v for k, v in rec.items() if k not in known})


def checked_scores(scoring: str, scores: Any, inputs: int, kind: type, what: str) -> list[Any]:
    """A scoring's answer, checked: exactly one ``kind`` (:class:`DocumentScore`,
    :class:`~ppl_tok.scorings.pairs.PairScore`) per input, in a sequence. Every consumer calls a scoring
    through here (``score_documents`` of :mod:`ppl_tok.scorings.documents`, the QA study's and lm-eval's
    ``score_pairs``), so a scoring that returns fewer (bits per byte over fewer documents) or more figures
    than it was given, or something else, is a ``ValueError`` naming the scoring, never a figure over the
    wrong inputs. A small function on its own, so that a registry's one call path can keep it.

    :param what: the inputs' name in the message (``"documents"``, ``"pairs"``).
    """
    if isinstance(scores, (str, bytes, dict)) or not hasattr(scores, "__len__") and not hasattr(scores, "__iter__"):
        raise ValueError(f"scoring {scoring!r} returned a {type(scores).__name__} for {inputs} {what}, not a list "
                         f"of {kind.__name__}: fix its score_{what}")
    out = list(scores)
    if len(out) != inputs:
        raise ValueError(f"scoring {scoring!r} returned {len(out)} scores for {inputs} {what}: a scoring returns "
                         f"one {kind.__name__} per input, in order; fix its score_{what}")
    wrong = next((i for i, s in enumerate(out) if not isinstance(s, kind)), None)
    if wrong is not None:
        raise ValueError(f"scoring {scoring!r} returned a {type(out[wrong]).__name__} for its input {wrong}, not a "
                         f"{kind.__name__}; fix its score_{what}")
    return out
