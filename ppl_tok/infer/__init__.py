"""Estimators over tokenizations, one algorithm per module (as Pyro's ``infer``): exact enumeration
(``exact``), importance sampling (``importance``), certified bounds and branch and bound (``search``), SMC (``smc``),
posteriors (``posterior``) and what an estimate can be trusted for (``diagnostics``).

Each estimator takes a text and a :class:`~ppl_tok.lm.base.LanguageModel`; the names below are the public ones."""

from ppl_tok.infer.diagnostics import (certified_error, ess, estimate_checks, estimate_warnings, log_mean_exp,
                                       log_standard_error, normalized_weights, psis_khat)
from ppl_tok.infer.exact import ExactMarginal, TimeBudgetExceeded, exact_marginal
from ppl_tok.infer.importance import MarginalResult, TokenizationImportance, importance_weights, marginal, marginals
from ppl_tok.infer.posterior import TokenizationPosterior, tokenization_posterior
from ppl_tok.infer.search import Bounds, MostLikely, marginal_bounds, marginal_bounds_many, most_likely
from ppl_tok.infer.smc import smc_marginal, smc_marginals

__all__ = [
    "Bounds", "ExactMarginal", "MarginalResult", "MostLikely", "TimeBudgetExceeded", "TokenizationImportance",
    "TokenizationPosterior", "certified_error", "ess", "estimate_checks", "estimate_warnings", "exact_marginal",
    "importance_weights", "log_mean_exp", "log_standard_error", "marginal", "marginal_bounds", "marginal_bounds_many",
    "marginals", "most_likely", "normalized_weights", "psis_khat", "smc_marginal", "smc_marginals",
    "tokenization_posterior",
]
