"""Language models behind one interface: :class:`LanguageModel` (see :mod:`ppl_tok.lm.base`)."""

from ppl_tok.lm.base import LanguageModel, LMState, LMStats
from ppl_tok.lm.config import EngineConfig
from ppl_tok.lm.hf import HFLanguageModel
from ppl_tok.lm.kvpool import KVPool
from ppl_tok.lm.toy import BigramLM, FunctionLM, TableLM

__all__ = ["BigramLM", "EngineConfig", "FunctionLM", "HFLanguageModel", "KVPool", "LMState", "LMStats", "LanguageModel",
           "TableLM"]
