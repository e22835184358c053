"""ppl-tok: tokenization as a probabilistic program.

Geh et al. (2024), "Where is the signal in tokenization space?": a string has
exponentially many tokenizations; an LM induces a distribution over them. This
package compiles them into an MDD (:mod:`ppl_tok.mdd`) over byte-exact
vocabularies (:mod:`ppl_tok.vocabulary`) and scores them with LMs behind one
small interface (:mod:`ppl_tok.lm`).
"""

from ppl_tok.lm.cards import ModelCard, ModelNotFoundError, list_cards, load_lm, load_vocabulary
from ppl_tok.lm.spec import DEFAULT_MODEL, LMSpec
from ppl_tok.lm import BigramLM, FunctionLM, HFLanguageModel, LanguageModel, LMState, TableLM
from ppl_tok.mdd import MDD, NoTokenizationError, compile_mdd, compile_mdd_naive
from ppl_tok.vocabulary import ByteFallback, Vocabulary
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.infer.importance import marginal
from ppl_tok.infer.search import marginal_bounds, marginal_bounds_many, most_likely

from ppl_tok.common.version import __version__

__all__ = [
    "DEFAULT_MODEL", "MDD", "BigramLM", "ByteFallback", "FunctionLM", "HFLanguageModel", "LMSpec", "LMState",
    "LanguageModel", "ModelCard", "ModelNotFoundError", "NoTokenizationError", "TableLM", "Vocabulary",
    "compile_mdd", "compile_mdd_naive", "exact_marginal", "list_cards", "load_lm", "load_vocabulary", "marginal",
    "marginal_bounds", "marginal_bounds_many", "most_likely", "__version__",
]
