"""The one table of scorings (ppl_tok/scorings/): names, levels, old names, errors."""

from __future__ import annotations

import pytest

from ppl_tok import scorings as scoring
from ppl_tok.scorings import ALIASES, DOCUMENT, PAIR, QUESTION, SCORINGS, classifier_scoring, classifiers, names


def test_each_level_names_its_scorings():
    assert names(DOCUMENT) == ("canonical", "beam", "prefix", "with-end", "canonical+rest", "canonical-local",
                               "canonical-global", "tree")
    assert names(PAIR) == ("canonical", "importance", "mixture", "canonical+rest", "exact", "stratified",
                            "conditional", "canonical-local", "canonical-global")
    assert "beam" not in names(QUESTION) and "most-likely" in names(QUESTION)


def test_distinct_estimators_have_distinct_names():
    estimators = [s.estimator for s in SCORINGS.values()]
    assert len(set(estimators)) == len(estimators) == len(SCORINGS)
    # the old name marginal meant the beam for documents and importance sampling for requests
    assert ALIASES == {DOCUMENT: {"marginal": "beam"}, PAIR: {"marginal": "importance"}}
    assert scoring.scoring("marginal", DOCUMENT).name == "beam"
    assert scoring.scoring("marginal", PAIR).name == "importance"
    with pytest.raises(ValueError, match="unknown scoring 'marginal'"):
        scoring.scoring("marginal", QUESTION)


def test_an_unknown_name_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown scoring 'nope' for documents .*canonical, beam, prefix, with-end, canonical\+rest, "
                       r"canonical-local, canonical-global, tree "
                                         r"\(old names: marginal = beam\)"):
        scoring.scoring("nope", DOCUMENT)
    with pytest.raises(ValueError, match="unknown level"):
        names("page")


def test_floors_and_the_qa_classifiers():
    assert [s.name for s in SCORINGS.values() if s.floor] == ["beam", "prefix", "with-end", "canonical+rest", "exact",
                                                                      "conditional"]
    assert [s.name for s in SCORINGS.values() if s.ceiling] == ["beam", "prefix", "with-end", "exact", "conditional"]
    assert classifiers() == ("canonical", "marginal", "marginal-all", "mixture", "canonical+rest", "exact",
                             "stratified", "most-likely")
    assert classifier_scoring("marginal-all").name == "importance"
    with pytest.raises(ValueError, match="unknown QA classifier"):
        classifier_scoring("beam")


def test_the_beam_of_documents_defaults_to_the_measured_lazy_setting_and_exhaustive_is_one_field():
    from ppl_tok.scorings.registry import BEAM_LAZY_DEFAULT, ScoringConfig
    from ppl_tok.strings.beam import StringSearchConfig

    lazy = ScoringConfig("beam").search
    assert lazy.lazy and {k: getattr(lazy, k) for k in BEAM_LAZY_DEFAULT} == BEAM_LAZY_DEFAULT
    assert (lazy.beam, lazy.prune) == (StringSearchConfig.beam, StringSearchConfig.prune)
    assert ScoringConfig("beam").settings()["exhaustive"] is False
    full = ScoringConfig("beam", exhaustive=True)
    assert full.search == StringSearchConfig() and full.settings()["exhaustive"] is True
    assert "extend_threshold" not in full.settings()
    # only the beam of documents was measured: the events keep every prefix; scorings without a beam have no search
    for config in (ScoringConfig("prefix"), ScoringConfig("with-end")):
        assert config.search == StringSearchConfig()
    for config in (ScoringConfig("canonical"), ScoringConfig("importance", level=PAIR)):
        with pytest.raises(AttributeError, match=f"scoring '{config.scoring}' has no parameter 'search'"):
            config.search  # noqa: B018
    given = StringSearchConfig(beam=3)  # a search given is the search run
    assert ScoringConfig("beam", search=given).search == given
    with pytest.raises(ValueError, match="exhaustive=True runs every kept prefix, but search has lazy extension"):
        ScoringConfig("beam", search=StringSearchConfig(extend_threshold=0.01), exhaustive=True)
    with pytest.raises(ValueError, match=r"exhaustive \(--exhaustive\): expected True or False, got 'yes'"):
        ScoringConfig("beam", exhaustive="yes")


def test_the_perplexity_docs_list_each_document_scorings_own_flags():
    """docs/perplexity.md's tables are ppl_tok.common.params.markdown_table of each scoring's parameters."""
    from pathlib import Path

    from ppl_tok.common.params import markdown_table, specs
    from ppl_tok.scorings.registry import SCORINGS

    text = (Path(__file__).resolve().parents[2] / "docs" / "perplexity.md").read_text(encoding="utf-8")
    for s in SCORINGS.values():
        if DOCUMENT in s.levels and specs(s.params):  # prefix's and with-end's table is beam's (its default: a ClassVar)
            assert markdown_table(s.params) in text, f"docs/perplexity.md lacks the table of {s.name}'s parameters"
