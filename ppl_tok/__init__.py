"""ppl-tok: tokenization as a probabilistic program.

Geh et al. (2024), "Where is the signal in tokenization space?": a string has
exponentially many tokenizations; an LM induces a distribution over them. This
package compiles them into an MDD (:mod:`ppl_tok.mdd`) over byte-exact
vocabularies (:mod:`ppl_tok.vocabulary`) and scores them with LMs behind one
small interface (:mod:`ppl_tok.lm`).

The entry points, by question:

* an LM: :func:`load_lm` (a card, a folder or a hub id), :func:`load_vocabulary`, :class:`LMSpec`;
* the tokenizations of a string: :func:`compile_mdd` (count, enumerate, sample, the canonical one);
* the Pyro program: :func:`tokenization_model` (the model) and the proposals as guides
  (:func:`lookahead_guide`, :func:`uniform_guide`, :class:`StratifiedGuide`, and :func:`mdd_guide` to make one
  from a proposal such as :func:`lookahead`), used with ``pyro.infer``;
* the estimators (:mod:`ppl_tok.infer`): :func:`exact_marginal`, :func:`marginal`, :func:`marginal_bounds`,
  :func:`most_likely`, :func:`smc_marginal`;
* the LM over strings (:mod:`ppl_tok.strings`): :func:`string_marginal`, :func:`string_conditional`,
  :func:`initial` (prefix probabilities and next bytes).

``import ppl_tok`` does not import ``transformers``: it is imported when a model is loaded
(:func:`load_lm`) or :class:`HFLanguageModel` is first named.
"""

from typing import Any

from ppl_tok.lm.cards import ModelCard, ModelNotFoundError, list_cards, load_lm, load_vocabulary
from ppl_tok.lm.spec import DEFAULT_MODEL, LMSpec
from ppl_tok.lm import BigramLM, FunctionLM, LanguageModel, LMState, TableLM
from ppl_tok.mdd import MDD, NoTokenizationError, compile_mdd, compile_mdd_naive
from ppl_tok.vocabulary import ByteFallback, Vocabulary
from ppl_tok.model import tokenization_model
from ppl_tok.proposals import StratifiedGuide, lookahead, lookahead_guide, mdd_guide, uniform, uniform_guide
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.importance import marginal, marginals
from ppl_tok.infer.search import marginal_bounds, marginal_bounds_many, most_likely
from ppl_tok.infer.smc import smc_marginal
from ppl_tok.strings import StringSearchConfig, initial, string_conditional, string_marginal

from ppl_tok.common.version import __version__

__all__ = [
    "DEFAULT_MODEL", "MDD", "BigramLM", "ByteFallback", "FunctionLM", "HFLanguageModel", "LMSpec", "LMState",
    "LanguageModel", "ModelCard", "ModelNotFoundError", "NoTokenizationError", "StratifiedGuide", "StringSearchConfig",
    "TableLM", "Vocabulary", "compile_mdd", "compile_mdd_naive", "exact_marginal", "initial", "list_cards", "load_lm",
    "load_vocabulary", "lookahead", "lookahead_guide", "marginal", "marginal_bounds", "marginal_bounds_many", "marginals", "mdd_guide",
    "most_likely", "smc_marginal", "string_conditional", "string_marginal", "tokenization_model", "uniform", "uniform_guide",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """``HFLanguageModel`` on first use, so that ``import ppl_tok`` leaves ``transformers`` unimported."""
    if name == "HFLanguageModel":
        from ppl_tok.lm.hf import HFLanguageModel
        return HFLanguageModel
    raise AttributeError(f"module 'ppl_tok' has no attribute {name!r}")
