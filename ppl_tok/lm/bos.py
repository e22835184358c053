"""The BOS a local folder or hub id is scored after, when no model card names one.

A folder that ``save_pretrained`` wrote (a fine-tune, a conversion) carries only its tokenizer's
word for the BOS, and tokenizers disagree with how their models were trained: SmolLM2's declares
``<|im_start|>`` (its model card scores after ``<|endoftext|>``); a Qwen3-style tokenizer's
post-processor prepends another token than its ``bos_token`` attribute; a Qwen2-style one has none.
The rule, first match wins (``transformers``' own pipeline is what the model was fed):

1. the vocabulary is a known card's (its first ``vocab_size`` pieces hash to the card's
   ``vocab_sha256``): the card's BOS, with a warning naming the card;
2. the token the tokenizer's post-processor prepends (``tokenizer("a")`` against the same text
   without special tokens), with a warning where ``bos_token_id`` names another one;
3. ``bos_token_id``;
4. none: context-free scores need ``bos_id=`` / ``--bos-id`` (:data:`NO_BOS`).
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

from ppl_tok.lm.cards import ModelCard, _manifest, list_cards

#: the error a context-free score gives without a BOS (the fix named)
NO_BOS = ("{name} has no BOS token to score the first token after: give a context, or the BOS id with "
          "bos_id= (load_lm) / --bos-id (the command line)")


class BOSWarning(UserWarning):
    """The BOS ppl-tok scores after differs from what the tokenizer declares."""


def vocabulary_sha256(tokenizer: Any, size: int) -> str | None:
    """sha256 of the pieces of ids ``0 .. size-1``, one a line (``None``: the vocabulary is smaller or has holes).

    Pieces beyond ``size`` (tokens a fine-tune added) do not count: the vocabulary stays the card's.
    """
    pieces: list[str | None] = [None] * size
    for piece, i in tokenizer.get_vocab().items():
        if 0 <= i < size:
            pieces[i] = piece
    if any(p is None for p in pieces):
        return None
    return hashlib.sha256("\n".join(pieces).encode("utf-8")).hexdigest()  # type: ignore[arg-type]


def pipeline_bos(tokenizer: Any) -> int | None:
    """The token the tokenizer's own pipeline (its post-processor) puts before a text, or ``None``.

    Read off ``tokenizer("a")`` against ``tokenizer("a", add_special_tokens=False)``: what the first has
    before the second. More than one token (a chat prefix) or nothing: ``None``.
    """
    try:
        plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
        full = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    except Exception:  # a tokenizer that cannot encode alone: no pipeline to read
        return None
    if len(full) == len(plain) + 1 and full[1:] == plain:
        return int(full[0])
    return None


def _label(tokenizer: Any, token_id: int | None) -> str:
    if token_id is None:
        return "none"
    try:
        return f"{tokenizer.convert_ids_to_tokens(int(token_id))} ({token_id})"
    except Exception:
        return str(token_id)


def scoring_bos(tokenizer: Any, cards: Any = ()) -> tuple[int | None, str]:
    """The BOS id to score after and where it came from (the module's rule); warns (:class:`BOSWarning`) where
    the tokenizer declares another one. ``cards``: the model cards whose vocabulary may match."""
    declared = getattr(tokenizer, "bos_token_id", None)
    for card in cards:
        if card.vocab_sha256 and card.vocab_size and card.bos_id is not None \
                and vocabulary_sha256(tokenizer, card.vocab_size) == card.vocab_sha256:
            if declared != card.bos_id:
                warnings.warn(f"this tokenizer has the vocabulary of the card {card.name!r}: scoring after its BOS "
                              f"{_label(tokenizer, card.bos_id)}, not the tokenizer's {_label(tokenizer, declared)} "
                              "(give bos_id= / --bos-id to choose)", BOSWarning, stacklevel=3)
            return card.bos_id, f"card {card.name} (same vocabulary)"
    prepended = pipeline_bos(tokenizer)
    if prepended is not None:
        if declared is not None and declared != prepended:
            warnings.warn(f"the tokenizer's pipeline prepends {_label(tokenizer, prepended)} but its bos_token is "
                          f"{_label(tokenizer, declared)}: scoring after the prepended one, as transformers feeds "
                          "the model (give bos_id= / --bos-id to choose)", BOSWarning, stacklevel=3)
        return prepended, "the tokenizer's post-processor"
    if declared is not None:
        return int(declared), "the tokenizer's bos_token"
    return None, "none"


def default_bos(card: ModelCard | None, where: str, tokenizer: Any) -> int | None:
    """The BOS of a card, else the one a folder converted by ppl-tok records (``ppl-tok-manifest.json``), else
    :func:`scoring_bos` over every card (``where``: the folder or hub id the tokenizer came from)."""
    if card is not None:
        return card.bos_id
    recorded = _manifest(Path(where)) if where and Path(where).is_dir() else {}
    if "bos_id" in recorded:
        return recorded["bos_id"]
    return scoring_bos(tokenizer, list_cards().values())[0]
