"""The scorings: every way ppl-tok turns a text into one log-likelihood, each a registered object.

:mod:`ppl_tok.scorings.registry` holds the registry and the levels (document, pair, question); each scoring
is one module here (one :class:`Scoring` subclass, registered), and this package imports the built-in ones in
report order. A new scoring is one module with one registration (docs/architecture.md, "Adding a scoring").
"""

from ppl_tok.scorings.registry import (ALIASES, DOCUMENT, LEVELS, PAIR, QUESTION, SCORINGS, Scoring, accepted,
                                       classifier_scoring, classifiers, is_defined, names, register, scoring,
                                       unregister)
from ppl_tok.scorings.documents import score_documents
from ppl_tok.scorings.results import DocumentScore
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.pairs import Pair, PairScore

# the built-in scorings, registered as imported, in report order
from ppl_tok.scorings import canonical, importance, beam, events, mixture, canonical_rest  # noqa: E402,F401
from ppl_tok.scorings import exact, stratified, conditional, canonical_lm, most_likely  # noqa: E402,F401

__all__ = ["ALIASES", "DOCUMENT", "LEVELS", "PAIR", "QUESTION", "SCORINGS", "DocumentScore", "Pair", "PairScore",
           "Scoring", "ScoringConfig", "accepted", "classifier_scoring", "classifiers", "is_defined", "names",
           "register", "score_documents", "scoring", "unregister"]
