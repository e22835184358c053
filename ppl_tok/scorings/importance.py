"""``importance``: the importance-sampling estimate of ``log p(x | c)``, look-ahead proposal.

``log (1/N) sum_i p(v_i | c) / q(v_i)`` over ``N = num_samples`` particles drawn from the look-ahead
proposal (:func:`ppl_tok.infer.importance.marginals`), seeded per request (:attr:`Pair.seed`). The QA
study's ``marginal`` classifier uses the first ``k`` particles (``k`` tuned), ``marginal-all`` all ``N``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.classify import SplitScores, marginal_scores
from ppl_tok.scorings.pairs import Pair, PairScore, canonical_tokens
from ppl_tok.common.params import Params
from ppl_tok.scorings.registry import PAIR, QUESTION, Scoring, proposal_param, register, samples_param


def particles(lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig, guide: Any = None) -> list[Any]:
    """The importance-sampling results of the pairs (:attr:`ScoringConfig.num_samples` particles each, seeded
    per pair), every continuation checked for a canonical tokenization first (a clear error before sampling).

    ``guide``: the proposal (default: the config's, :func:`ppl_tok.proposals.settings_guide`; the look-ahead
    where it names none)."""
    from ppl_tok.infer.importance import marginals
    from ppl_tok.proposals import settings_guide

    if guide is None:
        guide = settings_guide(config.proposal or {})
    for p in pairs:
        canonical_tokens(lm, p)
    return marginals([p.continuation for p in pairs], lm, config.num_samples, contexts=[p.context for p in pairs],
                     guide=guide, seeds=[p.seed for p in pairs])


@dataclass(frozen=True)
class ImportanceParams(Params):
    """The particles of ``importance``: how many and their proposal (each request carries its seed)."""

    num_samples: int = samples_param()
    proposal: dict[str, Any] | None = proposal_param()


@register
class Importance(Scoring):
    """Plain importance sampling (the paper's estimator)."""

    name = "importance"
    estimator = "importance sampling, look-ahead proposal (ppl_tok.infer.importance.marginals)"
    levels = (PAIR, QUESTION)
    doc = ("log mean(p(v_i) / q(v_i)): the importance-sampling estimate of log p(x | c) over N particles "
           "(QA: 'marginal' uses the first k, k tuned; 'marginal-all' all N)")
    classifiers = ("marginal", "marginal-all")
    params = ImportanceParams
    settings_fields = ("num_samples",)
    record_kind = "is"

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        return [PairScore(float(r.log_marginal)) for r in particles(lm, pairs, config)]

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """``s_j = log (1/k) sum_{i<=k} w_ij`` over the core record's particles: the first classifier (``marginal``)
        with the tuned k (``k_norm`` for ``acc_norm``), the second (``marginal-all``) with all N."""
        k = tuned["k_norm" if norm else "k"] if classifier == self.classifiers[0] else None
        return marginal_scores(t, k, norm)

    def question_columns(self, t: SplitScores) -> dict[str, np.ndarray]:
        return {"marginal_log_estimates": marginal_scores(t)}
