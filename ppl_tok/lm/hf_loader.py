"""The ``transformers`` backend: an :class:`~ppl_tok.lm.spec.LMSpec` loaded as an
:class:`~ppl_tok.lm.hf.HFLanguageModel` (registered as ``"transformers"`` in :mod:`ppl_tok.lm.backends`).

The spec's model is a card, a local model folder or a hub id (:mod:`ppl_tok.lm.cards` finds the files);
the weights go straight onto the spec's device in its dtype, a half-precision model gets an fp32 LM head,
and the BOS id is the spec's, else the card's (or the one a folder converted by ppl-tok records), else
:func:`ppl_tok.lm.bos.scoring_bos`'s (a known card's vocabulary, the tokenizer's post-processor, its
``bos_token``; with a warning where they disagree). ``transformers``' own progress bars
(checkpoint shards) are switched off: a command's progress is its own work, on standard error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ppl_tok.lm.bos import default_bos
from ppl_tok.lm.cards import _check_folder, _convert, _from_pretrained, _manifest, _resolve
from ppl_tok.lm.spec import LMSpec
from ppl_tok.vocabulary import Vocabulary


def load_transformers(spec: LMSpec, *, config: Any = None, head_fp32: bool = True, **options: Any) -> Any:
    """The :class:`~ppl_tok.lm.hf.HFLanguageModel` that ``spec`` names (see :func:`ppl_tok.lm.cards.load_lm`).

    :param config: the engine's limits (:class:`~ppl_tok.lm.config.EngineConfig`; default:
        :meth:`~ppl_tok.lm.config.EngineConfig.for_device`).
    :param head_fp32: a bf16/fp16 model computes its logits with an fp32 copy of its LM head
        (:func:`~ppl_tok.lm.hf.fp32_head`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from ppl_tok.lm.device import resolve_device, resolve_dtype
    from ppl_tok.lm.hf import HFLanguageModel, fp32_head

    dev = resolve_device(spec.device) if spec.device is not None else None
    card, where = _resolve(spec.model)
    torch_dtype = resolve_dtype(spec.dtype if spec.dtype is not None else (card.dtype if card else "float32"))
    if card is not None and card.kind != "hub":
        where = str(_convert(card, "model"))
    elif card is not None:
        where = card.repo  # type: ignore[assignment]
    if Path(where).is_dir():
        _check_folder(Path(where), need_model=True)
    hf_logging.disable_progress_bar()  # "Loading checkpoint shards" and the like: ppl-tok's own bars say what runs
    tokenizer = _from_pretrained(AutoTokenizer, where, "tokenizer")
    # straight onto the device in the requested dtype (no full-precision copy on the host first)
    placement = {"device_map": dev} if dev is not None and dev.type != "cpu" else {}
    model = _from_pretrained(AutoModelForCausalLM, where, "model", dtype=torch_dtype, **placement)
    if dev is not None and next(model.parameters()).device != dev:
        model = model.to(dev)
    if head_fp32:
        fp32_head(model)
    recorded = _manifest(Path(where)) if card is None and Path(where).is_dir() else {}
    bos_id = spec.bos_id
    if bos_id is None:
        bos_id = default_bos(card, where, tokenizer)
    name = card.name if card else recorded.get("card") or spec.model
    vocab = Vocabulary.from_hf(tokenizer, name=name)
    return HFLanguageModel(model, tokenizer, bos_id, vocab=vocab, name=name, config=config)
