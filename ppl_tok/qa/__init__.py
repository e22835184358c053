"""The multiple-choice QA study of Geh et al. (2024, Sec. 6): where is the signal in tokenization space?

* :mod:`~ppl_tok.qa.data`: tuning and test splits of the three datasets or of a generic JSON Lines file;
* :mod:`~ppl_tok.qa.run`: canonical scores and importance samples per (question, answer), stored as computed;
* :mod:`~ppl_tok.qa.store`: the append-only, resumable run folder;
* :mod:`~ppl_tok.scorings.classify`: canonical, marginal (choose-k), mixture, exact and other classifiers;
* :mod:`~ppl_tok.qa.report`: tuning, paired bootstrap intervals, tables, plots and ``report.json``;
* :mod:`~ppl_tok.qa.contexts` and :mod:`~ppl_tok.qa.ensemble`: runs of different models combined at the
  string level (Bayesian mixture, product of experts).
"""

from typing import TYPE_CHECKING

from ppl_tok.common.lazy import lazy_names

#: each public name -> its module, imported on first use (:mod:`ppl_tok.common.lazy`)
_LAZY: dict[str, str] = {
    "SplitScores": "ppl_tok.scorings.classify",
    "split_scores": "ppl_tok.qa.report",
    "compute_context_log_probs": "ppl_tok.qa.contexts",
    "DATASETS": "ppl_tok.qa.data",
    "Study": "ppl_tok.qa.data",
    "load_study": "ppl_tok.qa.data",
    "evaluate_ensemble": "ppl_tok.qa.ensemble",
    "evaluate": "ppl_tok.qa.report",
    "write_report": "ppl_tok.qa.report",
    "pair_seed": "ppl_tok.common.seeds",
    "run_study": "ppl_tok.qa.run",
    "study_settings": "ppl_tok.qa.run",
    "ScoreStore": "ppl_tok.qa.store",
    "SettingsMismatchError": "ppl_tok.qa.store",
}

if TYPE_CHECKING:
    from ppl_tok.scorings.classify import SplitScores
    from ppl_tok.qa.contexts import compute_context_log_probs
    from ppl_tok.qa.data import DATASETS, Study, load_study
    from ppl_tok.qa.ensemble import evaluate_ensemble
    from ppl_tok.qa.report import evaluate, split_scores, write_report
    from ppl_tok.common.seeds import pair_seed
    from ppl_tok.qa.run import run_study, study_settings
    from ppl_tok.qa.store import ScoreStore, SettingsMismatchError

__all__ = ["DATASETS", "ScoreStore", "SettingsMismatchError", "SplitScores", "Study", "compute_context_log_probs",
           "evaluate", "evaluate_ensemble", "load_study",
           "pair_seed", "run_study", "split_scores", "study_settings", "write_report"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
