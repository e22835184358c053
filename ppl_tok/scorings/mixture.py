"""``mixture``: the paper's mixture of the canonical and the non-canonical answer distributions.

For the answers ``j`` of one question (one :attr:`~ppl_tok.scorings.pairs.Pair.group`),
``P_can(j) = p(v*_j | c) / sum_l p(v*_l | c)`` and ``P_non(j) = m_j / sum_l m_l``, ``m_j`` the importance
estimate of answer ``j``'s non-canonical mass; the score is ``log(alpha P_can(j) + (1 - alpha) P_non(j))``
(:func:`ppl_tok.scorings.classify.normalise`; the QA study tunes ``alpha``, lm-eval takes it as a model argument).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.importance import particles
from ppl_tok.scorings.classify import SplitScores, mixture, mixture_scores
from ppl_tok.scorings.pairs import Pair, PairScore, groups
from ppl_tok.common.params import Params, param
from ppl_tok.scorings.registry import PAIR, QUESTION, Scoring, proposal_param, register, samples_param


def weight(text: str) -> float:
    """An argparse type: a weight in ``[0, 1]``."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"expected a finite number in [0, 1], got {text!r}")
    return value


weight.__name__ = "weight"


@dataclass(frozen=True)
class MixtureParams(Params):
    """The particles of ``mixture`` and the canonical distribution's weight."""

    num_samples: int = samples_param()
    alpha: float = param(0.5, "the canonical distribution's weight in [0, 1] (the QA study tunes it)", flag="--alpha",
                         type=weight)
    proposal: dict[str, Any] | None = proposal_param()


@register
class Mixture(Scoring):
    """An answer's probability among its question's answers, not ``log p(x | c)``."""

    name = "mixture"
    estimator = ("importance sampling, split into canonical and non-canonical answer distributions "
                 "(ppl_tok.scorings.mixture.mixture)")
    levels = (PAIR, QUESTION)
    unit = "nats: log-probability of the answer among the question's answers"
    doc = "log(alpha P_can + (1 - alpha) P_non), the paper's mixture (alpha: QA tuned, lm-eval 'alpha')"
    classifiers = ("mixture",)
    params = MixtureParams
    settings_fields = ("num_samples", "alpha")
    record_kind = "is"

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        """Requests of one group (a question's answers) must come in one call: each is normalised over them."""
        results = particles(lm, pairs, config)
        out: list[PairScore] = [PairScore(0.0)] * len(pairs)
        for members in groups(pairs):
            canonical = np.array([[float(results[i].canonical_log_prob) for i in members]])
            rest = np.array([[float(results[i].noncanonical_estimate) for i in members]])
            probs = mixture(canonical, rest, np.ones_like(canonical, dtype=bool), [config.alpha])[0, :, 0]
            with np.errstate(divide="ignore"):
                for i, lp in zip(members, np.log(probs)):
                    out[i] = PairScore(float(lp))
        return out

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """``s_j = alpha P_can(j) + (1 - alpha) P_non(j)`` from the core record, alpha tuned (``alpha_norm`` for
        ``acc_norm``)."""
        return mixture_scores(t, [tuned["alpha_norm" if norm else "alpha"]], norm)[..., 0]
