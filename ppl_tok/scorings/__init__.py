"""The scorings: every way ppl-tok turns a text into one log-likelihood, each a registered object.

See :mod:`ppl_tok.scorings.registry` (the registry and the levels) and docs/architecture.md ("Adding a scoring").
"""

from ppl_tok.scorings.registry import (ALIASES, DOCUMENT, LEVELS, PAIR, QUESTION, SCORINGS, Scoring, accepted,
                                       classifier_scoring, classifiers, is_defined, names, scoring)

__all__ = ["ALIASES", "DOCUMENT", "LEVELS", "PAIR", "QUESTION", "SCORINGS", "Scoring", "accepted",
           "classifier_scoring", "classifiers", "is_defined", "names", "scoring"]
