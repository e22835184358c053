"""Language models behind one interface: :class:`LanguageModel` (see :mod:`ppl_tok.lm.base`).

Each name is imported on first use (:mod:`ppl_tok.common.lazy`), so that importing this package (or one of its
light modules: ``spec``, ``cards``' card list, ``backends``' names) imports neither torch nor ``transformers``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ppl_tok.common.lazy import lazy_names

_LAZY: dict[str, str] = {
    **dict.fromkeys(("LanguageModel", "LMState", "LMStats"), "ppl_tok.lm.base"),
    "EngineConfig": "ppl_tok.lm.config",
    "KVPool": "ppl_tok.lm.kvpool",
    **dict.fromkeys(("BigramLM", "FunctionLM", "TableLM"), "ppl_tok.lm.toy"),
    "HFLanguageModel": "ppl_tok.lm.hf",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from ppl_tok.lm.base import LanguageModel, LMState, LMStats
    from ppl_tok.lm.config import EngineConfig
    from ppl_tok.lm.hf import HFLanguageModel
    from ppl_tok.lm.kvpool import KVPool
    from ppl_tok.lm.toy import BigramLM, FunctionLM, TableLM

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
