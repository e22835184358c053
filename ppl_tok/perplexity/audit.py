"""The byte-accounting audit: the bytes a per-token byte table claims for a corpus against its exact UTF-8 bytes.

Training and evaluation code often computes bits per byte as

    bpb = sum over tokens of -log2 p(v_i | v_<i)  /  sum over tokens of table[v_i],

with ``table`` a per-token byte count built once from the vocabulary. The denominator
should be the corpus' own bytes, ``B = sum over documents of len(text.encode("utf-8"))``.
ppl-tok knows every token's exact bytes (:class:`~ppl_tok.vocabulary.Vocabulary`), so for a
corpus tokenized canonically (``v* = lm.canonical(text)``, whose surfaces spell the text byte for
byte) it splits the table's error token by token:

    claimed - B = sum over tokens of (table[v] - |surface(v)|),

and files each token's term under its **cause**:

* ``leading-space``: a token that starts with the leading-space marker (SentencePiece ``▁``;
  byte-level BPE ``Ġ``); the public bugs count the marker as 0 bytes (no standalone ``▁``
  token to carry the space: an undercount of about one byte per word) or as the marker's own
  UTF-8 (3 bytes for ``▁``, 2 for ``Ġ``) or twice;
* ``byte-fallback``: a byte piece ``<0xNN>`` (1 byte; counted as its name, 6, by some tables);
* ``partial-utf8``: a token whose bytes are not valid UTF-8 alone (half a character); decoding
  it alone with replacement gives U+FFFD, 3 bytes, where the token holds 1 or 2;
* ``special``: a token without a surface (the BOS each document is scored after, given
  ``bos_id``, as training streams hold it): 0 bytes of the text;
* ``other``: any other token the table miscounts.

A table is **flagged** when ``claimed != B``; a correct table (:func:`exact_byte_table`) agrees
to the byte. With an LM, the canonical bits per byte is reported over both denominators.

Tables are read (:func:`read_byte_table`) from the shapes those repositories use: a JSON list
(or ``{"bytes": [...]}``) per token id, a NumPy ``.npy`` array or a PyTorch tensor file
(``.pt``/``.pth``, loaded with ``weights_only``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppl_tok.vocabulary import Vocabulary

#: the causes an error is filed under, in report order
CAUSES = ("leading-space", "byte-fallback", "partial-utf8", "special", "other")


def exact_byte_table(vocab: Vocabulary) -> list[int]:
    """The correct table: each token's exact bytes (0 for a token without a surface)."""
    return [0 if s is None else len(s) for s in vocab.surfaces]


def cause_of(vocab: Vocabulary, token_id: int, claimed: int | None = None) -> str:
    """The cause a miscount of ``token_id`` is filed under (module docstring), by what the token is.

    A token both space-led and not UTF-8 alone (byte-level BPE's ``"Ġð"``) is ``partial-utf8`` when the
    table counts it as its replacement-decoded text does (``claimed``), else ``leading-space``.
    """
    surface = vocab.surfaces[token_id]
    if surface is None:
        return "special"
    if token_id in vocab.byte_fallback_ids:
        return "byte-fallback"
    try:
        surface.decode("utf-8")
        partial = False
    except UnicodeDecodeError:
        partial = True
    if partial and (not surface.startswith(b" ")
                    or claimed == len(surface.decode("utf-8", "replace").encode("utf-8"))):
        return "partial-utf8"
    if surface.startswith(b" "):  # its name starts with the marker (SentencePiece's, byte-level BPE's)
        return "leading-space"
    return "other"


def read_byte_table(path: str | Path, size: int | None = None) -> list[int]:
    """A per-token byte table from a JSON list (or an object with a ``bytes`` list), ``.npy`` or ``.pt``/``.pth``
    (a tensor, a list, or a dict with a ``bytes`` entry).

    :param size: the vocabulary's size: the table must have one entry per token id.
    :raises ValueError: unreadable, not a flat list, an entry that is not a whole number >= 0 (``inf``, NaN,
        ``-1``, ``2.5``, a string: the file and the entry named), or the wrong length.
    """
    path = Path(path)
    try:
        if path.suffix in (".pt", ".pth"):
            import torch

            values: Any = torch.load(path, map_location="cpu", weights_only=True)
            values = values.get("bytes", values) if isinstance(values, dict) else values
            values = values.tolist() if isinstance(values, torch.Tensor) else values
        elif path.suffix == ".npy":
            import numpy as np

            values = np.load(path, allow_pickle=False).tolist()
        else:
            values = json.loads(path.read_text(encoding="utf-8"))
            values = values.get("bytes") if isinstance(values, dict) else values
    except (OSError, ValueError, RuntimeError, EOFError) as err:
        raise ValueError(f"byte table {path}: cannot read it ({err}); give a JSON list, a .npy array or a .pt "
                         "tensor with one byte count per token id") from None
    if isinstance(values, tuple):
        values = list(values)
    if not isinstance(values, list):
        raise ValueError(f"byte table {path}: holds a value of type {type(values).__name__}, not a flat list of byte "
                         "counts "
                         "(a JSON list or {\"bytes\": [...]}, a 1-D .npy array, a 1-D .pt tensor or list), one per "
                         "token id")
    for i, v in enumerate(values):
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not number or not math.isfinite(v) or v < 0 or v != int(v):
            what = "a whole number >= 0" if number else f"a number, not a {type(v).__name__}"
            raise ValueError(f"byte table {path}: entry {i} (token id {i}) is {v!r}; each entry must be {what}: "
                             "the bytes of that token")
    if size is not None:
        check_table_size(path, values, size)
    return [int(v) for v in values]


