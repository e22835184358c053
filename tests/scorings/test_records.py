"""What the QA study stores per question (ppl_tok.scorings.records) and the registry's view of the record kinds."""

import math

import pytest

from ppl_tok.datasets import Question
from ppl_tok.scorings.records import (CORE, CORE_FIELDS, PAIR_SCORE_FIELDS, is_flag, is_log, is_nat, list_of,
                                      question_record, run_num_samples, study_values)
from ppl_tok.scorings.registry import SCORINGS, baseline_classifier, record_arrays, recorded_kinds


def test_the_checks_accept_what_the_store_writes_and_nothing_else():
    assert is_nat(0) and is_nat(7) and not any(is_nat(v) for v in (-1, True, 1.0, "3", None))
    assert is_log("-Infinity") and is_log(None) and is_log(-1.5) and is_log(0)
    assert not any(is_log(v) for v in ("Infinity", "NaN", math.nan, math.inf, -math.inf, True, "-1.5"))
    assert is_flag(False) and not is_flag(0)
    assert list_of(is_nat)([1, 2]) and list_of(is_nat)([]) and not list_of(is_nat)([1, -2]) and not list_of(is_nat)(3)
    assert set(CORE_FIELDS) == {"bytes", "seed", "canonical", "canonical_log_prob", "log_p", "log_q", "is_canonical",
                                "samples"}
    assert set(PAIR_SCORE_FIELDS) == {"estimate"}


def test_a_question_record_and_the_study_values_of_a_scoring():
    q = Question(task="toy", id="q7", context="Why?", choices=("a", "bb"), label=1)
    assert question_record("exact", ("test", 3, q), [{"x": 1}, {"x": 2}]) == {
        "kind": "exact", "split": "test", "index": 3, "id": "q7", "label": 1, "choices": [{"x": 1}, {"x": 2}]}
    settings = {"samples": 16, "seed": 5, "proposal": "lookahead", "exact_tolerance": 0.5, "exact_budget": 9,
                "params": {"importance": {"num_samples": 3}}}
    assert run_num_samples(settings) == 16 and run_num_samples({"num_samples": 4, "samples": 16}) == 4
    exact, importance = SCORINGS["exact"], SCORINGS["importance"]
    assert study_values(exact.name, exact.params, settings) == {"exact_tolerance": 0.5, "exact_budget": 9}
    # the study's N and proposal, then the scoring's recorded values over them
    assert study_values(importance.name, importance.params, settings) == {"num_samples": 3,
                                                                          "proposal": {"proposal": "lookahead"}}


def test_the_registry_names_each_record_kind_beside_the_core_one_with_its_scoring():
    kinds = recorded_kinds()
    assert list(kinds)[:3] == ["exact", "stratified", "most-likely"] and CORE not in kinds
    assert all(s.stored_kind == k for k, s in kinds.items())
    assert record_arrays()["exact"] == {"lower": float, "upper": float, "closed": bool}
    assert baseline_classifier() == "canonical"
    with pytest.raises(KeyError):
        kinds[CORE]
