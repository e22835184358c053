"""Language models behind one interface: :class:`LanguageModel` (see :mod:`ppl_tok.lm.base`)."""

from .base import LanguageModel, LMState, LMStats
from .hf import HFLanguageModel
from .toy import BigramLM, FunctionLM, TableLM

__all__ = ["BigramLM", "FunctionLM", "HFLanguageModel", "LMState", "LMStats", "LanguageModel", "TableLM"]
