"""Language models behind one interface: :class:`LanguageModel` (see :mod:`ppl_tok.lm.base`).

:class:`HFLanguageModel` (the ``transformers`` backend) is imported on first use, so that importing this
package does not import ``transformers``."""

from typing import Any

from ppl_tok.lm.base import LanguageModel, LMState, LMStats
from ppl_tok.lm.config import EngineConfig
from ppl_tok.lm.kvpool import KVPool
from ppl_tok.lm.toy import BigramLM, FunctionLM, TableLM

__all__ = ["BigramLM", "EngineConfig", "FunctionLM", "HFLanguageModel", "KVPool", "LMState", "LMStats", "LanguageModel",
           "TableLM"]


def __getattr__(name: str) -> Any:
    if name == "HFLanguageModel":
        from ppl_tok.lm.hf import HFLanguageModel
        return HFLanguageModel
    raise AttributeError(f"module 'ppl_tok.lm' has no attribute {name!r}")
