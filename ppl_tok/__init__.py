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

``import ppl_tok`` imports neither torch, pyro, networkx nor ``transformers``: each public name imports its
module when it is first used (``ppl_tok.load_lm``, ``ppl_tok.marginal``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ppl_tok.common.lazy import lazy_names
from ppl_tok.common.version import __version__

#: each public name -> the module that defines it, imported on first use (PEP 562), so that ``import ppl_tok``
#: imports neither torch, pyro, networkx nor transformers (``python -m benchmarks startup`` measures it)
_LAZY: dict[str, str] = {
    **dict.fromkeys(("ModelCard", "ModelNotFoundError", "list_cards", "load_lm", "load_vocabulary"), "ppl_tok.lm.cards"),
    **dict.fromkeys(("DEFAULT_MODEL", "LMSpec"), "ppl_tok.lm.spec"),
    **dict.fromkeys(("LanguageModel", "LMState"), "ppl_tok.lm.base"),
    **dict.fromkeys(("BigramLM", "FunctionLM", "TableLM"), "ppl_tok.lm.toy"),
    "HFLanguageModel": "ppl_tok.lm.hf",
    **dict.fromkeys(("MDD", "NoTokenizationError", "compile_mdd", "compile_mdd_naive"), "ppl_tok.mdd"),
    **dict.fromkeys(("ByteFallback", "Vocabulary"), "ppl_tok.vocabulary"),
    "tokenization_model": "ppl_tok.model",
    **dict.fromkeys(("StratifiedGuide", "lookahead", "lookahead_guide", "mdd_guide", "uniform", "uniform_guide"),
                    "ppl_tok.proposals"),
    "exact_marginal": "ppl_tok.infer.exact",
    **dict.fromkeys(("marginal", "marginals"), "ppl_tok.infer.importance"),
    **dict.fromkeys(("marginal_bounds", "marginal_bounds_many", "most_likely"), "ppl_tok.infer.search"),
    "smc_marginal": "ppl_tok.infer.smc",
    "StringSearchConfig": "ppl_tok.strings.beam",
    **dict.fromkeys(("initial", "string_conditional", "string_marginal"), "ppl_tok.strings"),
}

__all__ = [*sorted(_LAZY), "__version__"]

if TYPE_CHECKING:  # what a type checker and an IDE see; at run time each name is imported on first use
    from ppl_tok.lm.cards import ModelCard, ModelNotFoundError, list_cards, load_lm, load_vocabulary
    from ppl_tok.lm.spec import DEFAULT_MODEL, LMSpec
    from ppl_tok.lm.base import LanguageModel, LMState
    from ppl_tok.lm.toy import BigramLM, FunctionLM, TableLM
    from ppl_tok.lm.hf import HFLanguageModel
    from ppl_tok.mdd import MDD, NoTokenizationError, compile_mdd, compile_mdd_naive
    from ppl_tok.vocabulary import ByteFallback, Vocabulary
    from ppl_tok.model import tokenization_model
    from ppl_tok.proposals import StratifiedGuide, lookahead, lookahead_guide, mdd_guide, uniform, uniform_guide
    from ppl_tok.infer.exact import exact_marginal
    from ppl_tok.infer.importance import marginal, marginals
    from ppl_tok.infer.search import marginal_bounds, marginal_bounds_many, most_likely
    from ppl_tok.infer.smc import smc_marginal
    from ppl_tok.strings import StringSearchConfig, initial, string_conditional, string_marginal

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
