"""Language models behind one interface: :class:`LanguageModel` (see :mod:`ppl_tok.lm.base`)."""

from .base import EngineConfig, LanguageModel, LMState, LMStats
from .hf import HFLanguageModel
from .kvpool import KVPool
from .toy import BigramLM, FunctionLM, TableLM

__all__ = ["BigramLM", "EngineConfig", "FunctionLM", "HFLanguageModel", "KVPool", "LMState", "LMStats", "LanguageModel",
           "TableLM"]
