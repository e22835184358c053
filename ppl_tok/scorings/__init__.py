"""The scorings: every way ppl-tok turns a text into one log-likelihood, each a registered object.

:mod:`ppl_tok.scorings.registry` holds the registry and the levels (document, pair, question); each scoring
is one module here (one :class:`Scoring` subclass, registered); the registry imports the built-in ones
(:data:`~ppl_tok.scorings.registry.BUILT_IN`, in report order) on its first use, and this package names its
entry points lazily (:mod:`ppl_tok.common.lazy`), so that reading a scoring's name imports no torch.
A new scoring is one module with one registration (docs/architecture.md, "Adding a scoring").
"""

from typing import TYPE_CHECKING

from ppl_tok.common.lazy import lazy_names

#: each public name -> its module, imported on first use (:mod:`ppl_tok.common.lazy`)
_LAZY: dict[str, str] = {
    "ALIASES": "ppl_tok.scorings.registry",
    "DOCUMENT": "ppl_tok.scorings.registry",
    "LEVELS": "ppl_tok.scorings.registry",
    "PAIR": "ppl_tok.scorings.registry",
    "QUESTION": "ppl_tok.scorings.registry",
    "SCORINGS": "ppl_tok.scorings.registry",
    "Scoring": "ppl_tok.scorings.registry",
    "accepted": "ppl_tok.scorings.registry",
    "classifier_scoring": "ppl_tok.scorings.registry",
    "classifiers": "ppl_tok.scorings.registry",
    "is_defined": "ppl_tok.scorings.registry",
    "names": "ppl_tok.scorings.registry",
    "register": "ppl_tok.scorings.registry",
    "scoring": "ppl_tok.scorings.registry",
    "unregister": "ppl_tok.scorings.registry",
    "score_documents": "ppl_tok.scorings.documents",
    "DocumentScore": "ppl_tok.scorings.results",
    "ScoringConfig": "ppl_tok.scorings.registry",
    "Pair": "ppl_tok.scorings.pairs",
    "PairScore": "ppl_tok.scorings.pairs",
}

if TYPE_CHECKING:
    from ppl_tok.scorings.registry import (ALIASES, DOCUMENT, LEVELS, PAIR, QUESTION, SCORINGS, Scoring, accepted,
                                           classifier_scoring, classifiers, is_defined, names, register, scoring,
                                           unregister)
    from ppl_tok.scorings.documents import score_documents
    from ppl_tok.scorings.results import DocumentScore
    from ppl_tok.scorings.registry import ScoringConfig
    from ppl_tok.scorings.pairs import Pair, PairScore

__all__ = ["ALIASES", "DOCUMENT", "LEVELS", "PAIR", "QUESTION", "SCORINGS", "DocumentScore", "Pair", "PairScore",
           "Scoring", "ScoringConfig", "accepted", "classifier_scoring", "classifiers", "is_defined", "names",
           "register", "score_documents", "scoring", "unregister"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
