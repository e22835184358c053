"""The summary table's paper column (``ppl_tok/qa/summary.py``)."""
import pytest

from ppl_tok.qa.paper import TUNED_MARGINAL, TUNED_MIXTURE
from ppl_tok.qa.summary import paper_model, summary_markdown, summary_row


@pytest.mark.parametrize("model, expected", [("gemma3-270m", "Gemma"), ("google/gemma-2b", "Gemma"),
                                             ("state-spaces/mamba-130m-hf", "Mamba"), ("smollm2-135m", "Llama2"),
                                             ("meta-llama/Llama-2-7b-hf", "Llama2")])
def test_paper_model_is_the_same_family_else_llama2(model, expected):
    assert paper_model(model) == expected


def report(dataset, model):
    diff = {"diff": 0.01, "low": -0.02, "high": 0.04, "within_noise": True}
    return {"settings": {"dataset": dataset, "model": model, "samples": 64},
            "evaluated": {"tune": 500, "test": 500},
            "accuracy": {"canonical": {"test": 0.2}, "marginal": {"test": 0.21}, "mixture": {"test": 0.21},
                         "canonical+rest": {"test": 0.204}},
            "differences_vs_canonical": {"acc": {"marginal": diff, "mixture": diff, "canonical+rest": diff}},
            "changed_vs_canonical": {"acc": {"marginal": 40, "mixture": 12, "canonical+rest": 3}},
            "tuned": {"k": 8, "alpha": 0.5},
            "paper": {"tuned_marginal": TUNED_MARGINAL[dataset], "tuned_mixture": TUNED_MIXTURE[dataset]}}


def test_row_sets_the_same_family_beside():
    gemma = summary_row(report("openbookqa", "gemma3-270m"), "runs/g")
    assert gemma["paper"] == {"model": "Gemma", "marginal": 0.76, "mixture": 0.4}  # Tables 1-2: 30.6 - 30.2
    smol = summary_row(report("hellaswag", "smollm2-135m"), "runs/s")
    assert smol["paper"] == {"model": "Llama2", "marginal": 0.81, "mixture": 0.1}
    md = summary_markdown([gemma, smol])
    assert "| Gemma: +0.76 / +0.4 |" in md and "| Llama2: +0.81 / +0.1 |" in md
    assert "| openbookqa | gemma3-270m | 64 | 500 | 20.0 | 21.0 (8) | +1.0 [-2.0, +4.0] |" in md
    assert "| 20.4 (3) | +1.0 [-2.0, +4.0] | — | — | Gemma" in md  # canonical+rest (changed); no exact
    assert gemma["canonical+rest"]["changed"] == 3 and "exact" not in gemma