def check_table_size(path: str | Path, table: Sequence[Any], size: int) -> None:
    """A table read from ``path`` has one entry per token id of a vocabulary of ``size`` (else a ``ValueError``
    naming it)."""
    if len(table) != size:
        raise ValueError(f"byte table {path}: {len(table)} entries for a vocabulary of {size} token ids; "
                         "build it from the same tokenizer")


@dataclass(frozen=True)
class ByteAudit:
    """The audit of one table on one corpus.

    :param exact_bytes: ``sum len(text.encode("utf-8"))``.
    :param claimed_bytes: the table's sum over the canonical tokens (``None`` without a table).
    :param tokens: canonical tokens in the corpus.
    :param by_cause: ``{cause: claimed - exact over the tokens of that cause}`` (non-zero causes only).
    :param examples: ``{cause: [(token name, table's count, exact bytes), ...]}``, up to 3 each.
    :param nats: ``-sum log p(v*)`` of the corpus under an LM (``None`` without one).
    """

    documents: int
    exact_bytes: int
    tokens: int
    claimed_bytes: int | None = None
    by_cause: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    nats: float | None = None

    @property
    def flagged(self) -> bool:
        """Whether the table's bytes differ from the exact ones."""
        return self.claimed_bytes is not None and self.claimed_bytes != self.exact_bytes

    @property
    def bits_per_byte(self) -> float | None:
        """Canonical bits per byte over the exact bytes (with an LM)."""
        return None if self.nats is None else self.nats / math.log(2) / self.exact_bytes

    @property
    def claimed_bits_per_byte(self) -> float | None:
        """Canonical bits per byte over the table's bytes (what the audited code reports)."""
        if self.nats is None or not self.claimed_bytes:
            return None
        return self.nats / math.log(2) / self.claimed_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"documents": self.documents, "tokens": self.tokens, "exact_bytes": self.exact_bytes,
                "claimed_bytes": self.claimed_bytes,
                "difference": None if self.claimed_bytes is None else self.claimed_bytes - self.exact_bytes,
                "flagged": self.flagged, "by_cause": dict(self.by_cause),
                "examples": {k: [list(e) for e in v] for k, v in self.examples.items()},
                "bits_per_byte": self.bits_per_byte, "claimed_bits_per_byte": self.claimed_bits_per_byte}


def audit_bytes(vocab: Vocabulary, texts: Sequence[str], table: Sequence[int] | None = None, lm: Any = None,
                bos_id: int | None = None) -> ByteAudit:
    """Audit ``table`` (or just count, without one) on ``texts``, canonically tokenized by ``vocab``.

    :param bos_id: a token each document's stream starts with (BOS), counted with the table as the audited
        code counts it (its exact bytes: 0); ``None``: the canonical tokens alone.
    :param lm: an LM over the same vocabulary (:class:`~ppl_tok.lm.base.LanguageModel`): adds the canonical
        bits per byte over the exact and the claimed bytes.
    :raises ValueError: an empty corpus or text, a table of the wrong length, or canonical tokens that do not
        spell their text (the table's comparison would be meaningless).
    """
    texts = list(texts)
    if not texts or any(not isinstance(t, str) or not t for t in texts):
        raise ValueError("the corpus must hold at least one document, none empty")
    if table is not None and len(table) != len(vocab):
        raise ValueError(f"the byte table has {len(table)} entries for a vocabulary of {len(vocab)} token ids")
    exact = sum(len(t.encode("utf-8")) for t in texts)
    ids = [vocab.encode(t) for t in texts]  # raises if the tokens do not spell the text
    if bos_id is not None and not 0 <= bos_id < len(vocab):
        raise ValueError(f"bos_id {bos_id} is not a token id of the vocabulary (0..{len(vocab) - 1})")
    counts: dict[int, int] = {} if bos_id is None else {bos_id: len(ids)}
    for doc in ids:
        for t in doc:
            counts[t] = counts.get(t, 0) + 1
    by_cause: dict[str, int] = {}
    examples: dict[str, list[tuple[str, int, int]]] = {}
    claimed = None
    if table is not None:
        claimed = sum(int(table[t]) * n for t, n in counts.items())
        for t, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            true = len(vocab.surfaces[t] or b"")
            if int(table[t]) != true:
                cause = cause_of(vocab, t, int(table[t]))
                by_cause[cause] = by_cause.get(cause, 0) + (int(table[t]) - true) * n
                if len(examples.setdefault(cause, [])) < 3:
                    examples[cause].append((vocab.token_name(t), int(table[t]), true))
    nats = None
    if lm is not None:
        nats = -sum(lm.log_probs_many(ids, [""] * len(ids)))
    order = {c: i for i, c in enumerate(CAUSES)}
    return ByteAudit(documents=len(texts), exact_bytes=exact, tokens=sum(counts.values()), claimed_bytes=claimed,
                     by_cause=dict(sorted(by_cause.items(), key=lambda kv: order[kv[0]])),
                     examples=dict(sorted(examples.items(), key=lambda kv: order[kv[0]])), nats=nats)


__all__ = ["CAUSES", "ByteAudit", "audit_bytes", "cause_of", "check_table_size", "exact_byte_table",
           "read_byte_table"]
